"""Data movement split over the engine's threads (tactic ``parallel_copy``): Concat, Split and
the reshapes, where the planner could not make them views.

All three are copies of ``count`` contiguous blocks between two flat buffers with their
own strides (Concat: each input's blocks land every ``total`` elements of the output;
Split: the reverse; a reshape: one block). A single thread does not saturate the memory
bus here — two copy a large tensor about 1.7× faster — so big copies are cut into pieces
that the threads share; small ones stay on the calling thread.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
from numba import njit, prange

from pydla.backends.base import LayerSpec, RunFn
from pydla.backends.cpu import threads
from pydla.backends.cpu.kernels.conv_fast.simd import copy_bytes
from pydla.backends.cpu.registry import tactic
from pydla.backends.cpu.steps import PreboundKernel, chain, kernel_call

Thunk = Callable[[], None]

# Bytes below which a copy stays on one thread.
PARALLEL_MIN = 1 << 18
# Elements per piece of work: big enough to stream, small enough to balance.
PIECE = 1 << 15


@njit(parallel=True, cache=True, nogil=True, error_model="numpy")
def blocks_par(dst: np.ndarray, d0: int, dstride: int, src: np.ndarray, s0: int,
               sstride: int, count: int, length: int) -> None:
    """dst[d0 + b·dstride + i] = src[s0 + b·sstride + i] for b < count, i < length."""
    pieces = (length + PIECE - 1) // PIECE
    size, da, sa = dst.itemsize, dst.ctypes.data, src.ctypes.data
    for t in prange(count * pieces):
        b, p = t // pieces, t % pieces
        lo, hi = p * PIECE, min(length, (p + 1) * PIECE)
        d, s = d0 + b * dstride + lo, s0 + b * sstride + lo
        copy_bytes(da + d * size, sa + s * size, (hi - lo) * size)


@njit(cache=True, nogil=True, error_model="numpy")
def blocks_seq(dst: np.ndarray, d0: int, dstride: int, src: np.ndarray, s0: int,
               sstride: int, count: int, length: int) -> None:
    # memcpy, not a slice assignment: numba's slice copy outside a prange body is a
    # scalar loop (≈ 5× slower for a few hundred floats).
    size, da, sa = dst.itemsize, dst.ctypes.data, src.ctypes.data
    for b in range(count):
        copy_bytes(da + (d0 + b * dstride) * size, sa + (s0 + b * sstride) * size,
                   length * size)


def _copy(dst: np.ndarray, d0: int, dstride: int, src: np.ndarray, s0: int, sstride: int,
          count: int, length: int) -> Thunk:
    parallel = count * length * dst.itemsize >= PARALLEL_MIN and threads.configure() > 1
    kernel = blocks_par if parallel else blocks_seq
    return kernel_call(kernel, dst, d0, dstride, src, s0, sstride, count, length)


def _flat(x: np.ndarray) -> np.ndarray | None:
    return x.reshape(-1) if x.flags.c_contiguous else None


def _axis_geometry(shape: Sequence[int], axis: int) -> tuple[int, int]:
    """(blocks, elements per unit of the axis) of a C-contiguous tensor around ``axis``."""
    return math.prod(shape[:axis]), math.prod(shape[axis + 1:])


def _same_types(spec: LayerSpec) -> bool:
    kinds = {s.dtype for s in (*spec.inputs, *spec.outputs) if s is not None}
    return len(kinds) == 1 and None not in spec.inputs and \
        next(iter(kinds)).np.kind in "fiub"


def bind_concat(spec: LayerSpec) -> RunFn:
    axis = int(spec.attrs["axis"])
    out_shape = spec.outputs[0].shape
    count, inner = _axis_geometry(out_shape, axis)
    total = out_shape[axis] * inner
    sizes = [s.shape[axis] * inner for s in spec.inputs if s is not None]

    def prebind(ins: Sequence[np.ndarray | None], outs: Sequence[np.ndarray]) -> Thunk:
        dst = _flat(outs[0])
        assert dst is not None
        steps, offset = [], 0
        for x, size in zip(ins, sizes):
            assert x is not None
            src = _flat(np.ascontiguousarray(x))
            steps.append(_copy(dst, offset, total, src, 0, size, count, size))  # type: ignore[arg-type]
            offset += size
        return chain(*steps)

    return PreboundKernel(prebind)


def bind_split(spec: LayerSpec) -> RunFn:
    axis = int(spec.attrs["axis"])
    x = spec.inputs[0]
    assert x is not None
    count, inner = _axis_geometry(x.shape, axis)
    total = x.shape[axis] * inner
    sizes = [int(n) * inner for n in spec.attrs["split"]]

    def prebind(ins: Sequence[np.ndarray | None], outs: Sequence[np.ndarray]) -> Thunk:
        src = ins[0]
        assert src is not None
        flat = _flat(np.ascontiguousarray(src))
        steps, offset = [], 0
        for out, size in zip(outs, sizes):
            dst = _flat(out)
            assert dst is not None
            steps.append(_copy(dst, 0, size, flat, offset, total, count, size))  # type: ignore[arg-type]
            offset += size
        return chain(*steps)

    return PreboundKernel(prebind)


def bind_reshape(spec: LayerSpec) -> RunFn:
    def prebind(ins: Sequence[np.ndarray | None], outs: Sequence[np.ndarray]) -> Thunk:
        src = ins[0]
        assert src is not None
        flat, dst = _flat(np.ascontiguousarray(src)), _flat(outs[0])
        assert flat is not None and dst is not None
        return _copy(dst, 0, 0, flat, 0, 0, 1, flat.size)

    return PreboundKernel(prebind)


def _applies_concat(spec: LayerSpec) -> bool:
    return _same_types(spec) and len(spec.outputs) == 1


def _applies_split(spec: LayerSpec) -> bool:
    x = spec.inputs[0]
    return (_same_types(spec) and x is not None
            and sum(int(n) for n in spec.attrs["split"]) == x.shape[int(spec.attrs["axis"])])


def _applies_reshape(spec: LayerSpec) -> bool:
    # Reshapes with a second (shape) input keep the reference: the planned copy is one.
    return _same_types(spec) and len(spec.inputs) == 1 and len(spec.outputs) == 1


tactic("Concat", "parallel_copy", applies=_applies_concat, priority=10)(bind_concat)
tactic("Split", "parallel_copy", applies=_applies_split, priority=10)(bind_split)
for _op in ("Reshape", "Flatten", "Squeeze", "Unsqueeze"):
    tactic(_op, "parallel_copy", applies=_applies_reshape, priority=10)(bind_reshape)
