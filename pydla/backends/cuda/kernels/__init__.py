"""CUDA kernels, one module per op family; importing this package registers them all."""

from pydla.backends.cuda.kernels import (
    argreduce,
    conv,
    conv_transpose,
    gemm,
    indexing,
    matmul,
    normalization,
    pad,
    pointwise,
    pooling,
    qconv,
    qgemm,
    quantize,
    rearrange,
    recurrent,
    recurrent_gru,
    reduce,
    resize,
    shape,
    softmax,
    topk,
    tree_ensemble,
)

__all__ = ["argreduce", "conv", "conv_transpose", "gemm", "indexing", "matmul", "normalization",
           "pad", "pointwise", "pooling", "qconv", "qgemm", "quantize", "rearrange", "recurrent",
           "recurrent_gru", "reduce", "resize", "shape", "softmax", "topk", "tree_ensemble"]
