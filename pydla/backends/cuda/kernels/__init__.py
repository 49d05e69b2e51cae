"""CUDA kernels, one module per op family; importing this package registers them all."""

from pydla.backends.cuda.kernels import conv, gemm, pointwise, pooling, softmax

__all__ = ["conv", "gemm", "pointwise", "pooling", "softmax"]
