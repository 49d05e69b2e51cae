"""Progress bars (tqdm): drawn on a terminal, silent otherwise; phases; 100 % at the end;
log lines printed above a bar, not through it."""

import io
import sys

import pytest

from pydla.tools.logs import cli_logging
from pydla.tools.progress import Progress


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_silent_when_not_a_terminal():
    stream = io.StringIO()
    with Progress("Timing", total=3, stream=stream) as bar:
        for _ in range(3):
            bar.advance()
    assert stream.getvalue() == ""


def test_draws_on_a_terminal_with_eta_and_ends_the_line():
    stream = Tty()
    with Progress("Timing", total=4, stream=stream) as bar:
        bar.advance(4)
    text = stream.getvalue()
    assert "Timing: 100%" in text and "4/4" in text and text.endswith("\n")
    assert "<" in text  # elapsed<remaining


def test_a_finished_build_reaches_100_percent():
    """The builder's last report may be (n-1, n): the bar still ends full."""
    stream = Tty()
    with Progress("Autotuning", stream=stream) as bar:
        bar.report(3, 6)
    assert "Autotuning: 100%" in stream.getvalue() and "6/6" in stream.getvalue()


def test_a_failed_build_stops_where_it_was():
    stream = Tty()
    with pytest.raises(RuntimeError), Progress("Autotuning", stream=stream) as bar:
        bar.report(3, 6)
        raise RuntimeError
    text = stream.getvalue()
    assert " 50%" in text and "3/6" in text and "100%" not in text


def test_phases_each_get_their_bar():
    stream = Tty()
    with Progress("Autotuning", stream=stream) as bar:
        bar.report(1, 3, "Compiling kernels")
        bar.report(3, 3, "Compiling kernels")
        bar.report(0, 5, "Autotuning")
        bar.report(4, 5, "Autotuning")
    text = stream.getvalue()
    assert "Compiling kernels: 100%" in text and "3/3" in text
    assert "Autotuning: 100%" in text and "5/5" in text
    assert text.index("Compiling kernels") < text.index("Autotuning")


def test_fraction_without_a_total():
    stream = Tty()
    bar = Progress("Layers", stream=stream)
    bar.fraction(0.5)
    bar.close(complete=False)
    assert "Layers:  50%" in stream.getvalue()
    size = len(stream.getvalue())
    bar.fraction(1.0)  # closed bars stay silent
    assert len(stream.getvalue()) == size


def test_log_lines_go_above_the_bar(monkeypatch):
    terminal = Tty()
    monkeypatch.setattr(sys, "stdout", terminal)
    with cli_logging() as log, Progress("Timing", total=10, stream=terminal) as bar:
        bar.advance(5)
        log.info("halfway")
        bar.advance(5)
    text = terminal.getvalue()
    line = next(x for x in text.split("\n") if "halfway" in x)
    assert line.rstrip().endswith("[I] halfway")  # the message on a line of its own
    assert "Timing" in text[text.index("halfway"):]  # the bar drawn again below it
