"""The channel-blocked layout's conversions: the ``Reorder`` op, which pydla.plan.layouts
puts at the edges of a blocked region, and the numpy forms the reference kernels use.

Attributes: ``to`` — ``nchw16c`` (planar (n, c, h, w) → blocked (n, ⌈c/16⌉, h, w, 16), the
lanes past channel c zero) or ``nchw`` (back) — and ``channels``, c. The fast path moves
16 channels × 16 pixels per register transpose (simd.transpose16; a partial last block
through a zero-padded stage), tasks of (image, channel block, CHUNK pixels) on the
engine's threads.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from functools import partial

import numpy as np
from numba import njit, prange

from pydla.backends.base import LayerSpec, RunFn
from pydla.backends.cpu import threads
from pydla.backends.cpu.kernels.conv_fast.geometry import BLOCK as L
from pydla.backends.cpu.kernels.conv_fast.geometry import BLOCKED, PLANAR
from pydla.backends.cpu.kernels.conv_fast.simd import copy_bytes, transpose16
from pydla.backends.cpu.registry import kernel
from pydla.backends.cpu.steps import PreboundKernel, kernel_call
from pydla.errors import KernelError

Thunk = Callable[[], object]


def to_blocked(x: np.ndarray) -> np.ndarray:
    """(n, c, …) → (n, ⌈c/16⌉, …, 16), zero past channel c (numpy, any dtype)."""
    n, c = x.shape[:2]
    cb = -(-c // L)
    padded = np.zeros((n, cb * L, *x.shape[2:]), x.dtype)
    padded[:, :c] = x
    blocked = padded.reshape(n, cb, L, *x.shape[2:])
    return np.ascontiguousarray(np.moveaxis(blocked, 2, -1))


def to_planar(xb: np.ndarray, channels: int) -> np.ndarray:
    """(n, ⌈c/16⌉, …, 16) → (n, c, …) (numpy, any dtype)."""
    n, cb = xb.shape[:2]
    planar = np.moveaxis(xb, -1, 2).reshape(n, cb * L, *xb.shape[2:-1])
    return np.ascontiguousarray(planar[:, :channels])


# Pixels per task: a plane of a few blocks is still shared by the threads.
CHUNK = 4096


@njit(inline="always", error_model="numpy")
def _reorder_body(x: np.ndarray, y: np.ndarray, blocking: bool, nthreads: int,
                  stages: np.ndarray) -> None:
    """x (n, c, p) planar and y (n, cb, p, 16) blocked: y from x when ``blocking`` (zero
    past channel c), else x from y. A partial last block (c not a multiple of 16) goes
    through a thread's 16×16 stage (``stages``, the layer's own, zeroed at bind: blocking
    writes only its rows below c): one register transpose per 16 pixels there too (a
    value at a time, an 8-channel 172×264 plane took 0.56 ms)."""
    n, c, p = x.shape
    cb = y.shape[1]
    chunks = -(-p // CHUNK)
    tasks = n * cb * chunks
    per = -(-tasks // nthreads)
    for t in prange(nthreads):
        sa = stages[t].ctypes.data
        for task in range(t * per, min(tasks, (t + 1) * per)):
            img, blk, k = task // (cb * chunks), (task // chunks) % cb, task % chunks
            q, q1 = k * CHUNK, min(p, (k + 1) * CHUNK)
            c0 = blk * L
            nl = min(L, c - c0)
            block = y[img, blk]
            pa, ba = x[img, c0].ctypes.data, block.ctypes.data
            while q + L <= q1:  # 16 pixels × 16 channels per register transpose
                if nl == L and blocking:
                    transpose16(pa + q * 4, p * 4, ba + q * L * 4, L * 4, 0)
                elif nl == L:
                    transpose16(ba + q * L * 4, L * 4, pa + q * 4, p * 4, 0)
                elif blocking:
                    for lane in range(nl):
                        copy_bytes(sa + lane * L * 4, pa + (lane * p + q) * 4, L * 4)
                    transpose16(sa, L * 4, ba + q * L * 4, L * 4, 0)
                else:
                    transpose16(ba + q * L * 4, L * 4, sa, L * 4, 0)
                    for lane in range(nl):
                        copy_bytes(pa + (lane * p + q) * 4, sa + lane * L * 4, L * 4)
                q += L
            for j in range(q, q1):
                for lane in range(nl):
                    if blocking:
                        block[j, lane] = x[img, c0 + lane, j]
                    else:
                        x[img, c0 + lane, j] = block[j, lane]
                if blocking:
                    for lane in range(nl, L):
                        block[j, lane] = 0


@njit(cache=True, parallel=True, error_model="numpy")
def _reorder_par(x: np.ndarray, y: np.ndarray, blocking: bool, nthreads: int,
                 stages: np.ndarray) -> None:
    _reorder_body(x, y, blocking, nthreads, stages)


@njit(cache=True, error_model="numpy")
def _reorder_seq(x: np.ndarray, y: np.ndarray, blocking: bool, nthreads: int,
                 stages: np.ndarray) -> None:
    _reorder_body(x, y, blocking, 1, stages)


def shapes(spec: LayerSpec) -> tuple[str, tuple[int, ...], tuple[int, ...]]:
    """(direction, planar shape, blocked shape), checked against the layer's tensors."""
    to, c = spec.attrs.get("to"), spec.attrs.get("channels")
    if to not in (BLOCKED, PLANAR) or not isinstance(c, int) or c < 1:
        raise KernelError(spec.name, spec.op, f"bad attributes to={to!r} channels={c!r}")
    if len(spec.inputs) != 1 or spec.inputs[0] is None or len(spec.outputs) != 1:
        raise KernelError(spec.name, spec.op, "expects one input and one output")
    src, dst = spec.inputs[0], spec.outputs[0]
    if src.dtype != dst.dtype:
        raise KernelError(spec.name, spec.op, f"input {src.dtype.name} and output "
                          f"{dst.dtype.name} differ")
    planar, blocked = (src.shape, dst.shape) if to == BLOCKED else (dst.shape, src.shape)
    want = (planar[0], -(-c // L), *planar[2:], L) if len(planar) >= 3 else None
    if len(planar) < 3 or planar[1] != c or blocked != want:
        raise KernelError(spec.name, spec.op, f"shapes {src.shape} -> {dst.shape} are not "
                          f"a {c}-channel tensor and its blocked form")
    return to, planar, blocked


@kernel("Reorder")
def bind_reorder(spec: LayerSpec) -> RunFn:
    to, planar, blocked = shapes(spec)
    fast = spec.inputs[0] is not None and spec.inputs[0].dtype.np == np.float32
    nthreads = threads.configure()
    flat_planar = (planar[0], planar[1], int(np.prod(planar[2:], dtype=np.int64)))
    flat_blocked = (blocked[0], blocked[1], flat_planar[2], L)
    c = planar[1]
    reorder = _reorder_par if threads.parallel_pays(math.prod(blocked)) else _reorder_seq
    stages = np.zeros((nthreads, L, L), np.float32)

    def prebind(ins: Sequence[np.ndarray | None], outs: Sequence[np.ndarray]) -> Thunk:
        x, y = ins[0], outs[0]
        assert x is not None
        if not fast or not x.flags.c_contiguous or not y.flags.c_contiguous:
            return partial(_numpy_reorder, x, y, to, c)
        if to == BLOCKED:
            return kernel_call(reorder, x.reshape(flat_planar), y.reshape(flat_blocked), True,
                               nthreads, stages)
        return kernel_call(reorder, y.reshape(flat_planar), x.reshape(flat_blocked), False,
                           nthreads, stages)

    return PreboundKernel(prebind)


def _numpy_reorder(x: np.ndarray, y: np.ndarray, to: str, channels: int) -> None:
    np.copyto(y, to_blocked(x) if to == BLOCKED else to_planar(x, channels))
