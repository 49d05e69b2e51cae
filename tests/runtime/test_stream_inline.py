"""Short work runs in the caller's thread when its stream is idle, in order, failures kept."""

from __future__ import annotations

import threading
import time

import pytest

from pydla.engine import module as engine_module
from pydla.engine.stream import Stream


def test_short_work_on_an_idle_stream_runs_inline_and_keeps_its_failure() -> None:
    s = Stream()
    try:
        seen: list[str] = []
        assert s.enqueue(lambda: seen.append(threading.current_thread().name), inline=True)
        assert seen == [threading.current_thread().name] and s.query()

        def fail() -> None:
            raise ValueError("kernel failed")

        assert s.enqueue(fail, inline=True)  # not raised here: the next synchronize has it
        error = s.synchronize()
        assert isinstance(error, ValueError) and s.synchronize() is None
        assert not s.enqueue(lambda: None)  # not short: the worker runs it
        assert s.synchronize() is None
    finally:
        s.close()


def test_work_behind_busy_work_queues_in_order() -> None:
    s = Stream()
    try:
        order: list[int] = []
        gate = threading.Event()
        assert not s.enqueue(lambda: (gate.wait(5), order.append(1)))
        # the stream is busy: short work queues behind, and a deferred op replaces it
        assert not s.enqueue(lambda: order.append(99), inline=True,
                             deferred=lambda: lambda: order.append(2))
        gate.set()
        assert s.synchronize() is None
        assert order == [1, 2]
    finally:
        s.close()


def test_worker_waits_for_inline_work() -> None:
    s = Stream()
    try:
        order: list[int] = []
        started = threading.Event()

        def slow_inline() -> None:
            started.set()
            time.sleep(0.05)
            order.append(1)

        t = threading.Thread(target=lambda: s.enqueue(slow_inline, inline=True))
        t.start()
        started.wait(5)
        s.enqueue(lambda: order.append(2))  # queued while the inline work runs
        t.join()
        assert s.synchronize() is None
        assert order == [1, 2]
    finally:
        s.close()


def test_tasks_of_short_modules_are_inline(monkeypatch: pytest.MonkeyPatch) -> None:
    class Gov:
        def __init__(self, ns: int | None) -> None:
            self.ns = ns

        def typical_ns(self) -> int | None:
            return self.ns

    class Bound:
        governor = Gov(None)

    class Loaded:
        bound = Bound()

    loaded = Loaded()
    assert not engine_module.is_short(loaded)  # type: ignore[arg-type]  (not timed yet)
    loaded.bound.governor = Gov(engine_module.INLINE_TASK_NS // 2)
    assert engine_module.is_short(loaded)  # type: ignore[arg-type]
    loaded.bound.governor = Gov(engine_module.INLINE_TASK_NS * 2)
    assert not engine_module.is_short(loaded)  # type: ignore[arg-type]
