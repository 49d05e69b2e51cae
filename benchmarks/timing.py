"""Timing helpers shared by the benchmarks: engines measured alternately in one process."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from typing import TypeVar

import numpy as np

T = TypeVar("T")

# Each engine runs in rounds lasting about this long; the runs of a round's first
# WARM_S are not counted.
ROUND_S = 0.5
WARM_S = 0.1


def alternate(runs: Mapping[str, Callable[[], object]], min_runs: int = 20,
              min_seconds: float = 2.0, max_seconds: float = 300.0) -> dict[str, float]:
    """Median milliseconds of each callable, the callables taking turns, until each ran
    ``min_runs`` counted times and for ``min_seconds`` in total (or ``max_seconds`` passed).

    Taking turns spreads the machine's slow moments (other tenants, frequency changes)
    evenly over the engines, so that their ratio stays meaningful. A turn is a round of
    about ROUND_S whose first WARM_S (at least one run) is not counted: after a switch the
    other engine's worker threads keep spinning on the same cores — onnxruntime's for more
    than 20 ms after its last run (measured here: a 3.6 ms pydla run took 10-14 ms right
    after onnxruntime's, and short rounds made such runs the median) — a cost neither
    engine has in service, where it runs alone.
    """
    for fn in runs.values():  # warm-up
        fn()
    samples: dict[str, list[float]] = {name: [] for name in runs}
    spent = dict.fromkeys(runs, 0.0)
    deadline = time.perf_counter() + max_seconds
    while True:
        for name, fn in runs.items():
            begin = time.perf_counter()
            fn()  # the switch-over run, never counted
            while time.perf_counter() - begin < WARM_S:
                fn()
            while True:
                start = time.perf_counter()
                fn()
                end = time.perf_counter()
                samples[name].append(end - start)
                spent[name] += end - start
                if end - begin >= ROUND_S:
                    break
        done = all(len(s) >= min_runs and spent[n] >= min_seconds for n, s in samples.items())
        if done or (time.perf_counter() > deadline and all(len(s) >= 3 for s in
                                                            samples.values())):
            break
    return {name: float(np.median(s)) * 1e3 for name, s in samples.items()}


def _cpu_times() -> tuple[int, int] | None:
    """(idle, total) jiffies of all CPUs since boot; None where /proc/stat is missing."""
    try:
        with open("/proc/stat") as f:
            fields = [int(v) for v in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    return fields[3] + fields[4], sum(fields)


def idle_fraction(window_s: float = 1.0) -> float | None:
    """How idle the machine's CPUs were over the next ``window_s`` seconds (0…1)."""
    first = _cpu_times()
    time.sleep(window_s)
    second = _cpu_times()
    if first is None or second is None or second[1] == first[1]:
        return None
    return (second[0] - first[0]) / (second[1] - first[1])


def wait_for_idle(max_s: float, threshold: float = 0.9) -> float | None:
    """On a shared machine, wait (up to ``max_s``) until other processes leave the CPUs
    at least ``threshold`` idle; returns the last idle fraction seen."""
    deadline = time.monotonic() + max_s
    while True:
        idle = idle_fraction()
        if idle is None or idle >= threshold or time.monotonic() >= deadline:
            return idle


@contextlib.contextmanager
def busy_neighbours(count: int) -> Iterator[None]:
    """``count`` unrelated processes spinning on the CPUs meanwhile: the shared server,
    container or CI runner where one core is taken by someone else (0: nothing)."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
             for _ in range(count)]
    try:
        if procs:
            time.sleep(0.3)  # let the scheduler place them
        yield
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


def others_load(fn: Callable[[], T]) -> tuple[T, float | None]:
    """Run ``fn``; also return the share of the machine's CPU time that other processes
    used meanwhile (0: the machine was ours alone), from /proc/stat and our own times."""
    import os

    start, own = _cpu_times(), os.times()
    result = fn()
    end, own_end = _cpu_times(), os.times()
    if start is None or end is None or end[1] == start[1]:
        return result, None
    ticks = os.sysconf("SC_CLK_TCK")
    busy = (end[1] - start[1]) - (end[0] - start[0])
    ours = ((own_end.user - own.user) + (own_end.system - own.system)) * ticks
    return result, max(0.0, (busy - ours) / (end[1] - start[1]))
