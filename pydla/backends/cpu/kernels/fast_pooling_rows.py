"""MaxPool over NCHW rows, tap by tap: the ``rows`` tactic.

The ``planes`` tactic (fast_pooling) reduces a window's rows first and then the reduced
row over the kernel's columns, through tables of row addresses and a strided row split
into phases: few operations per output, but a fixed cost per output row that dominates on
short rows — CRNN's 2×2 pools over 64- and 32-wide rows ran 33 µs where onnxruntime took
12. Here each output row is the maximum of its taps' input runs, one tap at a time: the
row starts at -inf and every tap inside the image takes the maximum with a run of the
input row (stride 1 or 2 written out, so that LLVM vectorizes the run), padding skipped.
KH·KW passes instead of KH + KW, so the autotuner keeps ``planes`` for wide windows
(YOLO's 5×5 SPPF) and picks this one for the small ones.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numba import njit, prange

from pydla.backends.base import LayerSpec, RunFn
from pydla.backends.cpu import threads
from pydla.backends.cpu.kernels.conv_fast.geometry import inside
from pydla.backends.cpu.kernels.fast_pooling import PARALLEL_MIN, _applies_window
from pydla.backends.cpu.kernels.pooling import _Windows
from pydla.backends.cpu.registry import tactic
from pydla.backends.cpu.steps import PreboundKernel, Thunk, kernel_call


@njit(inline="always", error_model="numpy")
def _take_max(out: np.ndarray, row: np.ndarray, q0: int, q1: int, first: int,
              sw: int) -> None:
    """out[q] = max(out[q], row[first + q·sw]) for q0 ≤ q < q1; a NaN wins (np.maximum).
    Indices count from 0 within slices and the test is one select without branches
    (``|``, not ``or``): what LLVM vectorizes."""
    n = q1 - q0
    if n <= 0:
        return
    dst, src = out[q0:q1], row[first + q0 * sw:]
    if sw == 1:
        for k in range(n):
            v, m = src[k], dst[k]
            dst[k] = m if (m >= v) | (m != m) else v
    elif sw == 2:
        for k in range(n):
            v, m = src[2 * k], dst[k]
            dst[k] = m if (m >= v) | (m != m) else v
    else:
        for k in range(n):
            v, m = src[k * sw], dst[k]
            dst[k] = m if (m >= v) | (m != m) else v


@njit(inline="always", error_model="numpy")
def _take_max_pair(out: np.ndarray, row: np.ndarray, q0: int, q1: int, first: int) -> None:
    """``_take_max`` at stride 2 for two adjacent kernel columns (first, first + 1) at once:
    both halves of each pair of inputs are read, which LLVM vectorizes as one interleaved
    load (one column alone at stride 2 stayed scalar: 96 µs for CRNN's first pool)."""
    n = q1 - q0
    if n <= 0:
        return
    dst, src = out[q0:q1], row[first + q0 * 2:]
    for k in range(n):
        a, b, m = src[2 * k], src[2 * k + 1], dst[k]
        v = a if (a >= b) | (a != a) else b
        dst[k] = m if (m >= v) | (m != m) else v


@njit(cache=True, parallel=True, error_model="numpy")
def max_rows(x: np.ndarray, y: np.ndarray, geo: np.ndarray, cols: np.ndarray,
             nthreads: int) -> None:
    """x (planes, h, w), y (planes, oh, ow); geo [kh, sh, dh, top]; cols (kw, 3): each
    kernel column's first input column and its output columns [q0, q1) inside the row."""
    planes, h = x.shape[0], x.shape[1]
    oh = y.shape[1]
    kh, sh, dh, top = geo[0], geo[1], geo[2], geo[3]
    sw = geo[4]
    tasks = planes * oh
    per = -(-tasks // nthreads)
    for t in prange(nthreads):
        for task in range(t * per, min(tasks, (t + 1) * per)):
            p, r = task // oh, task % oh
            out = y[p, r]
            out[:] = -np.inf
            for i in range(kh):
                iy = r * sh - top + i * dh
                if iy < 0 or iy >= h:
                    continue
                row = x[p, iy]
                j = 0
                while j < cols.shape[0]:
                    f, q0, q1 = cols[j, 0], cols[j, 1], cols[j, 2]
                    if sw == 2 and j + 1 < cols.shape[0] and cols[j + 1, 0] == f + 1:
                        g0, g1 = cols[j + 1, 1], cols[j + 1, 2]
                        a0, a1 = max(q0, g0), min(q1, g1)
                        if a0 < a1:  # the pair together, each column's ends alone
                            _take_max_pair(out, row, a0, a1, f)
                            _take_max(out, row, q0, min(q1, a0), f, sw)
                            _take_max(out, row, max(q0, a1), q1, f, sw)
                            _take_max(out, row, g0, min(g1, a0), f + 1, sw)
                            _take_max(out, row, max(g0, a1), g1, f + 1, sw)
                            j += 2
                            continue
                    _take_max(out, row, q0, q1, f, sw)
                    j += 1


def _columns(w: int, ow: int, kw: int, sw: int, dw: int, left: int) -> np.ndarray:
    """(kw, 3): kernel column j reads input column first + q·sw for output q0 ≤ q < q1."""
    return np.array([(j * dw - left, *inside(j * dw - left, ow, sw, w)) for j in range(kw)],
                    np.int64).reshape(kw, 3)


def _applies(spec: LayerSpec) -> bool:
    return spec.op == "MaxPool" and _applies_window(spec)


@tactic("MaxPool", "rows", applies=_applies, priority=9)
def bind_max_rows(spec: LayerSpec) -> RunFn:
    win = _Windows(spec)
    x = spec.inputs[0]
    assert x is not None
    n, c, h, w = x.shape
    oh, ow = win.out_sizes
    kh, kw = win.kernel
    sh, sw = win.strides
    dh, dw = win.dilations
    top, left = win.begin
    nthreads = threads.configure() if n * c * h * w >= PARALLEL_MIN else 1
    geo = np.array([kh, sh, dh, top, sw], np.int64)
    cols = _columns(w, ow, kw, sw, dw, left)

    def prebind(ins: Sequence[np.ndarray | None], outs: Sequence[np.ndarray]) -> Thunk:
        xs = ins[0]
        assert xs is not None
        return kernel_call(max_rows, np.ascontiguousarray(xs).reshape(n * c, h, w),
                           outs[0].reshape(n * c, oh, ow), geo, cols, nthreads)

    return PreboundKernel(prebind)
