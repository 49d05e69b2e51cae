"""Softmax and LogSoftmax as numba loops (tactic ``rows``).

The normalised axes split the tensor into ``outer × n × inner``. With ``inner == 1`` (the
last axis: attention, classifiers) each row is one task: max, exponentials written once
into the output and summed, one scaling pass. Otherwise (YOLOv8's DFL softmax over axis 1)
a task is a slab of ``n`` rows of ``inner`` contiguous values, reduced element-wise across
the rows so that every pass stays vectorised. exp is fast_math's vectorisable exp32.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
from numba import njit, prange

from pydla.backends.base import LayerSpec, RunFn
from pydla.backends.cpu import threads
from pydla.backends.cpu.kernels.fast_math import FASTMATH_REDUCE, exp32, float32_compute
from pydla.backends.cpu.registry import tactic
from pydla.backends.cpu.steps import PreboundKernel, kernel_call

Thunk = Callable[[], None]

PARALLEL_MIN = 1 << 14
# Values per slab task along ``inner`` (a few KiB of scratch per task).
SLAB = 1024


@njit(cache=True, error_model="numpy", fastmath=FASTMATH_REDUCE)
def _max(x: np.ndarray, base: int, n: int, lanes: np.ndarray) -> float:
    """The row's maximum, kept in 16 lanes (an element-wise max LLVM vectorises; it will
    not vectorise a max reduction without assuming there are no NaNs)."""
    for j in range(16):
        lanes[j] = -np.inf
    whole = n - n % 16
    for i in range(0, whole, 16):
        for j in range(16):
            v = x[np.uint64(base + i + j)]
            t = lanes[j]
            lanes[j] = v if v > t else t
    m = np.float32(-np.inf)
    for j in range(16):
        m = lanes[j] if lanes[j] > m else m
    for i in range(whole, n):
        v = x[np.uint64(base + i)]
        m = v if v > m else m
    return m


@njit(cache=True, error_model="numpy", fastmath=FASTMATH_REDUCE)
def _rows(x: np.ndarray, y: np.ndarray, first: int, last: int, n: int, log: bool) -> None:
    """Rows [first, last): max, exponentials written once and summed, one scaling pass."""
    lanes = np.empty(16, np.float32)
    for r in range(first, last):
        base = r * n
        m = _max(x, base, n, lanes)
        s = np.float32(0)
        if log:
            for i in range(n):
                s += exp32(x[np.uint64(base + i)] - m)
            shift = m + np.float32(np.log(s))
            for i in range(n):
                y[np.uint64(base + i)] = x[np.uint64(base + i)] - shift
            continue
        for i in range(n):
            e = exp32(x[np.uint64(base + i)] - m)
            y[np.uint64(base + i)] = e
            s += e
        inv = np.float32(1) / s
        for i in range(n):
            y[np.uint64(base + i)] *= inv


@njit(parallel=True, cache=True, nogil=True, error_model="numpy",
      fastmath=FASTMATH_REDUCE)
def rows_par(x: np.ndarray, y: np.ndarray, n: int, log: bool) -> None:
    rows = x.size // n
    tasks = min(rows, 64)
    for t in prange(tasks):
        _rows(x, y, t * rows // tasks, (t + 1) * rows // tasks, n, log)


@njit(cache=True, nogil=True, error_model="numpy", fastmath=FASTMATH_REDUCE)
def rows_seq(x: np.ndarray, y: np.ndarray, n: int, log: bool) -> None:
    _rows(x, y, 0, x.size // n, n, log)


@njit(cache=True, error_model="numpy", fastmath=FASTMATH_REDUCE)
def _slab(x: np.ndarray, y: np.ndarray, task: int, n: int, inner: int, log: bool) -> None:
    chunks = (inner + SLAB - 1) // SLAB
    outer, c = task // chunks, task % chunks
    lo, hi = c * SLAB, min(inner, (c + 1) * SLAB)
    width = hi - lo
    base = outer * n * inner + lo
    m = np.full(width, -np.inf, np.float32)
    s = np.zeros(width, np.float32)
    for i in range(n):
        row = base + i * inner
        for j in range(width):
            v = x[np.uint64(row + j)]
            m[j] = v if v > m[j] else m[j]
    for i in range(n):
        row = base + i * inner
        for j in range(width):
            e = exp32(x[np.uint64(row + j)] - m[j])
            s[j] += e
            if not log:
                y[np.uint64(row + j)] = e
    for j in range(width):
        s[j] = m[j] + np.float32(np.log(s[j])) if log else np.float32(1) / s[j]
    for i in range(n):
        row = base + i * inner
        for j in range(width):
            if log:
                y[np.uint64(row + j)] = x[np.uint64(row + j)] - s[j]
            else:
                y[np.uint64(row + j)] *= s[j]


@njit(parallel=True, cache=True, nogil=True, error_model="numpy",
      fastmath=FASTMATH_REDUCE)
def slabs_par(x: np.ndarray, y: np.ndarray, n: int, inner: int, log: bool) -> None:
    tasks = x.size // (n * inner) * ((inner + SLAB - 1) // SLAB)
    for t in prange(tasks):
        _slab(x, y, t, n, inner, log)


@njit(cache=True, nogil=True, error_model="numpy", fastmath=FASTMATH_REDUCE)
def slabs_seq(x: np.ndarray, y: np.ndarray, n: int, inner: int, log: bool) -> None:
    tasks = x.size // (n * inner) * ((inner + SLAB - 1) // SLAB)
    for t in range(tasks):
        _slab(x, y, t, n, inner, log)


def _applies(spec: LayerSpec) -> bool:
    x = spec.inputs[0]
    return (x is not None and len(spec.outputs) == 1 and float32_compute(x, spec.outputs[0])
            and len(spec.attrs["axes"]) >= 1 and math.prod(x.shape) > 0)


def bind_rows(spec: LayerSpec) -> RunFn:
    x = spec.inputs[0]
    assert x is not None
    axes = [int(a) for a in spec.attrs["axes"]]
    n = math.prod(x.shape[axes[0]:axes[-1] + 1])
    inner = math.prod(x.shape[axes[-1] + 1:])
    log = spec.op == "LogSoftmax"
    parallel = threads.configure() > 1 and math.prod(x.shape) >= PARALLEL_MIN
    if inner == 1:
        kernel = rows_par if parallel else rows_seq

        def make(xf: np.ndarray, yf: np.ndarray) -> Thunk:
            return kernel_call(kernel, xf, yf, n, log)
    else:
        slabs = slabs_par if parallel else slabs_seq

        def make(xf: np.ndarray, yf: np.ndarray) -> Thunk:
            return kernel_call(slabs, xf, yf, n, inner, log)

    def prebind(ins: Sequence[np.ndarray | None], outs: Sequence[np.ndarray]) -> Thunk:
        src = ins[0]
        assert src is not None
        return make(np.ascontiguousarray(src).reshape(-1), outs[0].reshape(-1))

    return PreboundKernel(prebind)


for _op in ("Softmax", "LogSoftmax"):
    tactic(_op, "rows", applies=_applies, priority=10)(bind_rows)
