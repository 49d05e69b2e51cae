"""Fast Conv tactics for the CPU backend: numba kernels in one thread pool
(pydla.backends.cpu.threads), each running the layer's pointwise epilogue in its output loop.

Tactics (one module each): ``gemm1x1`` (1×1, any stride), ``gemv`` (1×1 on planes of a
few pixels: squeeze-excitation), ``depthwise`` and
``depthwise_c16`` (planes, or blocks of 16 channels), ``direct_c16`` (few input channels:
stems), ``direct_planes`` (few output channels per group, long 1-D filters; planar or
blocked), ``winograd4`` / ``winograd2`` (3×3 stride 1), ``im2col`` (any 2-D convolution,
as an implicit GEMM), ``taps_c16`` (any one-group convolution as a GEMM over kernel taps
on staged blocks of 16 channels) and ``transpose`` (ConvTranspose with kernel = stride, tactic
``gemm_scatter``). In the channel-blocked layout (pydla.plan.layouts): ``gemm_c16``
(1×1, tactic ``gemm_nchw16c``), ``depthwise_nchw16c`` (input read in place),
``direct_c16`` (``direct_nchw16c``: a stem from a planar image into blocks), ``taps_c16``
(``taps_nchw16c``) and ``winograd`` (``winograd4_nchw16c``, ``winograd2_nchw16c``).
Every kernel's scratch is the bound program's one workspace (pydla.backends.cpu.workspace).
Shared pieces: ``geometry`` (the layer's shape), ``binding`` (the binder frame),
``epilogue`` (compiled pointwise programs), ``gemm`` (packed AVX-512-class GEMM),
``simd`` (16-lane vector intrinsics), ``phases`` (strided input as shifted rows) and
``blas`` (numpy's own cblas_sgemm for numba code, used by other kernels).
"""

from pydla.backends.cpu.kernels.conv_fast import (  # noqa: F401
    depthwise,
    depthwise_c16,
    depthwise_nchw16c,
    direct_c16,
    direct_planes,
    gemm1x1,
    gemm_c16,
    gemv,
    im2col,
    taps_c16,
    transpose,
    winograd,
)
