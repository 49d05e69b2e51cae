"""Every CPU kernel module, imported by name so the registry is explicit."""

from pydla.backends.cpu.kernels import (  # noqa: F401
    conv,
    elementwise,
    elementwise_activation,
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
    softmax,
)
