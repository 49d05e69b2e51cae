"""Scratch memory shared by the layers of a bound program (TensorRT's workspace).

Kernels stage inputs, hold Winograd's transformed tiles, GEMM panels and epilogue rows in
scratch buffers sized at bind time. Given each layer its own, YOLOv8n-320's came to ≈ 40 MB
on top of 12 MB of weights and 2.5 MB of activations: more than the 32 MiB last-level cache,
so every layer found its scratch, its weights and its input evicted by the layers before it,
and ran 1.3-1.5× slower in the network than alone. Layers run one after another, so their
scratch can be the same memory: one buffer per program, as large as the largest layer's
needs (YOLOv8n-320: 1.21 → 1.00 of onnxruntime's time at batch 1; CRNN 1.14 → 0.99).

A kernel asks for ``scratch(shape)`` when it is bound and reads ``.array`` when it is
prebound (``run.prebind``): the program's buffer is allocated in between, once every layer
has said what it needs. Bound outside a program (tactic timing, a lone layer), a request
is its own array at once. Scratch starts with another layer's data: a kernel may rely on
nothing it did not write in the same run (tests fill the buffer with NaN to check).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Sequence

import numpy as np

ALIGN = 64  # bytes: every request starts on a cache line (and a 16-float vector)
# What a program's buffer is filled with when it is allocated; tests set NaN.
FILL = 0.0

_local = threading.local()  # the workspace the current thread is binding into, if any


def aligned_zeros(shape: Sequence[int] | int, dtype: type | np.dtype = np.float32) -> np.ndarray:
    """A zeroed array starting on a cache line, for what a kernel keeps (packed weights,
    its private buffers). numpy's large arrays start 16 bytes past a page: every other
    32-byte load of a 64-byte row of packed weights then straddled two cache lines (the
    1×1 kernel's loop nests ran 2-5 % slower with misaligned operands)."""
    dims = (shape,) if isinstance(shape, int) else tuple(int(d) for d in shape)
    dt = np.dtype(dtype)
    nbytes = int(np.prod(dims, dtype=np.int64)) * dt.itemsize
    raw = np.zeros(nbytes + ALIGN, np.uint8)
    start = (-raw.ctypes.data) % ALIGN
    return raw[start:start + nbytes].view(dt).reshape(dims)


class Scratch:
    """One kernel's scratch buffer: ``.array`` once its program's workspace is allocated
    (at once outside a program)."""

    def __init__(self, shape: Sequence[int], dtype: np.dtype, offset: int | None,
                 owner: Workspace | None) -> None:
        self.shape = tuple(int(s) for s in shape)
        self.dtype = np.dtype(dtype)
        self._offset = offset
        self._owner = owner
        self._array: np.ndarray | None = None
        if owner is None:
            self._array = aligned_zeros(self.shape, self.dtype)

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize

    @property
    def array(self) -> np.ndarray:
        if self._array is None:
            assert self._owner is not None and self._offset is not None
            buf = self._owner.buffer()
            self._array = (buf[self._offset:self._offset + self.nbytes]
                           .view(self.dtype).reshape(self.shape))
        return self._array


class Workspace:
    """The scratch of one program's layers: each layer's requests side by side from
    offset 0 (``next_layer``), every layer over the same bytes."""

    def __init__(self) -> None:
        self._offset = 0
        self._size = 0
        self._buffer: np.ndarray | None = None

    def next_layer(self) -> None:
        self._offset = 0

    def request(self, shape: Sequence[int], dtype: np.dtype) -> Scratch:
        if self._buffer is not None:
            raise RuntimeError("the workspace is allocated: no more layers can be bound")
        item = Scratch(shape, dtype, self._offset, self)
        self._offset += -(-item.nbytes // ALIGN) * ALIGN
        self._size = max(self._size, self._offset)
        return item

    @property
    def nbytes(self) -> int:
        return self._size

    def buffer(self) -> np.ndarray:
        """The shared bytes (allocated at the first read, 64-byte aligned)."""
        if self._buffer is None:
            self._buffer = aligned_zeros(self._size, np.uint8)
            if FILL != 0.0:
                whole = self._size // 4 * 4
                self._buffer[:whole].view(np.float32)[:] = FILL
        return self._buffer


@contextlib.contextmanager
def sharing(ws: Workspace) -> Iterator[Workspace]:
    """Kernels bound inside take their scratch from ``ws``."""
    previous = getattr(_local, "ws", None)
    _local.ws = ws
    try:
        yield ws
    finally:
        _local.ws = previous


def scratch(shape: Sequence[int] | int, dtype: type | np.dtype = np.float32) -> Scratch:
    """A scratch buffer for the kernel being bound (zeros outside a program; inside, the
    program's shared bytes, holding whatever the last layer left)."""
    dims = (shape,) if isinstance(shape, int) else tuple(shape)
    ws: Workspace | None = getattr(_local, "ws", None)
    if ws is None:
        return Scratch(dims, np.dtype(dtype), None, None)
    return ws.request(dims, np.dtype(dtype))
