"""Where tensors live on the GPU: physical layouts and the activation arena plan.

Pure functions of the program (no CUDA), so they are tested on any machine.

Layouts. Every rank-4 activation is stored channels-last (NHWC): cuDNN's fast fused
convolutions and the depthwise/pooling kernels want it. Network inputs and outputs stay in
their logical row-major order (the ``chw`` I/O format), and so does every tensor of another
rank. A ``Placement`` gives a tensor's element strides indexed by *logical* dimension, so
kernels address any layout the same way.

Arena. The CPU plan's offsets and aliases assume NCHW (an in-place Concat writes channel
slices, a Flatten views its input); neither holds in NHWC, so the GPU backend plans its own
arena: every tensor gets its own range, reused once its last reader has run.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pydla.dtypes import DType

NHWC, LINEAR = "nhwc", "linear"
ALIGNMENT = 256  # cudaMalloc's own alignment: every vector width and cuDNN's rule hold


@dataclass(frozen=True)
class Placement:
    """One tensor on the device: address, logical shape, element type and layout."""

    ptr: int
    shape: tuple[int, ...]
    dtype: DType
    layout: str

    @property
    def size(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    @property
    def strides(self) -> tuple[int, ...]:
        """Element strides by logical dimension."""
        return layout_strides(self.shape, self.layout)

    def physical_order(self) -> tuple[int, ...]:
        """Logical dimensions from the slowest-varying to the fastest in memory."""
        return (0, 2, 3, 1) if self.layout == NHWC else tuple(range(len(self.shape)))


def layout_strides(shape: Sequence[int], layout: str) -> tuple[int, ...]:
    if layout == NHWC:
        n, c, h, w = shape
        return (h * w * c, 1, w * c, c)
    strides = []
    acc = 1
    for d in reversed(shape):
        strides.append(acc)
        acc *= d
    return tuple(reversed(strides))


def activation_layout(shape: Sequence[int], kind: str) -> str:
    """The layout the GPU backend stores a non-weight tensor in."""
    return NHWC if kind == "activation" and len(shape) == 4 else LINEAR


def broadcast_strides(operand: Placement, out_shape: Sequence[int]) -> tuple[int, ...]:
    """Strides that read ``operand`` at each logical index of ``out_shape`` (numpy
    broadcasting: right-aligned, size-1 dimensions repeat)."""
    rank = len(out_shape)
    own = operand.strides
    offset = rank - len(operand.shape)
    if offset < 0:
        raise ValueError(f"operand of shape {operand.shape} does not broadcast to {out_shape}")
    result = []
    for d in range(rank):
        if d < offset:
            result.append(0)
            continue
        size = operand.shape[d - offset]
        if size == out_shape[d]:
            result.append(own[d - offset])
        elif size == 1:
            result.append(0)
        else:
            raise ValueError(f"operand of shape {operand.shape} does not broadcast to "
                             f"{tuple(out_shape)}")
    return tuple(result)


def _align(n: int) -> int:
    return (n + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT


@dataclass(frozen=True)
class Lifetime:
    tensor: int
    nbytes: int
    first: int  # step that writes it (-1: written before the first step, i.e. an input)
    last: int  # last step that reads it (a large number: read after the last step)


def plan_arena(lifetimes: Sequence[Lifetime]) -> tuple[dict[int, int], int]:
    """Offsets for each tensor and the arena size: greedy best fit over a free list, in
    order of first write, freeing a range after its last reader. Two tensors share bytes
    only if one's last read comes strictly before the other's first write."""
    order = sorted(lifetimes, key=lambda t: (t.first, t.tensor))
    free: list[tuple[int, int]] = []  # (offset, size), disjoint
    live: list[tuple[int, int, int]] = []  # (last, offset, size)
    offsets: dict[int, int] = {}
    top = 0
    for t in order:
        still = []
        for last, off, size in live:
            if last < t.first:
                free.append((off, size))
            else:
                still.append((last, off, size))
        live = still
        free = _coalesce(free)
        size = _align(max(t.nbytes, 1))
        fits = [(s, o) for o, s in free if s >= size]
        if fits:
            s, o = min(fits)
            free.remove((o, s))
            if s > size:
                free.append((o + size, s - size))
            off = o
        else:
            off = top
            top += size
        offsets[t.tensor] = off
        live.append((t.last, off, size))
    return offsets, top


def _coalesce(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for off, size in sorted(ranges):
        if merged and merged[-1][0] + merged[-1][1] == off:
            merged[-1] = (merged[-1][0], merged[-1][1] + size)
        else:
            merged.append((off, size))
    return merged
