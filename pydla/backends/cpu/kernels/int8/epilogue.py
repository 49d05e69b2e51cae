"""The requantizing epilogue: an int32 tile from a micro-kernel → the layer's output.

Its arithmetic is the interface's (package docstring), in this order, in float32:
``f = float32(acc + corr) · scale (+ float32(r - r_zp) · r_scale)``, then for a quantized
output ``clamp(rint(f) + y_zp, lo, hi)``; ``corr = bias - a_zp · col_sums`` folds both int32
terms into one add. Loops, not array expressions, so that LLVM vectorizes them inside the
fork tasks (conv_fast/simd.py explains why slice expressions stay scalar there).
"""

from __future__ import annotations

import numpy as np
from numba import njit

QUANT, FLOAT, INT32 = 0, 1, 2  # output modes (Fixed literals: numba compiles one branch)


@njit(inline="always", error_model="numpy", boundscheck=False)
def row_span(acc: np.ndarray, a0: int, dst: np.ndarray, d0: int, count: int, corr: np.int32,
             scale: np.float32, mode: int, zp: np.float32, lo: np.float32, hi: np.float32,
             has_res: bool, res: np.ndarray, r_zp: np.float32,
             r_scale: np.float32) -> None:  # pragma: no cover
    """``count`` outputs of one channel (a conv's row): one corr/scale for all."""
    for i in range(count):
        v = np.int32(acc[a0 + i] + corr)
        if mode == INT32:
            dst[d0 + i] = v
            continue
        f = np.float32(v) * scale
        if has_res:
            f = f + (np.float32(res[d0 + i]) - r_zp) * r_scale
        if mode == FLOAT:
            dst[d0 + i] = min(max(f, lo), hi)
        else:
            dst[d0 + i] = min(max(np.rint(f) + zp, lo), hi)


@njit(inline="always", error_model="numpy", boundscheck=False)
def col_span(acc: np.ndarray, a0: int, dst: np.ndarray, d0: int, count: int, corr: np.ndarray,
             scale: np.ndarray, c0: int, mode: int, zp: np.float32, lo: np.float32,
             hi: np.float32, has_res: bool, res: np.ndarray, r_zp: np.float32,
             r_scale: np.float32) -> None:  # pragma: no cover
    """``count`` outputs of one GEMM row: channel c0 + i has its own corr/scale."""
    for i in range(count):
        v = np.int32(acc[a0 + i] + corr[c0 + i])
        if mode == INT32:
            dst[d0 + i] = v
            continue
        f = np.float32(v) * scale[c0 + i]
        if has_res:
            f = f + (np.float32(res[d0 + i]) - r_zp) * r_scale
        if mode == FLOAT:
            dst[d0 + i] = min(max(f, lo), hi)
        else:
            dst[d0 + i] = min(max(np.rint(f) + zp, lo), hi)
