"""MaxPool, AveragePool and the global pools as numba loops over NCHW planes (tactic
``planes``).

2-D windows are separable: for each output row a vertical pass reduces the window's input
rows into one row (per-thread scratch), a horizontal pass reduces that over the kernel's
columns — KH + KW operations per output instead of KH·KW (SPPF's 5×5: 10 instead of 25).
A strided row is split into its phases first, so that every pass is contiguous; passes
run as explicit 16-lane vectors with a masked last one (simd.vector_reduce) — LLVM's own
loops left rows shorter than 64 floats scalar (ResNet-50's 3×3/2 pool: 0.24 -> 0.11 ms).
Padding is never materialised: out-of-range taps are skipped, and average pooling divides
by the reference's own count of taps (``count_include_pad`` as planned). Planes are split
evenly over the engine's threads.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
from numba import njit, prange

from pydla.backends.base import LayerSpec, RunFn
from pydla.backends.cpu import threads
from pydla.backends.cpu.kernels.conv_fast.simd import deinterleave2, vector_reduce
from pydla.backends.cpu.kernels.fast_math import FASTMATH, FASTMATH_REDUCE, float32_compute
from pydla.backends.cpu.kernels.pooling import _Windows
from pydla.backends.cpu.registry import tactic
from pydla.backends.cpu.steps import PreboundKernel, kernel_call

Thunk = Callable[[], None]

# Below this many input elements the layer runs on one thread.
PARALLEL_MIN = 1 << 12  # a window pool costs ~10 operations per element: split early
# geo layout: [planes, H, W, OH, OW, KH, KW, SH, SW, DH, DW, top, left, parts, is_max,
#              lo_all, hi_all, pstride] — see row_geometry
_NEG_INF = np.float32(-np.inf)


_VMAX, _VADD = vector_reduce("max"), vector_reduce("add")
_VMAX_WHOLE, _VADD_WHOLE = vector_reduce("max", True), vector_reduce("add", True)


@njit(inline="always")
def _lanes(n: int) -> int:
    """n rounded up to whole vectors of 16: the scratch row and phases are written whole
    vectors at a time, past their last value."""
    return (n + 15) & ~15


@njit(inline="always")
def _reduce(is_max: bool, whole: bool, table: np.ndarray, k: int, dst: int, n: int) -> None:
    """n floats at address dst = ⊕ of the k rows whose addresses are in table; ``whole``:
    dst is scratch with room for whole vectors (the last store is not masked)."""
    if whole:
        if is_max:
            _VMAX_WHOLE(table.ctypes.data, k, dst, n)
        else:
            _VADD_WHOLE(table.ctypes.data, k, dst, n)
    elif is_max:
        _VMAX(table.ctypes.data, k, dst, n)
    else:
        _VADD(table.ctypes.data, k, dst, n)


@njit(cache=True, error_model="numpy", fastmath=FASTMATH)
def _plane(x: np.ndarray, y: np.ndarray, tmp: np.ndarray, table: np.ndarray,
           cnt: np.ndarray, p: int, geo: np.ndarray, offs: np.ndarray) -> None:
    h, w, oh, ow = geo[1], geo[2], geo[3], geo[4]
    kh, kw, sh, sw, dh, dw, top, left = (geo[5], geo[6], geo[7], geo[8], geo[9], geo[10],
                                         geo[11], geo[12])
    is_max = geo[14] != 0
    init = _NEG_INF if is_max else np.float32(0)
    plane = x.ctypes.data + p * h * w * 4
    outs = y[p * oh * ow:(p + 1) * oh * ow]
    col, phases = tmp[:w], tmp[_lanes(w):]
    lo_all, hi_all, pstride = geo[15], geo[16], geo[17]
    rows_at, taps_at = table[:kh], table[kh:kh + kw]  # addresses of rows / tap runs
    direct = kw == 1 and sw == 1 and left == 0 and ow == w
    for r in range(oh):
        out = outs[r * ow:(r + 1) * ow]
        # Vertical first: the window's valid input rows reduced into one row, then that
        # row over the kernel's columns — at stride 2 half the rows of reducing every
        # input row first.
        if dh == 1:
            first, last = max(0, top - r * sh), min(kh - 1, h - 1 + top - r * sh)
        else:
            first = max(0, -(-(top - r * sh) // dh))
            last = min(kh - 1, (h - 1 + top - r * sh) // dh)
        if last < first:
            for o in range(ow):
                out[o] = init
        else:
            for i in range(first, last + 1):
                rows_at[i - first] = plane + (r * sh + i * dh - top) * w * 4
            if direct:  # a k×1 window: the reduced rows are the output row
                _reduce(is_max, False, rows_at, last - first + 1, out.ctypes.data, w)
            else:
                _reduce(is_max, True, rows_at, last - first + 1, col.ctypes.data, w)
                _row(col, out, kw, sw, dw, left, is_max, init, phases, pstride, lo_all,
                     hi_all, offs, taps_at)
        if not is_max:
            counts = cnt[r * ow:(r + 1) * ow]
            for o in range(ow):
                out[o] /= counts[o]


@njit(inline="always", error_model="numpy", fastmath=FASTMATH)
def _row(x: np.ndarray, acc: np.ndarray, kw: int, sw: int, dw: int, left: int,
         is_max: bool, init: float, phases: np.ndarray, pstride: int, lo_all: int,
         hi_all: int, offs: np.ndarray, table: np.ndarray) -> None:
    """acc[o] = ⊕ over the kernel's columns j of x[o·sw + j·dw - left] (⊕: max or +),
    taps outside the row skipped. A strided row is first split into its sw phases (phase
    q holds columns q, q + sw, … from phases[q·pstride]), so that every tap is a
    contiguous run; the columns
    every tap reaches (lo_all ≤ o < hi_all, tap j's run at byte offs[j] of the row or its
    phases) are reduced as whole vectors, the few at the edges one by one."""
    w, ow = x.shape[0], acc.shape[0]
    if sw == 2:
        # Whole pairs of vectors, past the row's end into scratch (nothing masked).
        odd = phases.ctypes.data + pstride * 4
        deinterleave2(x.ctypes.data, phases.ctypes.data, odd, (w + 31) & ~31)
    elif sw > 1:
        for q in range(sw):
            for t in range((w - q + sw - 1) // sw):
                phases[q * pstride + t] = x[q + sw * t]
    if hi_all > lo_all:
        base = phases.ctypes.data if sw > 1 else x.ctypes.data
        for j in range(kw):
            table[j] = base + offs[j]
        _reduce(is_max, False, table, kw, acc.ctypes.data + lo_all * 4, hi_all - lo_all)
    edge = min(lo_all, ow)
    for o in range(edge):
        acc[o] = _edge(x, o, kw, sw, dw, left, is_max, init)
    for o in range(max(hi_all, edge), ow):
        acc[o] = _edge(x, o, kw, sw, dw, left, is_max, init)


@njit(inline="always", error_model="numpy", fastmath=FASTMATH)
def _edge(x: np.ndarray, o: int, kw: int, sw: int, dw: int, left: int, is_max: bool,
          init: float) -> float:
    """Output column o of a row whose window passes the row's end: its valid taps only."""
    w = x.shape[0]
    m = init
    for j in range(kw):
        c = o * sw + j * dw - left
        if 0 <= c < w:
            v = x[c]
            m = (v if v > m else m) if is_max else m + v
    return m


@njit(parallel=True, cache=True, nogil=True, error_model="numpy",
      fastmath=FASTMATH_REDUCE)
def pool_par(x: np.ndarray, y: np.ndarray, scratch: np.ndarray, tables: np.ndarray,
             cnt: np.ndarray, geo: np.ndarray, offs: np.ndarray) -> None:
    planes, parts = geo[0], geo[13]
    per = (planes + parts - 1) // parts
    for t in prange(parts):
        for p in range(t * per, min(planes, (t + 1) * per)):
            _plane(x, y, scratch[t], tables[t], cnt, p, geo, offs)


@njit(cache=True, nogil=True, error_model="numpy", fastmath=FASTMATH_REDUCE)
def pool_seq(x: np.ndarray, y: np.ndarray, scratch: np.ndarray, tables: np.ndarray,
             cnt: np.ndarray, geo: np.ndarray, offs: np.ndarray) -> None:
    for p in range(geo[0]):
        _plane(x, y, scratch[0], tables[0], cnt, p, geo, offs)


@njit(cache=True, error_model="numpy", fastmath=FASTMATH_REDUCE)
def _global(x: np.ndarray, y: np.ndarray, p: int, size: int, is_max: bool) -> None:
    base = p * size
    if is_max:
        m = _NEG_INF
        for i in range(size):
            v = x[np.uint64(base + i)]
            m = v if (v > m or v != v) else m
        y[p] = m
    else:
        s = np.float32(0)
        for i in range(size):
            s += x[np.uint64(base + i)]
        y[p] = s / np.float32(size)


@njit(parallel=True, cache=True, nogil=True, error_model="numpy",
      fastmath=FASTMATH_REDUCE)
def global_par(x: np.ndarray, y: np.ndarray, size: int, is_max: bool) -> None:
    for p in prange(y.size):
        _global(x, y, p, size, is_max)


@njit(cache=True, nogil=True, error_model="numpy", fastmath=FASTMATH_REDUCE)
def global_seq(x: np.ndarray, y: np.ndarray, size: int, is_max: bool) -> None:
    for p in range(y.size):
        _global(x, y, p, size, is_max)


def _float32(spec: LayerSpec) -> bool:
    return len(spec.outputs) == 1 and float32_compute(spec.inputs[0], spec.outputs[0])


def _applies_window(spec: LayerSpec) -> bool:
    x = spec.inputs[0]
    if not _float32(spec) or x is None or len(x.shape) != 4:
        return False
    if spec.op == "MaxPool" and int(spec.attrs.get("storage_order", 0)) != 0:
        return False
    return len(spec.attrs["kernel_shape"]) == 2


def _prebound(run: Callable[[np.ndarray, np.ndarray], Thunk]) -> RunFn:
    """A RunFn over ``run(x, y) -> thunk`` (flat contiguous views of input and output)."""

    def prebind(ins: Sequence[np.ndarray | None], outs: Sequence[np.ndarray]) -> Thunk:
        x = ins[0]
        assert x is not None
        return run(np.ascontiguousarray(x).reshape(-1), outs[0].reshape(-1))

    return PreboundKernel(prebind)


def row_geometry(w: int, ow: int, kw: int, sw: int, dw: int,
                 left: int) -> tuple[int, int, int, np.ndarray]:
    """The horizontal pass's geometry, computed once at bind (integer divisions by a
    run-time stride cost more than a short row's vector work): the output columns every
    tap reaches, lo_all ≤ o < hi_all, the floats between phases (⌈w / sw⌉ in whole
    vectors) and each tap's byte offset to its run in the row (sw 1) or its phase."""
    pstride = ((w + sw - 1) // sw + 15) // 16 * 16
    lo_all, hi_all = 0, ow
    for j in range(kw):
        off = j * dw - left
        lo_all = max(lo_all, (-off + sw - 1) // sw)
        hi_all = min(hi_all, (w - 1 - off) // sw + 1)
    offs = np.zeros(kw, np.int64)
    for j in range(kw):
        off = j * dw - left
        q = off % sw
        offs[j] = (q * pstride + (off - q) // sw + lo_all) * 4
    return lo_all, hi_all, pstride, offs


def bind_window_pool(spec: LayerSpec) -> RunFn:
    win = _Windows(spec)
    x = spec.inputs[0]
    assert x is not None
    n, c, h, w = x.shape
    oh, ow = win.out_sizes
    (kh, kw), sw = win.kernel, win.strides[1]
    is_max = spec.op == "MaxPool"
    nthreads = threads.configure()
    planes = n * c
    parallel = nthreads > 1 and planes > 1 and n * c * h * w >= PARALLEL_MIN
    parts = min(nthreads, planes) if parallel else 1
    lo_all, hi_all, pstride, offs = row_geometry(w, ow, kw, sw, win.dilations[1],
                                                 win.begin[1])
    geo = np.array([planes, h, w, oh, ow, *win.kernel, *win.strides, *win.dilations,
                    *win.begin, parts, int(is_max), lo_all, hi_all, pstride], np.int64)
    count = (np.ones((1,), np.float32) if is_max else
             np.maximum(win.count(bool(spec.attrs.get("count_include_pad", 0))), 1)
             .astype(np.float32).reshape(-1))
    # Per thread: the reduced row, then its phases, each in whole vectors, and a vector
    # more (the pair deinterleave2 reads past the row).
    scratch = np.zeros((parts, -(-w // 16) * 16 + sw * pstride + 16), np.float32)
    # Row addresses for _reduce, a cache line apart per thread: written every row, a
    # shared line went back and forth between the cores (the pool ran 2× slower).
    tables = np.zeros((parts, -(-(kh + kw) // 8) * 8 + 8), np.int64)
    kernel = pool_par if parallel else pool_seq
    if planes * oh * ow == 0:
        return _prebound(lambda x, y: _nothing)
    return _prebound(lambda x, y: kernel_call(kernel, x, y, scratch, tables, count,
                                              geo, offs))


def bind_global_pool(spec: LayerSpec) -> RunFn:
    x = spec.inputs[0]
    assert x is not None
    planes = x.shape[0] * x.shape[1]
    size = int(np.prod(x.shape[2:], dtype=np.int64))
    parallel = threads.configure() > 1 and planes > 1 and planes * size >= PARALLEL_MIN
    kernel = global_par if parallel else global_seq
    if planes * size == 0:
        return _prebound(lambda x, y: _nothing)
    is_max = spec.op == "GlobalMaxPool"
    return _prebound(lambda x, y: kernel_call(kernel, x, y, size, is_max))


def _applies_global(spec: LayerSpec) -> bool:
    x = spec.inputs[0]
    return _float32(spec) and x is not None and len(x.shape) >= 3


def _nothing() -> None:
    """An empty tensor: nothing to pool."""


for _op in ("MaxPool", "AveragePool"):
    tactic(_op, "planes", applies=_applies_window, priority=10)(bind_window_pool)
for _op in ("GlobalAveragePool", "GlobalMaxPool"):
    tactic(_op, "planes", applies=_applies_global, priority=10)(bind_global_pool)
