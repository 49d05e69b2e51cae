"""Reductions and broadcasts over middle axes: the channel-blocked layout's pooling and
squeeze-excitation scaling (tactic ``middle``).

In the blocked layout (n, ⌈c/16⌉, h, w, 16) a global average pool reduces the plane axes
between the channel blocks and their 16 lanes, and squeeze-excitation multiplies every
pixel by its channel's scale, (n, cb, 1, 1, 16) broadcast over the plane. Seen as
(outer A, middle R, inner I) arrays, both are short loops over I per (a, r) — numpy walks
such strided shapes slowly and the generic fused loop pays its index arithmetic per inner
run of 16; these loops keep 16 lanes in one vector register (simd.vector_rows,
vector_sum; I a multiple of 16) and split the work over the threads.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numba import njit, prange

from pydla.backends.base import LayerSpec, RunFn, TensorSpec
from pydla.backends.cpu import threads
from pydla.backends.cpu.kernels.conv_fast.simd import LANES as L
from pydla.backends.cpu.kernels.conv_fast.simd import vector_rows, vector_sum
from pydla.backends.cpu.kernels.fast_pointwise import CompiledProgram, compile_program
from pydla.backends.cpu.registry import tactic
from pydla.backends.cpu.steps import PreboundKernel, kernel_call
from pydla.dtypes import DType

_OPS = {"Mul": 0, "Add": 1, "Sub": 2}
Thunk = Callable[[], object]


_MUL, _ADD, _SUB, _RSUB = (vector_rows(op) for op in ("mul", "add", "sub", "rsub"))


@njit(inline="always", error_model="numpy")
def _reduce_body(x: np.ndarray, out: np.ndarray, scale: float, nthreads: int) -> None:
    """out[a, i] = scale · Σ_r x[a, r, i] (I a multiple of 16)."""
    outer, rows, inner = x.shape
    tasks = outer * (inner // L)
    per = -(-tasks // nthreads)
    s = np.float32(scale)
    for t in prange(nthreads):
        for task in range(t * per, min(tasks, (t + 1) * per)):
            a, v = task // (inner // L), task % (inner // L)
            vector_sum(x[a].ctypes.data + v * L * 4, rows, inner * 4,
                       out[a].ctypes.data + v * L * 4, s)


@njit(inline="always", error_model="numpy")
def _broadcast_body(x: np.ndarray, s: np.ndarray, out: np.ndarray, op: int, s_first: bool,
                    nthreads: int) -> None:
    """out[a, r, i] = x[a, r, i] op s[a, i] (s op x when ``s_first``); x and out
    (A, R, I), s (A, I), I a multiple of 16. Tasks: (a, run of rows), enough for every
    thread."""
    outer, rows, inner = x.shape
    chunks = min(rows, -(-2 * nthreads // outer))
    tasks = outer * chunks
    per = -(-tasks // nthreads)
    for t in prange(nthreads):
        for task in range(t * per, min(tasks, (t + 1) * per)):
            a, c = task // chunks, task % chunks
            r0, r1 = c * rows // chunks, (c + 1) * rows // chunks
            for v in range(inner // L):
                src = x[a].ctypes.data + (r0 * inner + v * L) * 4
                dst = out[a].ctypes.data + (r0 * inner + v * L) * 4
                vec = s[a].ctypes.data + v * L * 4
                if inner == L:  # rows of one vector: one loop over them all
                    if op == 0:
                        _MUL(src, dst, vec, r1 - r0)
                    elif op == 1:
                        _ADD(src, dst, vec, r1 - r0)
                    elif s_first:
                        _RSUB(src, dst, vec, r1 - r0)
                    else:
                        _SUB(src, dst, vec, r1 - r0)
                    continue
                for r in range(r1 - r0):
                    at = r * inner * 4
                    if op == 0:
                        _MUL(src + at, dst + at, vec, 1)
                    elif op == 1:
                        _ADD(src + at, dst + at, vec, 1)
                    elif s_first:
                        _RSUB(src + at, dst + at, vec, 1)
                    else:
                        _SUB(src + at, dst + at, vec, 1)


@njit(cache=True, parallel=True, error_model="numpy")
def _reduce_par(x: np.ndarray, out: np.ndarray, scale: float, nthreads: int) -> None:
    _reduce_body(x, out, scale, nthreads)


@njit(cache=True, error_model="numpy")
def _reduce_seq(x: np.ndarray, out: np.ndarray, scale: float, nthreads: int) -> None:
    _reduce_body(x, out, scale, 1)


@njit(cache=True, parallel=True, error_model="numpy")
def _broadcast_par(x: np.ndarray, s: np.ndarray, out: np.ndarray, op: int, s_first: bool,
                   nthreads: int) -> None:
    _broadcast_body(x, s, out, op, s_first, nthreads)


@njit(cache=True, error_model="numpy")
def _broadcast_seq(x: np.ndarray, s: np.ndarray, out: np.ndarray, op: int, s_first: bool,
                   nthreads: int) -> None:
    _broadcast_body(x, s, out, op, s_first, 1)


def _middle_run(axes: Sequence[int], rank: int) -> tuple[int, int] | None:
    """(first, end) of ``axes`` when they are one contiguous run short of the last axis."""
    ax = sorted({a % rank for a in axes}) if rank else []
    if not ax or ax != list(range(ax[0], ax[-1] + 1)) or ax[-1] == rank - 1 or ax[0] == 0:
        return None
    return ax[0], ax[-1] + 1


def _applies_reduce(spec: LayerSpec) -> bool:
    x = spec.inputs[0]
    if x is None or x.dtype != DType.FLOAT32 or spec.outputs[0].dtype != DType.FLOAT32:
        return False
    run = _middle_run([int(a) for a in spec.attrs.get("axes", [])], len(x.shape))
    return (run is not None and math.prod(x.shape[run[0]:run[1]]) > 0
            and math.prod(x.shape[run[1]:]) % L == 0)


def bind_reduce(spec: LayerSpec) -> RunFn:
    x = spec.inputs[0]
    assert x is not None
    run = _middle_run([int(a) for a in spec.attrs["axes"]], len(x.shape))
    assert run is not None
    first, end = run
    shape3 = (math.prod(x.shape[:first]), math.prod(x.shape[first:end]), math.prod(x.shape[end:]))
    scale = 1.0 / shape3[1] if spec.op == "ReduceMean" else 1.0
    nthreads = threads.configure()

    def prebind(ins: Sequence[np.ndarray | None], outs: Sequence[np.ndarray]) -> Thunk:
        src = ins[0]
        assert src is not None
        kernel = _reduce_par if threads.parallel_pays(math.prod(shape3)) else _reduce_seq
        return kernel_call(kernel, np.ascontiguousarray(src).reshape(shape3),
                           outs[0].reshape(shape3[0], shape3[2]), scale, nthreads)

    return PreboundKernel(prebind)


@dataclass(frozen=True)
class _Broadcast:
    op: int
    s_first: bool
    shape3: tuple[int, int, int]  # (A, R, I)
    full: int  # which input is full-shape
    prefix: list[dict[str, Any]]  # unary steps on the broadcast input before the op


def _broadcast_geometry(spec: LayerSpec) -> _Broadcast | None:
    """A Mul/Add/Sub of a full tensor and one broadcast over a contiguous run of middle
    axes — the broadcast one possibly through unary steps first (squeeze-excitation's
    gate: HardSigmoid, then Mul)."""
    if len(spec.inputs) != 2 or any(s is None for s in spec.inputs):
        return None
    steps = list(spec.attrs.get("program") or []) if spec.op == "Pointwise" else [
        {"op": spec.op, "in": [0, 1], "shape": list(spec.outputs[0].shape)}]
    if not steps or steps[-1]["op"] not in _OPS:
        return None
    a, b, out = spec.inputs[0], spec.inputs[1], spec.outputs[0]
    assert a is not None and b is not None
    if any(s.dtype != DType.FLOAT32 for s in (a, b, out)):
        return None
    full = 0 if a.shape == out.shape else 1
    small = b if full == 0 else a
    if spec.inputs[full].shape != out.shape or len(small.shape) != len(out.shape):
        return None
    # The prefix: a chain of one-input steps from the small input (register 1 - full).
    prefix, reg = steps[:-1], 1 - full
    for k, step in enumerate(prefix):
        if [int(r) for r in step["in"]] != [reg] or list(step["shape"]) != list(small.shape):
            return None
        reg = 2 + k
    last = [int(r) for r in steps[-1]["in"]]
    if sorted(last) != sorted([full, reg]) or len(last) != 2:
        return None
    ones = [d for d, (sd, o) in enumerate(zip(small.shape, out.shape)) if sd != o]
    if not ones or any(small.shape[d] != 1 for d in ones):
        return None
    run = _middle_run(ones, len(out.shape))
    if run is None or ones != list(range(*run)) or math.prod(out.shape[run[1]:]) % L:
        return None
    shape = out.shape
    shape3 = (math.prod(shape[:run[0]]), math.prod(shape[run[0]:run[1]]),
              math.prod(shape[run[1]:]))
    renumbered = [{**st, "in": [0 if k == 0 else k]} for k, st in enumerate(prefix)]
    return _Broadcast(_OPS[steps[-1]["op"]], last[0] != full, shape3, full, renumbered)


def _applies_broadcast(spec: LayerSpec) -> bool:
    geo = _broadcast_geometry(spec)
    return "epilogue" not in spec.attrs and geo is not None and (
        not geo.prefix or _prefix(spec, geo) is not None)


def _prefix(spec: LayerSpec, geo: _Broadcast) -> CompiledProgram | None:
    small = spec.inputs[1 - geo.full]
    assert small is not None
    return compile_program(geo.prefix, [small], TensorSpec(small.shape, DType.FLOAT32))


def bind_broadcast(spec: LayerSpec) -> RunFn:
    geo = _broadcast_geometry(spec)
    assert geo is not None
    nthreads = threads.configure()
    outer, _, inner = geo.shape3
    gate = _prefix(spec, geo) if geo.prefix else None
    small_spec = spec.inputs[1 - geo.full]
    assert small_spec is not None
    gated = np.zeros(small_spec.shape, np.float32)

    def prebind(ins: Sequence[np.ndarray | None], outs: Sequence[np.ndarray]) -> Thunk:
        full, small = ins[geo.full], ins[1 - geo.full]
        assert full is not None and small is not None
        gate_step = gate.prebind([small], [gated]) if gate is not None else None
        operand = gated if gate is not None else np.ascontiguousarray(small)
        kernel = (_broadcast_par if threads.parallel_pays(math.prod(geo.shape3))
                  else _broadcast_seq)
        scale = kernel_call(kernel, np.ascontiguousarray(full).reshape(geo.shape3),
                            operand.reshape(outer, inner), outs[0].reshape(geo.shape3), geo.op,
                            geo.s_first, nthreads)
        if gate_step is None:
            return scale

        def run() -> None:
            gate_step()
            scale()

        return run

    return PreboundKernel(prebind)


for _op in ("ReduceMean", "ReduceSum"):
    tactic(_op, "middle", applies=_applies_reduce, priority=20)(bind_reduce)
for _op in ("Pointwise", *_OPS):
    tactic(_op, "middle", applies=_applies_broadcast, priority=20)(bind_broadcast)
