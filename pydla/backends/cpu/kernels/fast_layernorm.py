"""LayerNormalization over the trailing axes as one numba pass per row (tactic ``rows``).

Each row (the normalised axes, contiguous) is read three times while it sits in L1: the
mean, the two-pass variance (as the reference: no E[x²]-E[x]² cancellation) and the
normalised, scaled and shifted output. The optional Mean and InvStdDev outputs are
written per row. Rows are spread over the engine's threads.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
from numba import njit, prange

from pydla.backends.base import LayerSpec, RunFn
from pydla.backends.cpu import threads
from pydla.backends.cpu.kernels.fast_math import FASTMATH_REDUCE, float32_compute
from pydla.backends.cpu.registry import tactic
from pydla.backends.cpu.steps import PreboundKernel, kernel_call

Thunk = Callable[[], None]

PARALLEL_MIN = 1 << 14


@njit(cache=True, error_model="numpy", fastmath=FASTMATH_REDUCE)
def _row(x: np.ndarray, y: np.ndarray, scale: np.ndarray, bias: np.ndarray,
         stats: np.ndarray, r: int, d: int, eps: float) -> None:
    base = r * d
    s = np.float32(0)
    for i in range(d):
        s += x[np.uint64(base + i)]
    mean = s / np.float32(d)
    v = np.float32(0)
    for i in range(d):
        t = x[np.uint64(base + i)] - mean
        v += t * t
    inv = np.float32(1) / np.float32(np.sqrt(v / np.float32(d) + np.float32(eps)))
    for i in range(d):
        y[np.uint64(base + i)] = (x[np.uint64(base + i)] - mean) * inv * scale[i] + bias[i]
    stats[r, 0] = mean
    stats[r, 1] = inv


@njit(parallel=True, cache=True, nogil=True, error_model="numpy",
      fastmath=FASTMATH_REDUCE)
def rows_par(x: np.ndarray, y: np.ndarray, scale: np.ndarray, bias: np.ndarray,
             stats: np.ndarray, d: int, eps: float) -> None:
    for r in prange(x.size // d):
        _row(x, y, scale, bias, stats, r, d, eps)


@njit(cache=True, nogil=True, error_model="numpy", fastmath=FASTMATH_REDUCE)
def rows_seq(x: np.ndarray, y: np.ndarray, scale: np.ndarray, bias: np.ndarray,
             stats: np.ndarray, d: int, eps: float) -> None:
    for r in range(x.size // d):
        _row(x, y, scale, bias, stats, r, d, eps)


def _param_ok(p: object, tail: tuple[int, ...]) -> bool:
    """A parameter must cover the normalised axes exactly (leading 1s allowed)."""
    if p is None:
        return True
    shape = tuple(p.shape)  # type: ignore[attr-defined]
    while shape and shape[0] == 1 and len(shape) > len(tail):
        shape = shape[1:]
    return float32_compute(p) and shape == tail  # type: ignore[arg-type]


def _applies(spec: LayerSpec) -> bool:
    x = spec.inputs[0]
    if x is None or not float32_compute(x) or len(spec.inputs) < 2:
        return False
    tail = tuple(x.shape[int(spec.attrs["axis"]):])
    bias = spec.inputs[2] if len(spec.inputs) > 2 else None
    return (math.prod(tail) > 0 and _param_ok(spec.inputs[1], tail) and _param_ok(bias, tail)
            and spec.inputs[1] is not None
            and float32_compute(*spec.outputs))


def bind_rows(spec: LayerSpec) -> RunFn:
    x = spec.inputs[0]
    assert x is not None
    d = math.prod(x.shape[int(spec.attrs["axis"]):])
    rows = math.prod(x.shape) // d
    eps = float(spec.attrs.get("epsilon", 1e-5))
    parallel = threads.configure() > 1 and rows > 1 and rows * d >= PARALLEL_MIN
    kernel = rows_par if parallel else rows_seq
    n_out = len(spec.outputs)

    def prebind(ins: Sequence[np.ndarray | None], outs: Sequence[np.ndarray]) -> Thunk:
        src, scale = ins[0], ins[1]
        assert src is not None and scale is not None
        bias = ins[2] if len(ins) > 2 and ins[2] is not None else np.zeros(d, np.float32)
        stats = np.empty((rows, 2), np.float32)
        run = kernel_call(kernel, np.ascontiguousarray(src).reshape(-1),
                          outs[0].reshape(-1), np.ascontiguousarray(scale).reshape(-1),
                          np.ascontiguousarray(bias).reshape(-1), stats, d, eps)
        if n_out == 1:
            return run
        mean, inv = outs[1].reshape(-1), (outs[2].reshape(-1) if n_out > 2 else None)

        def with_stats() -> None:
            run()
            np.copyto(mean, stats[:, 0])
            if inv is not None:
                np.copyto(inv, stats[:, 1])

        return with_stats

    return PreboundKernel(prebind)


tactic("LayerNormalization", "rows", applies=_applies, priority=10)(bind_rows)
