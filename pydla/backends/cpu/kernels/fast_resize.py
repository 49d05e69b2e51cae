"""Resize of NCHW images, nearest and (bi)linear, as one numba gather (tactic ``gather``).

The reference kernel's own per-axis plans (source indices and weights for every output
row and column, worked out at bind time for any coordinate transformation) drive a single
pass: each output row reads one (nearest) or two (linear) source rows and gathers along
them. Nearest upsampling by an integer factor repeats rows: a row with the same source
as the previous one is a copy of it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
from numba import njit, prange

from pydla.backends.base import LayerSpec, RunFn
from pydla.backends.cpu import threads
from pydla.backends.cpu.kernels.fast_math import FASTMATH, float32_compute
from pydla.backends.cpu.kernels.resize import _axis_plan
from pydla.backends.cpu.registry import tactic
from pydla.backends.cpu.steps import PreboundKernel, kernel_call

Thunk = Callable[[], None]

PARALLEL_MIN = 1 << 15


@njit(cache=True, error_model="numpy", fastmath=FASTMATH)
def _row(x: np.ndarray, y: np.ndarray, task: int, h: int, w: int, oh: int, ow: int,
         rows: np.ndarray, cols: np.ndarray, wr: np.ndarray, wc: np.ndarray,
         linear: bool) -> None:
    p, r = task // oh, task % oh
    out = (p * oh + r) * ow
    src = p * h * w
    if not linear:
        if r > 0 and rows[0, r] == rows[0, r - 1]:
            for o in range(ow):
                y[np.uint64(out + o)] = y[np.uint64(out - ow + o)]
            return
        row = src + rows[0, r] * w
        for o in range(ow):
            y[np.uint64(out + o)] = x[np.uint64(row + cols[0, o])]
        return
    a, b = src + rows[0, r] * w, src + rows[1, r] * w
    wa, wb = wr[0, r], wr[1, r]
    for o in range(ow):
        c0, c1 = cols[0, o], cols[1, o]
        w0, w1 = wc[0, o], wc[1, o]
        top = x[np.uint64(a + c0)] * w0 + x[np.uint64(a + c1)] * w1
        bottom = x[np.uint64(b + c0)] * w0 + x[np.uint64(b + c1)] * w1
        y[np.uint64(out + o)] = top * wa + bottom * wb


@njit(parallel=True, cache=True, nogil=True, error_model="numpy", fastmath=FASTMATH)
def resize_par(x: np.ndarray, y: np.ndarray, h: int, w: int, oh: int, ow: int,
               rows: np.ndarray, cols: np.ndarray, wr: np.ndarray, wc: np.ndarray,
               linear: bool) -> None:
    for task in prange(y.size // ow):
        _row(x, y, task, h, w, oh, ow, rows, cols, wr, wc, linear)


@njit(cache=True, nogil=True, error_model="numpy", fastmath=FASTMATH)
def resize_seq(x: np.ndarray, y: np.ndarray, h: int, w: int, oh: int, ow: int,
               rows: np.ndarray, cols: np.ndarray, wr: np.ndarray, wc: np.ndarray,
               linear: bool) -> None:
    for task in range(y.size // ow):
        _row(x, y, task, h, w, oh, ow, rows, cols, wr, wc, linear)


def _plans(spec: LayerSpec) -> tuple[list[np.ndarray], list[np.ndarray]] | None:
    """(indices, weights) of the H and W axes, each (taps, out) with taps 1 or 2."""
    x = spec.inputs[0]
    assert x is not None
    attrs = dict(spec.attrs)
    if attrs["mode"] not in ("nearest", "linear"):
        return None
    in_shape, out_shape = x.shape, spec.outputs[0].shape
    taps = 1 if attrs["mode"] == "nearest" else 2
    indices, weights = [], []
    for axis in range(4):
        plan = _axis_plan(axis, in_shape[axis], out_shape[axis], 4, attrs, np.dtype(np.float32))
        if axis < 2:
            if plan is not None:
                return None
            continue
        n = out_shape[axis]
        if plan is None:  # an axis left alone: itself, at full weight
            index = np.tile(np.arange(n, dtype=np.int64), (taps, 1))
            weight = np.zeros((taps, n), np.float32)
            weight[0] = 1
        else:
            if plan.outside is not None or len(plan.index) != taps:
                return None
            index = plan.index.astype(np.int64)
            weight = (np.ones((1, n), np.float32) if plan.weights is None
                      else plan.weights.reshape(taps, n).astype(np.float32))
        indices.append(np.ascontiguousarray(index))
        weights.append(np.ascontiguousarray(weight))
    return indices, weights


def _applies(spec: LayerSpec) -> bool:
    x = spec.inputs[0]
    if (x is None or len(x.shape) != 4 or len(spec.outputs) != 1
            or not float32_compute(x, spec.outputs[0])
            or math.prod(spec.outputs[0].shape) == 0 or math.prod(x.shape) == 0):
        return False
    return _plans(spec) is not None


def bind_gather(spec: LayerSpec) -> RunFn:
    x = spec.inputs[0]
    assert x is not None
    plans = _plans(spec)
    assert plans is not None, "applies() was checked by the backend"
    (rows, cols), (wr, wc) = plans
    h, w = x.shape[2:]
    oh, ow = spec.outputs[0].shape[2:]
    linear = spec.attrs["mode"] == "linear"
    parallel = threads.configure() > 1 and math.prod(spec.outputs[0].shape) >= PARALLEL_MIN
    kernel = resize_par if parallel else resize_seq

    def prebind(ins: Sequence[np.ndarray | None], outs: Sequence[np.ndarray]) -> Thunk:
        src = ins[0]
        assert src is not None
        return kernel_call(kernel, np.ascontiguousarray(src).reshape(-1),
                           outs[0].reshape(-1), h, w, oh, ow, rows, cols, wr, wc, linear)

    return PreboundKernel(prebind)


tactic("Resize", "gather", applies=_applies, priority=10)(bind_gather)
