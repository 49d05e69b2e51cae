"""int8 GEMM on the vector paths: out (M, N) = requant(A (M, K) u8 @ Wᵀ), the packed
weights as the vector operand (pack.py) and R rows of A broadcast, KG bytes at a time.

A is read in place when it is uint8 with K a multiple of KG (the last, partial block of
rows goes through a small per-thread copy); otherwise (int8 activations to shift, or a
K to pad) a first fork call copies it, shifted and padded, into a scratch buffer.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from numba import njit

from pydla.backends.cpu import threads
from pydla.backends.cpu.fork import fork_call
from pydla.backends.cpu.kernels.int8.dot import AVX2, PATHS, VNNI, micro_kernel
from pydla.backends.cpu.kernels.int8.requant import LANES, requant
from pydla.backends.cpu.kernels.int8.thunk import bound
from pydla.backends.cpu.steps import Fixed
from pydla.backends.cpu.workspace import aligned_zeros

_MK_VNNI = micro_kernel(VNNI.name, VNNI.rows, VNNI.cols, False)
_MK_AVX2 = micro_kernel(AVX2.name, AVX2.rows, AVX2.cols, False)
PATH_IDS = {VNNI.name: 0, AVX2.name: 1}
_R0, _VC0, _KG0 = VNNI.rows, VNNI.vec_cols, VNNI.kg
_R1, _VC1, _KG1 = AVX2.rows, AVX2.vec_cols, AVX2.kg
_TAP0 = np.zeros(1, np.int64)  # the GEMM's one "tap": no offset


@njit(cache=True, error_model="numpy", boundscheck=False)
def copy_task(t: int, nthreads: int, a: np.ndarray, dst: np.ndarray,
              flip: int) -> None:  # pragma: no cover
    """Thread t's rows of A, shifted by ``flip`` and zero-padded, into dst (Mp, Kp)."""
    m, k = a.shape
    f = np.uint8(flip)
    for i in range(t * m // nthreads, (t + 1) * m // nthreads):
        src, row = a[i], dst[i]
        for j in range(k):
            row[j] = src[j] ^ f


@njit(cache=True, error_model="numpy", boundscheck=False)
def gemm_task(t: int, nthreads: int, path_id: int, a: np.ndarray, w: np.ndarray,
              corr: np.ndarray, scale: np.ndarray, out: np.ndarray, out_kind: int,
              zp: np.float32, lo: np.float32, hi: np.float32, res_kind: int, res: np.ndarray,
              r_zp: np.float32,
              r_scale: np.float32, dq: np.float32, scratch: np.ndarray, tail: np.ndarray,
              taps: np.ndarray) -> None:  # pragma: no cover
    """Thread t's share of the (channel panel, row block) tiles, panel-major: consecutive
    tiles share a panel of weights."""
    rows_r = _R0 if path_id == 0 else _R1
    vc = _VC0 if path_id == 0 else _VC1
    kg = _KG0 if path_id == 0 else _KG1
    m, n = out.shape
    panels, ksteps = w.shape[0], w.shape[1]
    row_blocks = (m + rows_r - 1) // rows_r
    lda = a.strides[0]
    acc = scratch[t]
    my_tail = tail[t]
    items = panels * row_blocks
    for item in range(t * items // nthreads, (t + 1) * items // nthreads):
        pn = item // row_blocks
        rb = item % row_blocks
        m0 = rb * rows_r
        rows = min(rows_r, m - m0)
        if rows < rows_r and a.shape[0] < m0 + rows_r:
            # past A's last row: copy the block's rows into zeroed scratch rows
            for r in range(rows_r):
                for j in range(ksteps * kg):
                    my_tail[r, j] = a[m0 + r, j] if r < rows else 0
            b, b_row = my_tail.ctypes.data, my_tail.strides[0]
        else:
            b, b_row = a.ctypes.data + m0 * lda, lda
        v = w.ctypes.data + pn * w.strides[0]
        if path_id == 0:
            _MK_VNNI(ksteps, 1, v, w.strides[1], taps.ctypes.data, b, b_row, acc.ctypes.data)
        else:
            _MK_AVX2(ksteps, 1, v, w.strides[1], taps.ctypes.data, b, b_row, acc.ctypes.data)
        n0 = pn * vc
        cols = min(vc, n - n0)
        for r in range(rows):
            d = (m0 + r) * n + n0
            for c in range(0, cols, LANES):
                requant(out_kind, res_kind, acc.ctypes.data + 4 * (r * vc + c),
                        corr.ctypes.data + 4 * (n0 + c), scale.ctypes.data + 4 * (n0 + c), 1,
                        out.ctypes.data + (d + c) * out.itemsize, min(LANES, cols - c), zp, lo,
                        hi, res.ctypes.data + (d + c) * res.itemsize, r_zp, r_scale, dq)


def bind(a: np.ndarray, wdata: np.ndarray, path_name: str, flip: int, corr: np.ndarray,
         scale: np.ndarray, out: np.ndarray, kinds: tuple[int, int],
         q: tuple[float, float, float], residual: np.ndarray | None,
         r_q: tuple[float, float, float]) -> Callable[[], object]:
    """The GEMM's fork call(s), bound to these buffers; corr and scale padded to the packed
    panels' width (requant loads whole vectors of them)."""
    path = PATHS[path_name]
    m, k = a.shape
    k_pad = wdata.shape[1] * path.kg
    nthreads = threads.configure()
    a8 = a.view(np.uint8)
    steps = []
    if flip or k_pad != k or not a8.flags.c_contiguous:
        rows_pad = -(-m // path.rows) * path.rows
        src = aligned_zeros((rows_pad, k_pad), np.uint8)
        n_copy = max(1, min(nthreads, m // 64))
        steps.append(fork_call(copy_task, n_copy, n_copy, a8, src, flip))
    else:
        src = a8
    scratch = aligned_zeros((nthreads, path.rows * path.vec_cols), np.int32)
    tail = aligned_zeros((nthreads, path.rows, k_pad), np.uint8)
    res = residual if residual is not None else out
    items = wdata.shape[0] * -(-m // path.rows)
    nt = max(1, min(nthreads, items))
    steps.append(fork_call(gemm_task, nt, nt, Fixed(PATH_IDS[path_name]), src, wdata, corr,
                              scale, out, Fixed(kinds[0]), np.float32(q[0]), np.float32(q[1]),
                              np.float32(q[2]), Fixed(kinds[1]), res,
                              np.float32(r_q[0]), np.float32(r_q[1]), np.float32(r_q[2]),
                              scratch, tail, _TAP0))
    return bound(steps, (src, scratch, tail, res, corr, scale))
