"""Memory pydla knows: the only address ranges the runtime will ever read or write.

CUDA-shaped programs pass raw integer addresses around. pydla never dereferences an integer
it has not validated: every address must fall inside a *region* of this map, and every
access goes through a numpy view of the live Python object that owns the region, so a bad
address is an ``InvalidAddressError``, never a segfault. Regions are

- ``device``: memory pydla allocated (``cudaMalloc``, the Pythonic API's buffers); the map
  owns it until it is freed;
- ``host``: a caller's buffer (a numpy array passed to ``mem_register``, or the owner given
  to a record's ``from_ptr``); the map follows the owner's lifetime;
- ``record``: the memory of cuDLA records (``Task`` and friends) and the pointer arrays
  their setters build, which ``submit_task`` reads back from an integer address.
"""

from __future__ import annotations

import bisect
import ctypes
import math
import os
import resource
import threading
import weakref
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from pydla.engine.faults import InvalidAddressError, InvalidParamError
from pydla.errors import ResourceLimitError

if TYPE_CHECKING:
    from pydla.loadable import Program

DEVICE_ALIGNMENT = 64  # cudaMalloc promises at least 256 on GPUs; 64 covers every DLA rule
DEVICE, HOST, RECORD = "device", "host", "record"
TENSOR_KINDS = (DEVICE, HOST)
_FOUND_MAX = 256  # lookups remembered between changes of the map
_U8 = np.dtype(np.uint8)


def as_bytes(obj: Any, writable: bool = False) -> np.ndarray:
    """A flat uint8 view of a contiguous buffer object (numpy array, bytearray, ctypes…)."""
    try:
        arr = np.frombuffer(obj, _U8)  # positional, a dtype object: half the call's cost
    except (TypeError, ValueError, BufferError) as e:
        raise InvalidParamError(f"{type(obj).__name__} is not a contiguous buffer: {e}") from None
    if writable and not arr.flags.writeable:
        raise InvalidParamError(f"{type(obj).__name__} buffer is read-only")
    return arr


@dataclass(eq=False)
class Region:
    start: int
    size: int
    kind: str
    owner: weakref.ref[Any] | None  # None: ``strong`` holds the buffer
    strong: Any = None
    # Objects that memory inside this region points to (pointer arrays of records): they
    # must live exactly as long as the region, whatever wrapper object set them.
    keep: dict[int, Any] = field(default_factory=dict)
    _flat: np.ndarray | None = field(default=None, repr=False)

    @property
    def end(self) -> int:
        return self.start + self.size

    def buffer(self) -> Any:
        return self.strong if self.owner is None else self.owner()

    def flat(self) -> np.ndarray:
        """The region's bytes as a flat uint8 array (kept for memory the map owns; a
        caller's buffer is viewed afresh, as a kept view would keep it alive)."""
        if self.owner is None:
            if self._flat is None:
                self._flat = as_bytes(self.strong)
            return self._flat
        return as_bytes(self.owner())


class MemoryMap:
    """Thread-safe map of known regions, looked up by address."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._regions: dict[int, Region] = {}
        self._starts: list[tuple[int, int]] = []  # sorted (start, id(region))
        self._max_size = 0
        # Bumped whenever a region comes or goes: what a caller derived from lookups (a
        # validated task, a found region) holds while it is unchanged.
        self.generation = 0
        # (addr, size, kinds) → region, for the same few buffers a program looks up on
        # every copy and task; emptied with every change of the map.
        self._found: dict[tuple[int, int, tuple[str, ...]], Region] = {}
        # (addr, size) → view, for ranges of device memory (the map owns it, so a kept view
        # keeps nothing else alive): a copy's device side, validated once per map change.
        self._views: dict[tuple[int, int], np.ndarray] = {}

    # -- adding and removing ---------------------------------------------------------
    def _insert(self, region: Region) -> None:
        with self._lock:
            self._regions[id(region)] = region
            bisect.insort(self._starts, (region.start, id(region)))
            self._max_size = max(self._max_size, region.size)
            self._changed()

    def _drop(self, rid: int) -> Region | None:
        with self._lock:
            region = self._regions.pop(rid, None)
            if region is not None:
                i = bisect.bisect_left(self._starts, (region.start, rid))
                del self._starts[i]
                self._changed()
        return region

    def _changed(self) -> None:
        """The caller holds ``_lock``."""
        self.generation += 1
        self._found = {}
        self._views = {}

    def allocate(self, size: int) -> int:
        """Zero-filled, DEVICE_ALIGNMENT-aligned memory owned by the map; returns its address."""
        if size <= 0:
            raise InvalidParamError(f"cannot allocate {size} bytes")
        raw = np.zeros(size + DEVICE_ALIGNMENT, dtype=np.uint8)
        skip = (-raw.ctypes.data) % DEVICE_ALIGNMENT
        buf = raw[skip:skip + size]
        self._insert(Region(buf.ctypes.data, size, DEVICE, None, buf))
        return buf.ctypes.data

    def free(self, addr: int) -> None:
        region = self._exact(addr, DEVICE)
        if region is None:
            raise InvalidAddressError(f"{addr:#x} is not the start of memory pydla allocated")
        self._drop(id(region))

    def track(self, obj: Any, kind: str, lifetime: Any = None) -> Region:
        """Make a buffer object's memory known while it lives (or while ``lifetime`` lives,
        for owners that cannot be weakly referenced, such as bytearray). A numpy view
        stands for its whole base array, which it keeps alive."""
        obj = _root(obj)
        data = as_bytes(obj)
        if data.size == 0:
            raise InvalidParamError("an empty buffer has no address")
        start = data.ctypes.data
        with self._lock:
            for rid in self._ids_at(start):
                r = self._regions[rid]
                if r.kind == kind and r.size == data.size and r.buffer() is obj:
                    return r
        try:
            region = Region(start, data.size, kind, weakref.ref(obj))
            anchor = obj
        except TypeError:
            region = Region(start, data.size, kind, None, obj)
            anchor = lifetime
            if anchor is None:
                raise InvalidParamError(f"a {type(obj).__name__} owner needs a lifetime "
                                        "object") from None
        self._insert(region)
        weakref.finalize(anchor, self._drop, id(region))
        return region

    # -- lookup ----------------------------------------------------------------------
    def _ids_at(self, start: int) -> list[int]:
        i = bisect.bisect_left(self._starts, (start, -1))
        out = []
        while i < len(self._starts) and self._starts[i][0] == start:
            out.append(self._starts[i][1])
            i += 1
        return out

    def _exact(self, addr: int, kind: str) -> Region | None:
        with self._lock:
            for rid in self._ids_at(addr):
                if self._regions[rid].kind == kind:
                    return self._regions[rid]
        return None

    def find(self, addr: int, size: int, kinds: Collection[str] = TENSOR_KINDS) -> Region:
        """The live region of one of ``kinds`` that holds all of [addr, addr + size)."""
        key = (addr, size, tuple(kinds))
        found = self._found.get(key)
        if found is not None and found.buffer() is not None:
            return found
        if size <= 0:
            raise InvalidAddressError(f"an access of {size} bytes at {addr:#x} is empty")
        with self._lock:
            i = bisect.bisect_right(self._starts, (addr, float("inf"))) - 1
            while i >= 0 and self._starts[i][0] >= addr - self._max_size:
                region = self._regions[self._starts[i][1]]
                if (region.kind in kinds and addr + size <= region.end
                        and region.buffer() is not None):
                    if len(self._found) < _FOUND_MAX:
                        self._found[key] = region
                    return region
                i -= 1
        raise InvalidAddressError(f"[{addr:#x}, {addr + size:#x}) is not {_describe(kinds)} "
                                  "that pydla knows")

    def alive(self, region: Region) -> bool:
        with self._lock:
            return self._regions.get(id(region)) is region

    def view(self, addr: int, size: int, kinds: Collection[str] = TENSOR_KINDS) -> np.ndarray:
        """A uint8 view of [addr, addr + size) after validating the range."""
        return self.region_view(self.find(addr, size, kinds), addr, size)

    def tensor_view(self, addr: int, size: int) -> tuple[np.ndarray, bool]:
        """``view(addr, size)`` of device memory or a registered host buffer, and whether it
        is device memory."""
        view = self._views.get((addr, size))
        if view is not None:
            return view, True
        region = self.find(addr, size, TENSOR_KINDS)
        view = self.region_view(region, addr, size)
        if region.kind != DEVICE:
            return view, False
        with self._lock:
            if self._regions.get(id(region)) is region and len(self._views) < _FOUND_MAX:
                self._views[(addr, size)] = view  # else the map changed meanwhile
        return view, True

    @staticmethod
    def region_view(region: Region, addr: int, size: int) -> np.ndarray:
        """A uint8 view of [addr, addr + size) inside ``region`` (found by ``find``)."""
        off = addr - region.start
        return region.flat()[off:off + size]

    def read(self, addr: int, size: int, kinds: tuple[str, ...]) -> bytes:
        """A copy of [addr, addr + size) after validating the range (cheaper than a view
        for the few bytes of a record)."""
        region = self._found.get((addr, size, kinds))  # kinds: one of the tuple constants
        owner = None if region is None else region.buffer()
        if owner is None:
            region = self.find(addr, size, kinds)
            owner = region.buffer()  # held: the memory stays valid while it is read
        if owner is None:
            raise InvalidAddressError(f"[{addr:#x}, {addr + size:#x}) was released")
        return ctypes.string_at(addr, size)


def _root(obj: Any) -> Any:
    while (isinstance(obj, np.ndarray) and isinstance(obj.base, np.ndarray)
           and obj.base.flags.c_contiguous):
        obj = obj.base
    return obj


def _describe(kinds: Collection[str]) -> str:
    names = {DEVICE: "device memory", HOST: "a registered host buffer", RECORD: "record memory"}
    return " or ".join(names[k] for k in kinds)


MEMORY = MemoryMap()


# -- memory limits --------------------------------------------------------------------
# Builds and loads refuse, before allocating, anything that needs more than this share of
# the machine's memory: a model or loadable is untrusted input, and a numpy MemoryError (or
# the kernel's OOM killer) halfway through is a worse answer than one line naming the
# tensor. docs/builder.md and docs/cudla.md describe how to raise it.
MEMORY_SHARE = 0.5
_CGROUP_LIMITS = ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes")
_load_limit: int | None = None


def machine_memory_bytes() -> int:
    """What this process can hold: the least of physical memory, its cgroup's limit and
    its address-space limit (``ulimit -v``)."""
    candidates = []
    try:
        candidates.append(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        pass
    for path in _CGROUP_LIMITS:
        try:
            with open(path) as f:
                text = f.read().strip()
        except OSError:
            continue
        if text.isdigit():
            candidates.append(int(text))
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft != resource.RLIM_INFINITY:
        candidates.append(soft)
    return min(candidates, default=1 << 40)


def default_memory_limit() -> int:
    return int(machine_memory_bytes() * MEMORY_SHARE)


def set_load_memory_limit(nbytes: int | None) -> None:
    """The most memory one module may allocate when it loads (arena and I/O buffers);
    None restores the default, ``MEMORY_SHARE`` of ``machine_memory_bytes()``."""
    global _load_limit
    if nbytes is not None and nbytes <= 0:
        raise InvalidParamError(f"a memory limit must be positive, not {nbytes}")
    _load_limit = nbytes


def load_memory_limit() -> int:
    return _load_limit if _load_limit is not None else default_memory_limit()


def tensor_bytes(shape: tuple[int, ...], itemsize: int) -> int:
    """Exact bytes of a tensor, in Python ints (numpy's int64 product wraps around for
    the shapes a hostile file can declare)."""
    return math.prod(int(d) for d in shape) * itemsize


def format_bytes(n: int) -> str:
    for unit, size in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n:,} bytes ({n / size:.1f} {unit})"
    return f"{n:,} bytes"


def check_load_memory(what: str, nbytes: int) -> None:
    """Refuse a load that would allocate ``nbytes`` beyond ``load_memory_limit()``."""
    limit = load_memory_limit()
    if nbytes > limit:
        raise ResourceLimitError(
            f"{what} needs {format_bytes(nbytes)}, more than the load memory limit of "
            f"{format_bytes(limit)} (pydla.engine.memory.set_load_memory_limit raises it)")


def check_program_memory(program: Program, backend: str) -> None:
    """Refuse, before binding, a module whose host allocations pass the load limit: the
    CPU backend's activation arena, and on every backend the I/O staging buffers. (A GPU
    backend's arena is device memory; its allocator answers for it.)"""
    io = sum(tensor_bytes(program.tensors[t.tensor].shape, program.tensors[t.tensor].dtype.itemsize)
             for t in (*program.inputs, *program.outputs))
    arena = program.arena_bytes if backend == "cpu" else 0
    check_load_memory(f"the module's activation arena ({arena:,} bytes) and I/O buffers "
                      f"({io:,} bytes)", arena + io)

