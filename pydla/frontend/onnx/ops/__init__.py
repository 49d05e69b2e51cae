"""Every ONNX importer module, imported by name so the registry is explicit."""

from pydla.frontend.onnx.ops import (  # noqa: F401
    attention,
    control,
    conv,
    elementwise,
    indexing,
    logic,
    loops,
    losses,
    matmul,
    misc_ops,
    normalization,
    pooling,
    quantize,
    recurrent,
    reduce,
    resize,
    shape,
    shape_spatial,
    signal,
    softmax,
)
