"""The command line's log lines, as trtexec prints them: ``[MM/DD/YYYY-HH:MM:SS] [I] message``.

Everything the CLI says goes through ``logging.getLogger("pydla")``; the library itself only
has a NullHandler there (pydla/__init__.py), so a program that imports pydla decides where its
messages go. ``cli_logging`` installs the one handler and formatter for a command's run.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

from tqdm import tqdm

LOG = logging.getLogger("pydla")

# trtexec's severity letters; "V" (verbose) is logging's DEBUG.
_LETTERS = {logging.DEBUG: "V", logging.INFO: "I", logging.WARNING: "W", logging.ERROR: "E",
            logging.CRITICAL: "F"}


class TrtexecFormatter(logging.Formatter):
    """Each line of a message gets the time stamp and severity, as trtexec's logger writes."""

    def format(self, record: logging.LogRecord) -> str:
        stamp = time.strftime("%m/%d/%Y-%H:%M:%S", time.localtime(record.created))
        prefix = f"[{stamp}] [{_LETTERS.get(record.levelno, 'I')}] "
        return "\n".join(prefix + line for line in record.getMessage().split("\n"))


class _StdoutHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever ``sys.stdout`` is when a record comes (a test's capture, a pipe):
    trtexec prints all of its log to stdout, results and warnings alike."""

    def __init__(self) -> None:
        super().__init__(sys.stdout)

    @property  # type: ignore[override]
    def stream(self) -> TextIO:
        return sys.stdout

    @stream.setter
    def stream(self, _value: TextIO) -> None:  # StreamHandler assigns it; always follow stdout
        pass

    def emit(self, record: logging.LogRecord) -> None:
        # tqdm.write lifts any progress bar drawn on the terminal, prints the line, and
        # redraws the bar below it (pydla.tools.progress).
        try:
            tqdm.write(self.format(record), file=sys.stdout)
        except RecursionError:
            raise
        except Exception:  # noqa: BLE001  (logging's contract: report, never raise)
            self.handleError(record)

    def handleError(self, record: logging.LogRecord) -> None:
        # A closed pipe (| head) ends the command quietly in cli.main, not in a logging
        # traceback per line.
        if isinstance(sys.exc_info()[1], BrokenPipeError):
            raise
        super().handleError(record)


@contextmanager
def cli_logging(verbose: bool = False) -> Iterator[logging.Logger]:
    """Route the ``pydla`` logger to stdout in trtexec's format while a command runs (level
    DEBUG with --verbose, else INFO); restored afterwards, so that ``main()`` called from a
    program leaves its logging as it was."""
    handler = _StdoutHandler()
    handler.setFormatter(TrtexecFormatter())
    saved = LOG.level, LOG.propagate
    LOG.addHandler(handler)
    LOG.setLevel(logging.DEBUG if verbose else logging.INFO)
    LOG.propagate = False  # a root handler the embedding program set would print it twice
    try:
        yield LOG
    finally:
        LOG.removeHandler(handler)
        LOG.setLevel(saved[0])
        LOG.propagate = saved[1]
