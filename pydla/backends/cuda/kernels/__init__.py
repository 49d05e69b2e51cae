"""CUDA kernels, one module per op family; importing this package registers them all."""

from pydla.backends.cuda.kernels import (
    conv,
    conv_transpose,
    gemm,
    matmul,
    normalization,
    pointwise,
    pooling,
    recurrent,
    reduce,
    resize,
    shape,
    softmax,
)

__all__ = ["conv", "conv_transpose", "gemm", "matmul", "normalization", "pointwise", "pooling",
           "recurrent", "reduce", "resize", "shape", "softmax"]
