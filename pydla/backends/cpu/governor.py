"""How many threads a CPU program's run uses: chosen run by run, by measurement.

Every kernel splits its work into the program's ``threads`` parts when it is bound. A run
may execute those parts on fewer threads — ``numba.set_num_threads(k)`` before the run
makes each parallel loop over n parts run on k threads — down to one, where the parts run
one after another on the calling thread: no fork, no barrier.

Why: every layer ends in a barrier that waits for its slowest thread. When another process
holds one of the cores, a worker that loses its core at a barrier waits out a scheduler
time slice (milliseconds) for a layer of microseconds. Measured on this project's 2-core
machine with one core taken by a busy loop: PP-LCNet 9.2 ms on 2 threads, 6.0 ms on 1,
onnxruntime 8.3 ms (alone: 4.7 ms on 2 threads, 6.3 on 1). A fixed thread count is wrong in
one of the two cases, so the governor measures:

- it times each run and keeps the last ``WINDOW`` times of the count it uses;
- now and then it *probes*: ``PROBE_RUNS`` runs with the neighbouring count (the next
  smaller one, or the next larger one once below the maximum), and switches when their
  median beats the current count's median by more than ``HYSTERESIS``;
- probes back off (``MIN_INTERVAL`` doubling up to ``MAX_INTERVAL`` runs) while they lose,
  so a machine that stays quiet pays one slower run in hundreds; a run that overruns its
  count's median ``OVERRUN``-fold (the machine changed) brings the next probe forward.

Runs just after the program sat idle are judged apart. Another engine that ran in the
gap (onnxruntime taking its turn in a benchmark, any numba or BLAS pool used between tasks)
leaves its threads spinning on the cores for tens of milliseconds; runs in that wake — those
within ``SETTLE_S`` of the end of an idle gap longer than ``GAP_S`` — are "settling" runs.
Their times go to a window of their own, and a probe decides only from runs of the same
kind as most recent runs: a program run back to back is judged on its steady runs (a probe
in another engine's wake would find fewer threads faster and switch wrongly: measured,
adaptive 4-12 % slower than fixed on a quiet machine with onnxruntime taking turns); a
program paced by its caller (a frame every 30 ms), whose every run follows a gap, is judged
on exactly those.

``PYDLA_THREAD_POLICY=fixed`` turns it off: every run uses the program's thread count.
"""

from __future__ import annotations

import os
import time
from collections import Counter, deque
from collections.abc import Callable, Collection

POLICY_VAR = "PYDLA_THREAD_POLICY"
POLICIES = ("adaptive", "fixed")

WINDOW = 7  # recent run times kept for the count in use
PROBE_RUNS = 2  # runs in a probe: one sample alone is too noisy under contention
HYSTERESIS = 0.10  # a probe must be this much faster to win
OVERRUN = 2.0  # a run this many times its count's median triggers a probe
CONFIRM_AFTER = 2  # runs after a switch before probing back: a passing disturbance
# (another engine's threads spinning for ~20 ms after its turn) must not hold the
# program on fewer threads for a whole interval
MIN_INTERVAL = 8  # runs between probes, doubling while probes lose ...
MAX_INTERVAL = 512  # ... up to this
GAP_NS = 1_000_000  # idle time between two runs that counts as a gap (1 ms) ...
SETTLE_NS = 40_000_000  # ... and how long its wake lasts (onnxruntime's spin: > 20 ms)
HISTORY = 32  # recent runs whose kind (steady or settling) picks the kind judged
MAX_PROBE_TRIES = 4 * PROBE_RUNS  # probe runs of the other kind before a probe is dropped


def policy() -> str:
    """The thread policy named by ``PYDLA_THREAD_POLICY`` (default ``adaptive``)."""
    raw = os.environ.get(POLICY_VAR, "").strip().lower() or "adaptive"
    if raw not in POLICIES:
        raise ValueError(f"{POLICY_VAR}={raw!r}: expected one of {', '.join(POLICIES)}")
    return raw


def _median(values: Collection[int]) -> float:
    """statistics.median without its overhead: it runs after every run of a program
    whose whole run may take microseconds."""
    ordered = sorted(values)
    half = len(ordered) // 2
    return ordered[half] if len(ordered) % 2 else (ordered[half - 1] + ordered[half]) / 2


def candidates(threads: int) -> list[int]:
    """The thread counts a program of ``threads`` parts may run with, largest first:
    halving down to 1 (2 → [2, 1]; 8 → [8, 4, 2, 1])."""
    counts = [threads]
    while counts[-1] > 1:
        counts.append(counts[-1] // 2)
    return counts


class Governor:
    """Picks the thread count of each run (``begin``) from the times of the runs before
    (``end``). Not thread-safe on purpose: one program runs one task at a time."""

    def __init__(self, threads: int, adaptive: bool = True,
                 clock: Callable[[], int] = time.perf_counter_ns) -> None:
        self.counts = candidates(threads) if adaptive else [threads]
        self.current = 0  # index into counts
        # ns, runs at counts[current]: steady runs (False) and settling runs (True) apart
        self.windows = {False: deque(maxlen=WINDOW), True: deque(maxlen=WINDOW)}
        # typical_ns's answer for each kind: the median ``end`` works out anyway (once the
        # window is full, of the runs before the latest), read at every task submission.
        # Kept across a switch: the last count's times stand in until the new count has its
        # own, so a short program is not taken for a long one (and handed to a stream's
        # worker) meanwhile.
        self._typical: dict[bool, float | None] = {False: None, True: None}
        self._fresh = {False: 0, True: 0}  # runs the typical median may still stand for
        self.kinds: deque[bool] = deque(maxlen=HISTORY)  # recent runs: settling or not
        self._settling_runs = 0  # how many of ``kinds`` are settling runs
        self.interval = MIN_INTERVAL
        self.until_probe = MIN_INTERVAL
        self.probe: int | None = None  # index being probed
        self.probe_times: list[int] = []
        self.probe_tries = 0
        self.downward = True  # the direction of the next probe
        self.switches = 0
        self.runs: Counter[int] = Counter()  # runs started, by thread count
        self._running = 0
        self._clock = clock
        self._started = 0
        self._last_end: int | None = None
        self._settle_until = 0
        self._settling = False

    @property
    def times(self) -> deque[int]:
        """The recent times at the current count, of the kind of run judged now."""
        return self.windows[self._judged()]

    def _judged(self) -> bool:
        """The kind of run decisions use: the kind most recent runs were (steady on a tie)."""
        return 2 * self._settling_runs > len(self.kinds)

    @property
    def threads(self) -> int:
        """The thread count runs use now (a probe apart)."""
        return self.counts[self.current]

    def typical_ns(self) -> int | None:
        """The median of the recent runs (None before three runs): of the kind judged now,
        else of the other kind — a program run again after a gap has settling runs to judge
        only after a few of them, and is no slower meanwhile."""
        judged = 2 * self._settling_runs > len(self.kinds)  # _judged(), inlined: hot
        typical = self._typical[judged]
        if typical is None:
            typical = self._typical[not judged]
        return None if typical is None else int(typical)

    def describe(self) -> str:
        """The runs by thread count, for a benchmark's report: "2 threads (adaptive: 1 in 3 %
        of the runs)"."""
        total = sum(self.runs.values())
        top = self.counts[0]
        text = f"{top} thread{'s' if top != 1 else ''}"
        if len(self.counts) == 1:
            return text + (" (fixed)" if top > 1 else "")
        fewer = [(n, k) for n, k in sorted(self.runs.items(), reverse=True) if n != top and k]
        if not total or not fewer:
            return text + " (adaptive: every run used them)"
        parts = ", ".join(f"{n} in {100 * k / total:.0f} %" for n, k in fewer)
        return text + f" (adaptive: {parts} of the runs)"

    def begin(self) -> int:
        """The thread count for the run about to start."""
        now = self._started = self._clock()
        last_end = self._last_end
        if last_end is not None and now - last_end > GAP_NS:
            self._settle_until = now + SETTLE_NS
        settling = self._settling = now < self._settle_until
        probe = self.probe
        if probe is None:
            if self.until_probe <= 0 and len(self.counts) > 1 and settling == self._judged():
                probe = self.probe = self._neighbour()
                self.probe_times = []
                self.probe_tries = 0
            else:
                probe = self.current
        self._running = probe
        count = self.counts[probe]
        self.runs[count] += 1
        return count

    def end(self, elapsed_ns: int) -> None:
        """The run started by ``begin`` took ``elapsed_ns``."""
        self._last_end = self._started + elapsed_ns
        kind = self._settling
        kinds = self.kinds
        settling_runs = self._settling_runs
        if len(kinds) == HISTORY:
            settling_runs -= kinds[0]
        kinds.append(kind)
        self._settling_runs = settling_runs + kind
        if self.probe is not None and self._running == self.probe:
            self.probe_tries += 1
            if kind == self._judged():
                self.probe_times.append(elapsed_ns)
            if len(self.probe_times) >= PROBE_RUNS:
                self._decide()
            elif self.probe_tries >= MAX_PROBE_TRIES:  # its runs kept landing in a wake
                self.probe = None
                self.until_probe = self.interval
            return
        window = self.windows[kind]
        if len(window) < WINDOW:  # filling: typical from three runs on, as soon as may be
            usual = _median(window) if len(window) >= 3 else None
            window.append(elapsed_ns)
            if len(window) >= 3:
                self._typical[kind] = _median(window)
            self._fresh[kind] = 0
        else:
            if self._fresh[kind] > 0:
                # a full window's median, worked out at most WINDOW // 2 runs ago: a
                # program of microseconds is not charged a sort at every run for it
                usual = self._typical[kind]
                self._fresh[kind] -= 1
            else:
                usual = self._typical[kind] = sorted(window)[WINDOW // 2]  # WINDOW is odd
                self._fresh[kind] = WINDOW // 2
            window.append(elapsed_ns)
        if kind != (2 * self._settling_runs > len(self.kinds)):  # _judged(), inlined: hot
            return
        self.until_probe -= 1
        if usual is not None and elapsed_ns > OVERRUN * usual:
            # the machine changed (or a hiccup): look again soon, not in hundreds of runs
            self.interval = MIN_INTERVAL
            self.until_probe = 0

    def _neighbour(self) -> int:
        down, up = self.current + 1, self.current - 1
        if up < 0 or (self.downward and down < len(self.counts)):
            return down
        return up

    def _decide(self) -> None:
        assert self.probe is not None
        probed = _median(self.probe_times)
        usual = _median(self.times) if self.times else float("inf")
        if probed < (1.0 - HYSTERESIS) * usual:
            went_down = self.probe > self.current
            self.current = self.probe
            judged = self._judged()
            self.windows[judged] = deque(self.probe_times, maxlen=WINDOW)
            self.windows[not judged] = deque(maxlen=WINDOW)
            self._fresh = {False: 0, True: 0}  # new windows: medians of their own
            self.interval = MIN_INTERVAL
            self.switches += 1
            # confirm soon, looking back the way it came: a passing disturbance reverts in
            # a few runs; a lasting one loses the confirmation and probes back off
            self.downward = not went_down
            self.until_probe = CONFIRM_AFTER
        else:
            self.interval = min(2 * self.interval, MAX_INTERVAL)
            # try the other side next time, where there is one
            if 0 < self.current < len(self.counts) - 1:
                self.downward = not self.downward
            else:
                self.downward = self.current == 0
            self.until_probe = self.interval
        self.probe = None
