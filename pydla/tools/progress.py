"""A progress bar for long work (timed benchmark runs, layerwise comparison, tuning).

Drawn on stderr only when stderr is a terminal, so logs, pipes and CI output stay clean.
"""

from __future__ import annotations

import sys
import time
from types import TracebackType
from typing import TextIO

WIDTH = 30
# Redrawing more often than this costs time inside the very loops being measured.
REDRAW_S = 0.1


class Progress:
    """``with Progress("Timing", total=100) as bar: bar.advance()``.

    ``total`` may be 0 when only a fraction is known (``bar.fraction(0.4)``), e.g. a run that
    ends after a duration or an iteration count, whichever comes last.
    """

    def __init__(self, label: str, total: int = 0, stream: TextIO | None = None,
                 enabled: bool | None = None) -> None:
        self.label = label
        self.total = total
        self.done = 0
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = _is_terminal(self.stream) if enabled is None else enabled
        self._fraction = 0.0
        self._last_draw = 0.0
        self._drawn = False

    def advance(self, n: int = 1) -> None:
        self.done += n
        if self.total:
            self._fraction = min(1.0, self.done / self.total)
        self._draw()

    def report(self, done: int, total: int) -> None:
        """A ``(done, total)`` callback, as the builder's autotuning progress hook calls."""
        self.total = total
        self.done = 0
        self.advance(done)

    def fraction(self, value: float) -> None:
        self._fraction = min(1.0, max(0.0, value))
        self._draw()

    def close(self) -> None:
        if self.enabled and self._drawn:
            self._draw(force=True)
            self.stream.write("\n")
            self.stream.flush()
        self.enabled = False

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def _draw(self, force: bool = False) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if not force and now - self._last_draw < REDRAW_S:
            return
        self._last_draw = now
        filled = int(self._fraction * WIDTH)
        count = f" {self.done}/{self.total}" if self.total else f" {self.done}"
        self.stream.write(f"\r{self.label} [{'#' * filled}{'.' * (WIDTH - filled)}] "
                          f"{self._fraction * 100:3.0f}%{count}")
        self.stream.flush()
        self._drawn = True


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # closed or replaced streams (pytest's capture)
        return False
