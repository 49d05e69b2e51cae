"""Fast Conv tactics for the CPU backend (numba + single-threaded BLAS per thread).

Each module registers one tactic: ``gemm1x1`` (1×1 stride 1), ``depthwise``, ``winograd4`` /
``winograd2`` (3×3 stride 1) and ``im2col`` (any 2-D convolution). They run the layer's
pointwise epilogue in their output loop (``epilogue``) and share one thread pool
(``pydla.backends.cpu.threads``).
"""

from pydla.backends.cpu.kernels.conv_fast import depthwise, gemm1x1, im2col, winograd  # noqa: F401
