"""MaxPool, AveragePool and the global pools as numba loops over NCHW planes (tactic
``planes``).

2-D windows are separable: a horizontal pass reduces each input row over the kernel's
columns into a per-thread scratch plane (H × OW), a vertical pass reduces that over the
kernel's rows — KH + KW operations per output instead of KH·KW (SPPF's 5×5: 10 instead of
25). A strided row is split into its phases first, so that every pass is contiguous and
vectorises without gathers. Padding is never materialised: out-of-range taps are
skipped, and average pooling divides by the reference's own count of taps
(``count_include_pad`` as planned). Planes are split evenly over the engine's threads.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

import numpy as np
from numba import njit, prange

from pydla.backends.base import LayerSpec, RunFn
from pydla.backends.cpu import threads
from pydla.backends.cpu.kernels.fast_math import FASTMATH, FASTMATH_REDUCE, float32_compute
from pydla.backends.cpu.kernels.pooling import _Windows
from pydla.backends.cpu.registry import tactic
from pydla.backends.cpu.steps import PreboundKernel

Thunk = Callable[[], None]

# Below this many input elements the layer runs on one thread.
PARALLEL_MIN = 1 << 12  # a window pool costs ~10 operations per element: split early
# geo layout: [planes, H, W, OH, OW, KH, KW, SH, SW, DH, DW, top, left, parts, is_max]
_NEG_INF = np.float32(-np.inf)


@njit(cache=True, error_model="numpy", fastmath=FASTMATH)
def _plane(x: np.ndarray, y: np.ndarray, tmp: np.ndarray, cnt: np.ndarray, p: int,
           geo: np.ndarray) -> None:
    h, w, oh, ow = geo[1], geo[2], geo[3], geo[4]
    kh, kw, sh, sw, dh, dw, top, left = (geo[5], geo[6], geo[7], geo[8], geo[9], geo[10],
                                         geo[11], geo[12])
    is_max = geo[14] != 0
    init = _NEG_INF if is_max else np.float32(0)
    xb, yb = p * h * w, p * oh * ow
    # Rows reduced over the kernel's columns (into tmp, H × OW), unless that is the row
    # itself (a k×1 window): then the vertical pass reads the input directly.
    direct = kw == 1 and sw == 1 and left == 0 and ow == w
    src, src_at, ld = (x, xb, w) if direct else (tmp, 0, ow)
    if not direct:
        phases = tmp[h * ow:]
        for ih in range(h):
            _row(x, xb + ih * w, w, tmp, ih * ow, ow, kw, sw, dw, left, is_max, init, phases)
    for r in range(oh):
        out = yb + r * ow
        for o in range(ow):
            y[np.uint64(out + o)] = init
        for i in range(kh):
            ih = r * sh + i * dh - top
            if ih < 0 or ih >= h:
                continue
            row = src_at + ih * ld
            for o in range(ow):
                v = src[np.uint64(row + o)]
                t = y[np.uint64(out + o)]
                y[np.uint64(out + o)] = (v if v > t else t) if is_max else t + v
        if not is_max:
            for o in range(ow):
                y[np.uint64(out + o)] /= cnt[np.uint64(r * ow + o)]


@njit(inline="always", cache=True, error_model="numpy", fastmath=FASTMATH)
def _row(x: np.ndarray, row: int, w: int, acc: np.ndarray, at: int, ow: int, kw: int,
         sw: int, dw: int, left: int, is_max: bool, init: float, phases: np.ndarray) -> None:
    """acc[at + o] = ⊕ over the kernel's columns j of x[row + o·sw + j·dw - left] (⊕: max or
    +), taps outside the row skipped. A strided row is first split into its sw phases
    (phase q holds columns q, q + sw, …), so that every tap is a contiguous run."""
    plen = (w + sw - 1) // sw
    if sw > 1:
        for q in range(sw):
            for t in range((w - q + sw - 1) // sw):
                phases[np.uint64(q * plen + t)] = x[np.uint64(row + q + sw * t)]
    for o in range(ow):
        acc[np.uint64(at + o)] = init
    for j in range(kw):
        off = j * dw - left
        # Output columns whose tap lands inside the row: 0 ≤ o·sw + off < w.
        lo = max(0, (-off + sw - 1) // sw)
        hi = min(ow, (w - 1 - off) // sw + 1)
        q = off % sw
        base = q * plen + (off - q) // sw if sw > 1 else row + off
        values = phases if sw > 1 else x
        for o in range(lo, hi):
            v = values[np.uint64(base + o)]
            t = acc[np.uint64(at + o)]
            acc[np.uint64(at + o)] = (v if v > t else t) if is_max else t + v


@njit(parallel=True, cache=True, nogil=True, error_model="numpy",
      fastmath=FASTMATH_REDUCE)
def pool_par(x: np.ndarray, y: np.ndarray, scratch: np.ndarray, cnt: np.ndarray,
             geo: np.ndarray) -> None:
    planes, parts = geo[0], geo[13]
    per = (planes + parts - 1) // parts
    for t in prange(parts):
        for p in range(t * per, min(planes, (t + 1) * per)):
            _plane(x, y, scratch[t], cnt, p, geo)


@njit(cache=True, nogil=True, error_model="numpy", fastmath=FASTMATH_REDUCE)
def pool_seq(x: np.ndarray, y: np.ndarray, scratch: np.ndarray, cnt: np.ndarray,
             geo: np.ndarray) -> None:
    for p in range(geo[0]):
        _plane(x, y, scratch[0], cnt, p, geo)


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


def bind_window_pool(spec: LayerSpec) -> RunFn:
    win = _Windows(spec)
    x = spec.inputs[0]
    assert x is not None
    n, c, h, w = x.shape
    oh, ow = win.out_sizes
    is_max = spec.op == "MaxPool"
    nthreads = threads.configure()
    planes = n * c
    parallel = nthreads > 1 and planes > 1 and n * c * h * w >= PARALLEL_MIN
    parts = min(nthreads, planes) if parallel else 1
    geo = np.array([planes, h, w, oh, ow, *win.kernel, *win.strides, *win.dilations,
                    *win.begin, parts, int(is_max)], np.int64)
    count = (np.ones((1,), np.float32) if is_max else
             np.maximum(win.count(bool(spec.attrs.get("count_include_pad", 0))), 1)
             .astype(np.float32).reshape(-1))
    scratch = np.empty((parts, h * ow + w + win.strides[1]), np.float32)
    kernel = pool_par if parallel else pool_seq
    if planes * oh * ow == 0:
        return _prebound(lambda x, y: _nothing)
    return _prebound(lambda x, y: functools.partial(kernel, x, y, scratch, count, geo))


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
    return _prebound(lambda x, y: functools.partial(kernel, x, y, size, is_max))


def _applies_global(spec: LayerSpec) -> bool:
    x = spec.inputs[0]
    return _float32(spec) and x is not None and len(x.shape) >= 3


def _nothing() -> None:
    """An empty tensor: nothing to pool."""


for _op in ("MaxPool", "AveragePool"):
    tactic(_op, "planes", applies=_applies_window, priority=10)(bind_window_pool)
for _op in ("GlobalAveragePool", "GlobalMaxPool"):
    tactic(_op, "planes", applies=_applies_global, priority=10)(bind_global_pool)
