"""The CUDA-shaped host operations of the CPU device, shared by ``pydla.runtime`` and
``pydla.driver`` (which differ only in names and error enums).

Device memory is zero-filled, 64-byte aligned host memory from the memory map. A copy or
fill is validated when it is issued (addresses must be memory pydla knows; buffers must be
contiguous and large enough) and then runs in stream order. A host source is staged at
issue time, as CUDA stages pageable memory, so the caller may reuse it at once.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from enum import IntEnum
from functools import partial
from typing import Any, TypeVar

import numpy as np

from pydla.engine.faults import InvalidParamError, MemcpyDirectionError, NotReadyError
from pydla.engine.memory import DEVICE, MEMORY, TENSOR_KINDS, as_bytes
from pydla.engine.stream import (
    EVENTS,
    LEGACY,
    NON_BLOCKING,
    STREAMS,
    Event,
    Stream,
    run_on,
    synchronize,
    synchronize_all,
)
from pydla.errors import PydlaError

HOST_TO_HOST, HOST_TO_DEVICE, DEVICE_TO_HOST, DEVICE_TO_DEVICE, DEFAULT = range(5)
# (destination is device memory, source is device memory) for each copy kind
_DIRECTIONS = {HOST_TO_HOST: (False, False), HOST_TO_DEVICE: (True, False),
               DEVICE_TO_HOST: (False, True), DEVICE_TO_DEVICE: (True, True)}

F = TypeVar("F", bound=Callable[..., Any])
# Copies up to this size run in the caller's thread when their stream is idle (engine.stream):
# 1 MiB copies in ≈ 50 µs, about what handing it to the stream's worker costs.
INLINE_COPY_BYTES = 1 << 20


class Handle:
    """An opaque CUDA handle (``pydla.driver``'s ``CUstream``, ``CUevent``, ``CUdeviceptr``…):
    ``int(h)`` is its value, as in cuda-bindings."""

    def __init__(self, init_value: int = 0) -> None:
        self._value = int(init_value)

    def __int__(self) -> int:
        return self._value

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and int(other) == self._value  # type: ignore

    def __hash__(self) -> int:
        return hash((type(self).__name__, self._value))

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self._value:#x}>"


def address(x: Any) -> int | None:
    """The address an int-like argument names (ints and pydla's pointer objects), or None
    for a buffer object."""
    if type(x) is int:  # the common cases first: every copy asks
        return x
    if isinstance(x, Handle):
        return x._value
    if isinstance(x, int):
        return int(x)
    if isinstance(x, np.ndarray) or not hasattr(x, "__int__"):
        return None
    return int(x)


def handle_of(x: Any) -> int:
    """A handle or pointer argument: an int, a handle object (``CUstream``, ``CUevent``,
    ``CUdeviceptr``…), or None for 0 (the legacy stream, the NULL pointer)."""
    if type(x) is int:  # the common cases first: every copy and synchronize asks
        return x
    if isinstance(x, Handle):
        return x._value
    if x is None:
        return LEGACY
    if isinstance(x, int) or (hasattr(x, "__int__") and not isinstance(x, (str, float))):
        return int(x)
    raise TypeError(f"expected an int handle or a handle object, not {type(x).__name__}")


def malloc(size: int) -> int:
    if size < 0:
        raise InvalidParamError(f"cannot allocate {size} bytes")
    return 0 if size == 0 else MEMORY.allocate(size)


def free(ptr: int) -> None:
    if ptr != 0:  # freeing NULL is a no-op, as in CUDA
        MEMORY.free(ptr)


def _endpoint(x: Any, count: int, writable: bool) -> tuple[np.ndarray, bool]:
    """A copy's side as (uint8 view of ``count`` bytes, whether it is device memory). A
    buffer object is viewed afresh at every copy: a view kept between copies would keep
    the caller's buffer alive, or outlive a resize of it."""
    addr = None if type(x) is np.ndarray else address(x)
    if addr is not None:
        return MEMORY.tensor_view(addr, count)
    data = as_bytes(x, writable)
    if data.size == count:
        return data, False
    if data.size < count:
        raise InvalidParamError(f"a {type(x).__name__} of {data.size} bytes cannot take part "
                                f"in a copy of {count}")
    return data[:count], False


def memcpy(dst: Any, src: Any, count: int, kind: int, stream: int) -> None:
    direction = _DIRECTIONS.get(kind)
    if direction is None and kind != DEFAULT:
        raise MemcpyDirectionError(f"unknown copy kind {kind}")
    if count <= 0:
        if count < 0:
            raise InvalidParamError(f"cannot copy {count} bytes")
        return
    # int addresses straight to the map: the common case, one call each
    d, d_device = (MEMORY.tensor_view(dst, count) if type(dst) is int
                   else _endpoint(dst, count, writable=True))
    s, s_device = (MEMORY.tensor_view(src, count) if type(src) is int
                   else _endpoint(src, count, writable=False))
    if direction is not None and (d_device, s_device) != direction:
        where = {True: "device memory", False: "host memory"}
        raise MemcpyDirectionError(f"copy kind {kind} contradicts a copy from "
                                   f"{where[s_device]} to {where[d_device]}")
    copy = partial(np.copyto, d, s)  # a C call when run: no Python frame
    if s_device:
        run_on(stream, copy, inline=count <= INLINE_COPY_BYTES)
    else:
        # From host memory the queued copy costs its snapshot anyway: copying now is no
        # dearer. Queued, it copies the source as it is now (see _staged).
        run_on(stream, copy, inline=True, deferred=partial(_staged, d, s))


def _staged(dst: np.ndarray, src: np.ndarray) -> Callable[[], None]:
    """The copy to queue from host memory: the caller may change its buffer as soon as the
    call returns, before the stream reaches the copy."""
    return partial(np.copyto, dst, src.copy())


def memset(ptr: Any, value: int, count: int, stream: int) -> None:
    addr = address(ptr)
    if addr is None:
        raise InvalidParamError("memset takes a device pointer")
    if count < 0:
        raise InvalidParamError(f"cannot set {count} bytes")
    if count == 0:
        return
    if MEMORY.find(addr, count, TENSOR_KINDS).kind != DEVICE:
        raise InvalidParamError(f"{addr:#x} is not device memory")
    view = MEMORY.view(addr, count, TENSOR_KINDS)
    run_on(stream, lambda: view.fill(value & 0xFF))


def stream_create(flags: int) -> int:
    if flags & ~NON_BLOCKING:
        raise InvalidParamError(f"unknown stream flags {flags}")
    return Stream(flags).handle


def stream_destroy(stream: Any) -> None:
    STREAMS.get(handle_of(stream)).close()


def stream_synchronize(stream: Any) -> None:
    """Wait for the stream; raise the failure of its work, if any, once."""
    error = synchronize(handle_of(stream))
    if error is not None:
        raise error


def device_synchronize() -> None:
    error = synchronize_all()
    if error is not None:
        raise error


def stream_query(stream: Any) -> None:
    handle = handle_of(stream)
    if handle != LEGACY and not STREAMS.get(handle).query():
        raise NotReadyError("the stream has work in flight")


def stream_wait_event(stream: Any, event: Any) -> None:
    wait = EVENTS.get(handle_of(event)).make_wait()
    handle = handle_of(stream)
    if handle == LEGACY:
        wait()
    else:
        STREAMS.get(handle).enqueue(wait)


def event_create(flags: int) -> int:
    return Event(flags).handle


def event_record(event: Any, stream: Any) -> None:
    EVENTS.get(handle_of(event)).record(handle_of(stream))


def event_synchronize(event: Any) -> None:
    EVENTS.get(handle_of(event)).synchronize()


def event_query(event: Any) -> None:
    if not EVENTS.get(handle_of(event)).query():
        raise NotReadyError("the event has not completed")


def event_destroy(event: Any) -> None:
    EVENTS.get(handle_of(event)).close()


def event_elapsed_ms(start: Any, end: Any) -> float:
    return EVENTS.get(handle_of(start)).elapsed_ms(EVENTS.get(handle_of(end)))


def cuda_api(error_of: Callable[[BaseException], IntEnum], success: IntEnum,
             values: int = 0) -> Callable[[F], F]:
    """cuda-bindings' convention: return ``(status,)`` or ``(status, value)``; pydla's typed
    errors become the status (and the value None), argument type errors still raise."""

    def wrap(fn: F) -> F:
        if values == 0:
            done = (success,)  # one tuple for every successful call

            @functools.wraps(fn)
            def call(*args: Any, **kwargs: Any) -> tuple[Any, ...]:
                try:
                    fn(*args, **kwargs)
                except (PydlaError, MemoryError) as e:
                    return (error_of(e),)
                return done
        else:
            @functools.wraps(fn)
            def call(*args: Any, **kwargs: Any) -> tuple[Any, ...]:
                try:
                    result = fn(*args, **kwargs)
                except (PydlaError, MemoryError) as e:
                    return (error_of(e),) + (None,) * values
                return (success, result)

        return call  # type: ignore[return-value]

    return wrap


def first_match(table: Sequence[tuple[type[BaseException], IntEnum]], fallback: IntEnum
                ) -> Callable[[BaseException], IntEnum]:
    def error_of(e: BaseException) -> IntEnum:
        return next((code for cls, code in table if isinstance(e, cls)), fallback)

    return error_of
