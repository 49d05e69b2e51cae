"""Every ONNX importer module, imported by name so the registry is explicit."""

from pydla.frontend.onnx.ops import (  # noqa: F401
    control,
    conv,
    elementwise,
    indexing,
    logic,
    matmul,
    normalization,
    pooling,
    quantize,
    recurrent,
    reduce,
    resize,
    shape,
    shape_spatial,
    softmax,
)
