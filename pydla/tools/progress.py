"""Progress bars for long work (kernel compilation, autotuning, calibration, timed benchmark
runs, layerwise comparison), drawn by tqdm: rate, elapsed time and ETA.

Drawn on stderr only when stderr is a terminal, so logs, pipes and CI output stay clean. The
CLI's log lines go through ``tqdm.write`` (pydla.tools.logs), so a message printed while a
bar is drawn appears above it instead of tearing it. A bar that ends without an error ends
at 100 %: the work it counted is done, whatever the last report said.
"""

from __future__ import annotations

import shutil
import sys
from types import TracebackType
from typing import Any, TextIO

from tqdm import tqdm

# Redrawing more often than this costs time inside the very loops being measured.
REDRAW_S = 0.1
_FRACTION_STEPS = 1000  # a bar over a fraction (no count known) counts thousandths
_FRACTION_FORMAT = "{desc}: {percentage:3.0f}%|{bar}| [{elapsed}<{remaining}]"


class Progress:
    """``with Progress("Timing", total=100) as bar: bar.advance()``.

    ``total`` may be 0 when only a fraction is known (``bar.fraction(0.4)``), e.g. a run that
    ends after a duration or an iteration count, whichever comes last. ``report(done,
    total, phase)`` is the builder's progress hook: a new ``phase`` ("Compiling kernels",
    then "Autotuning") ends the bar and starts the next one.
    """

    def __init__(self, label: str, total: int = 0, stream: TextIO | None = None,
                 enabled: bool | None = None) -> None:
        self.label = label
        self.total = total
        self.done = 0
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = _is_terminal(self.stream) if enabled is None else enabled
        self._bar: Any = None

    def advance(self, n: int = 1) -> None:
        self.done += n
        self._show(self.done)

    def report(self, done: int, total: int, phase: str | None = None) -> None:
        if phase is not None and phase != self.label:
            self._end(complete=True)
            self.label = phase
        if total != self.total:
            self._end(complete=False)
            self.total = total
        self.done = done
        self._show(done)

    def fraction(self, value: float) -> None:
        self._show(round(min(1.0, max(0.0, value)) * _FRACTION_STEPS))

    def close(self, complete: bool = True) -> None:
        self._end(complete)
        self.enabled = False

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close(complete=exc_type is None)

    def _show(self, n: int) -> None:
        if not self.enabled:
            return
        if self._bar is None:
            counted = self.total > 0
            size = _terminal_size()
            self._bar = tqdm(total=self.total if counted else _FRACTION_STEPS, desc=self.label,
                             file=self.stream, mininterval=REDRAW_S, ncols=size[0], nrows=size[1],
                             bar_format=None if counted else _FRACTION_FORMAT, leave=True)
        self._bar.n = min(n, self._bar.total)
        self._bar.refresh() if n >= self._bar.total else self._bar.update(0)

    def _end(self, complete: bool) -> None:
        bar, self._bar = self._bar, None
        if bar is None:
            return
        if complete:
            bar.n = bar.total
            bar.refresh()
        bar.close()


def _terminal_size() -> tuple[int, int]:
    # tqdm's own probe answers -1 × -1 on a pseudo-terminal without a size (`script`, some
    # CI consoles), and then draws nothing; shutil falls back to $COLUMNS/$LINES, then 80×24.
    size = shutil.get_terminal_size()
    return max(20, size.columns), max(2, size.lines)


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # closed or replaced streams (pytest's capture)
        return False
