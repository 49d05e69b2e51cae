"""Opaque handles: one process-wide sequence for devices, modules, streams and events.

Handles are plain ints, as upstream. A single counter means a handle of one kind never
equals a handle of another, so passing a module handle where a device handle belongs is
caught instead of silently naming some other object.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")

# Pointer-looking values (16-byte steps, far from 0) so that 0 and small ints stay invalid.
_counter = itertools.count(0x5D1A_0000, 0x10)
_counter_lock = threading.Lock()


def new_handle() -> int:
    with _counter_lock:
        return next(_counter)


class HandleTable(Generic[T]):
    """Thread-safe handle → object map; ``get`` raises ``error(message)`` when unknown."""

    def __init__(self, kind: str, error: Callable[[str], Exception]) -> None:
        self.kind = kind
        self._error = error
        self._items: dict[int, T] = {}
        self._lock = threading.Lock()

    def add(self, obj: T) -> int:
        handle = new_handle()
        with self._lock:
            self._items[handle] = obj
        return handle

    def get(self, handle: int) -> T:
        # No lock: a dict read is atomic (under the GIL and in free-threaded builds alike),
        # and every copy, task and synchronize looks a handle up.
        obj = self._items.get(handle)
        if obj is None:
            raise self._error(f"{self.kind} handle {handle:#x} is unknown or was destroyed")
        return obj

    def remove(self, handle: int) -> T:
        with self._lock:
            obj = self._items.pop(handle, None)
        if obj is None:
            raise self._error(f"{self.kind} handle {handle:#x} is unknown or was destroyed")
        return obj

    def values(self) -> list[T]:
        with self._lock:
            return list(self._items.values())
