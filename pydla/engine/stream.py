"""Streams and events on the CPU device.

A stream is an in-order queue of host callables run by one worker thread, so the caller
overlaps with it. ``pydla.cudla.submit_task``, ``pydla.runtime`` and ``pydla.driver`` all
enqueue on these same objects, found by handle in ``STREAMS``.

Work that is known to be short (a task whose module runs in microseconds, a small copy)
runs in the caller's thread when the stream is idle: waking the worker and waking the
caller again cost more than such work (a one-layer task: 157 µs through the worker,
measured on this project's 2-core machine, against onnxruntime's 13 µs for the whole
``session.run``). Completing early is within the contract — nothing promises overlap — and
order is kept: only an idle stream runs work inline, and its worker waits meanwhile.
A failure of inline work is kept for the next synchronize, as on the worker.

Handle 0 is the legacy default stream: work on it runs in the caller's thread, after the
work already queued on every blocking stream (created without the non-blocking flag), as
CUDA's legacy stream waits for them. A failure of work on a stream is kept and reported
once, by the next synchronize, and the stream carries on with the work after it.

Destroying a stream with work pending returns at once, as ``cudaStreamDestroy`` does: the
queued work still runs, and until it has, device-wide synchronization (and the legacy
stream, for a blocking stream) waits for it and reports its failure.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable

from pydla.engine.faults import InvalidResourceError, NotReadyError
from pydla.engine.handles import HandleTable

Op = Callable[[], None]
NON_BLOCKING = 1  # CU_STREAM_NON_BLOCKING / cudaStreamNonBlocking
DISABLE_TIMING = 2  # CU_EVENT_DISABLE_TIMING / cudaEventDisableTiming
LEGACY = 0


class Stream:
    def __init__(self, flags: int = 0) -> None:
        self.blocking = not flags & NON_BLOCKING
        self._ops: collections.deque[Op | None] = collections.deque()
        # One lock, two conditions: the worker waits for work, synchronize() for the stream
        # to drain. Work run inline must not wake an idle worker for nothing — on a 2-core
        # machine that wake-up, a context switch per task, cost more than a tiny task.
        self._lock = threading.Lock()
        self._work = threading.Condition(self._lock)
        self._idle = threading.Condition(self._lock)
        self._pending = 0
        self._waiting = 0  # threads in synchronize()/wait_idle(): the only ones to wake
        self._error: BaseException | None = None
        self._closed = False
        self._inline = False  # the caller's thread is running work of this stream
        self._worker: threading.Thread | None = None
        self.handle = STREAMS.add(self)

    def enqueue(self, op: Op, inline: bool = False,
                deferred: Callable[[], Op] | None = None) -> bool:
        """Queue ``op``; ``inline``: it is short, run it now in this thread if the stream is
        idle; ``deferred`` makes the op to queue instead when it cannot (a copy that must
        snapshot its source first). Returns whether it ran inline."""
        with self._lock:
            if self._closed:
                raise InvalidResourceError(f"stream {self.handle:#x} was destroyed")
            if inline and not self._pending:
                self._pending += 1
                self._inline = True
            else:
                self._queue(deferred() if deferred is not None else op)
                return False
        try:
            op()
        except BaseException as e:  # kept for the next synchronize, as the worker does
            with self._lock:
                if self._error is None:
                    self._error = e
        finally:
            with self._lock:
                self._inline = False
                self._pending -= 1
                if self._ops:  # queued behind the inline work meanwhile
                    self._work.notify()
                if not self._pending and self._waiting:
                    self._idle.notify_all()
        return True

    def _queue(self, op: Op) -> None:
        """Hand ``op`` to the worker (the caller holds ``_lock``)."""
        if self._worker is None:  # started lazily: idle streams cost no thread
            self._worker = threading.Thread(target=self._run, daemon=True,
                                            name=f"pydla-stream-{self.handle:#x}")
            self._worker.start()
        self._pending += 1
        self._ops.append(op)
        self._work.notify()

    def _run(self) -> None:
        while True:
            with self._lock:
                # work queued behind inline work waits for it: the stream stays in order
                while not self._ops or self._inline:
                    self._work.wait()
                op = self._ops.popleft()
            if op is None:
                return
            try:
                op()
            except BaseException as e:  # kept for the next synchronize
                with self._lock:
                    if self._error is None:
                        self._error = e
            finally:
                with self._lock:
                    self._pending -= 1
                    if not self._pending and self._waiting:
                        self._idle.notify_all()
                    retire = self._closed and not self._pending and self._error is None
                if retire:
                    self._retire()

    def synchronize(self) -> BaseException | None:
        """Wait for all queued work; return (and forget) the first failure since the last
        synchronize, if any."""
        with self._lock:
            if self._pending:
                self._drain()
            error, self._error = self._error, None
        return error

    def wait_idle(self) -> None:
        with self._lock:
            self._drain()

    def _drain(self) -> None:
        """Wait until no work is pending (the caller holds ``_lock``)."""
        if not self._pending:
            return
        self._waiting += 1
        try:
            while self._pending:
                self._idle.wait()
        finally:
            self._waiting -= 1

    def query(self) -> bool:
        with self._lock:
            return self._pending == 0

    def close(self) -> None:
        """No more work is accepted; queued work still runs, then the worker exits."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if self._worker is not None:
                self._ops.append(None)
                self._work.notify()
            if self._pending or self._error is not None:
                with _DRAINING_LOCK:
                    _DRAINING.add(self)
        STREAMS.remove(self.handle)

    def _retire(self) -> None:
        """Called by the worker when a closed stream's last work is done."""
        with _DRAINING_LOCK:
            _DRAINING.discard(self)


STREAMS: HandleTable[Stream] = HandleTable("stream", InvalidResourceError)
# Destroyed streams whose work has not finished, or whose failure nobody has read yet.
_DRAINING: set[Stream] = set()
_DRAINING_LOCK = threading.Lock()


def _live_and_draining() -> list[Stream]:
    with _DRAINING_LOCK:
        draining = list(_DRAINING)
    return list(STREAMS.values()) + draining


def get_stream(handle: int) -> Stream | None:
    """The stream of a handle; None for the legacy stream (0)."""
    return None if handle == LEGACY else STREAMS.get(handle)


def drain_blocking_streams() -> None:
    for s in _live_and_draining():
        if s.blocking:
            s.wait_idle()


def run_on(handle: int, op: Op, inline: bool = False,
           deferred: Callable[[], Op] | None = None) -> bool:
    """Run ``op`` in order on a stream; on the legacy stream, run it now in this thread
    (its exceptions propagate to the caller). ``inline``: ``op`` is short (see the module's
    note). Returns whether it has run when this returns."""
    if handle == LEGACY:
        drain_blocking_streams()
        op()
        return True
    return STREAMS.get(handle).enqueue(op, inline, deferred)


def synchronize(handle: int) -> BaseException | None:
    stream = get_stream(handle)
    if stream is None:
        drain_blocking_streams()
        return None
    return stream.synchronize()


def synchronize_all() -> BaseException | None:
    streams = _live_and_draining()
    errors = [s.synchronize() for s in streams]
    for s in streams:
        if s._closed:  # its failure is read: nothing keeps it any longer
            s._retire()
    return next((e for e in errors if e is not None), None)


class _Mark:
    """One recording of an event: set when the stream reaches it."""

    def __init__(self) -> None:
        self.done = threading.Event()
        self.time_ns = 0

    def fire(self) -> None:
        self.time_ns = time.perf_counter_ns()
        self.done.set()


class Event:
    def __init__(self, flags: int = 0) -> None:
        self.flags = flags
        self._mark: _Mark | None = None
        self._lock = threading.Lock()
        self.handle = EVENTS.add(self)

    def record(self, stream: int) -> None:
        mark = _Mark()
        with self._lock:
            self._mark = mark
        run_on(stream, mark.fire)

    def _current(self) -> _Mark | None:
        with self._lock:
            return self._mark

    def query(self) -> bool:
        mark = self._current()
        return mark is None or mark.done.is_set()

    def synchronize(self, timeout: float | None = None) -> bool:
        mark = self._current()
        return mark is None or mark.done.wait(timeout)

    def make_wait(self) -> Op:
        """An op that blocks its stream until the current recording has fired."""
        mark = self._current()
        return (lambda: None) if mark is None else (lambda: mark.done.wait() and None)

    def elapsed_ms(self, end: Event) -> float:
        if (self.flags | end.flags) & DISABLE_TIMING:
            raise InvalidResourceError("an event of the pair was created without timing")
        a, b = self._current(), end._current()
        if a is None or b is None:
            raise InvalidResourceError("elapsed time needs two recorded events")
        if not (a.done.is_set() and b.done.is_set()):
            raise NotReadyError("an event of the pair has not completed")
        return (b.time_ns - a.time_ns) / 1e6

    def close(self) -> None:
        EVENTS.remove(self.handle)


EVENTS: HandleTable[Event] = HandleTable("event", InvalidResourceError)
