"""The timing loop of ``pydla bench``: warm-up, then timed inferences on N streams.

Each stream is a thread with its own bound copy of the module (its own activation arena),
as trtexec's ``--infStreams`` gives each stream its own execution context. As in trtexec's
inference loop, every stream runs at least ``iterations`` timed queries, and the timed phase
lasts at least ``duration``. On a GPU each stream's runner also has its own CUDA stream, and
a query counts once the GPU has completed it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from pydla.tools.profiling import InferenceTrace, Runner
from pydla.tools.progress import Progress

# How often the calling thread wakes to redraw the progress bar while streams run.
POLL_S = 0.1


@dataclass
class BenchSettings:
    iterations: int = 10
    warmup_ms: float = 200.0
    duration_s: float = 3.0


@dataclass
class BenchResult:
    warmup: list[InferenceTrace] = field(default_factory=list)
    timed: list[InferenceTrace] = field(default_factory=list)

    @property
    def walltime_ns(self) -> int:
        """From the first timed query's start to the last one's end (trtexec's host walltime)."""
        if not self.timed:
            return 0
        return max(t.end_ns for t in self.timed) - min(t.start_ns for t in self.timed)


class _Shared:
    def __init__(self, streams: int, settings: BenchSettings) -> None:
        self.settings = settings
        self.barrier = threading.Barrier(streams)
        self.counts = [0] * streams
        self.timed_start_ns = 0
        self.errors: list[BaseException] = []

    def take_query(self, stream: int) -> bool:
        """Whether ``stream`` should start another timed query (and count it)."""
        s = self.settings
        elapsed = time.perf_counter_ns() - self.timed_start_ns
        if self.counts[stream] >= s.iterations and elapsed >= s.duration_s * 1e9:
            return False
        self.counts[stream] += 1
        return True

    def fraction(self) -> float:
        s = self.settings
        by_count = min(self.counts) / s.iterations if s.iterations > 0 else 1.0
        elapsed = (time.perf_counter_ns() - self.timed_start_ns) / 1e9 if self.timed_start_ns \
            else 0.0
        by_time = elapsed / s.duration_s if s.duration_s > 0 else 1.0
        return min(by_count, by_time)


def _stream(index: int, runner: Runner, shared: _Shared, warmup: list[InferenceTrace],
            timed: list[InferenceTrace]) -> None:
    try:
        warm_end = time.perf_counter_ns() + shared.settings.warmup_ms * 1e6
        while time.perf_counter_ns() < warm_end:
            warmup.append(runner.run())
        # Every stream starts timing together, so the walltime covers concurrent work only.
        if shared.barrier.wait() == 0:
            shared.timed_start_ns = time.perf_counter_ns()
        shared.barrier.wait()
        while shared.take_query(index):
            timed.append(runner.run())
    except threading.BrokenBarrierError:
        return
    except BaseException as e:  # noqa: BLE001  (re-raised in the calling thread)
        shared.errors.append(e)
        shared.barrier.abort()


def run_bench(runners: Sequence[Runner], settings: BenchSettings,
              progress: Callable[[], Progress] | None = None) -> BenchResult:
    """Run every runner on its own thread; returns all traces, warm-up ones apart."""
    shared = _Shared(len(runners), settings)
    warm: list[list[InferenceTrace]] = [[] for _ in runners]
    timed: list[list[InferenceTrace]] = [[] for _ in runners]
    threads = [threading.Thread(target=_stream, args=(i, r, shared, w, t), daemon=True)
               for i, (r, w, t) in enumerate(zip(runners, warm, timed))]
    bar = progress() if progress else Progress("Timing", enabled=False)
    bar.total = settings.iterations * len(runners)
    with bar:
        for th in threads:
            th.start()
        alive = threads
        while alive:
            alive[0].join(POLL_S)
            alive = [th for th in alive if th.is_alive()]
            bar.done = sum(shared.counts)
            bar.fraction(shared.fraction())
    if shared.errors:
        raise shared.errors[0]
    result = BenchResult()
    for w, t in zip(warm, timed):
        result.warmup.extend(w)
        result.timed.extend(t)
    result.timed.sort(key=lambda tr: tr.start_ns)
    return result
