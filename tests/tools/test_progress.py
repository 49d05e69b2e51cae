"""Progress bars: drawn on a terminal, silent otherwise."""

import io

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


def test_draws_on_a_terminal_and_ends_the_line():
    stream = Tty()
    with Progress("Timing", total=4, stream=stream) as bar:
        bar.advance(4)
    text = stream.getvalue()
    assert text.startswith("\rTiming [") and text.endswith("100% 4/4\n")
    assert "#" * 30 in text


def test_builder_callback_sets_total_and_done():
    stream = Tty()
    with Progress("Autotuning", stream=stream) as bar:
        bar.report(3, 6)
    assert " 50% 3/6\n" in stream.getvalue()


def test_fraction_without_a_total():
    stream = Tty()
    bar = Progress("Layers", stream=stream)
    bar.fraction(0.5)
    bar.close()
    assert " 50% 0\n" in stream.getvalue()
    bar.fraction(1.0)  # closed bars stay silent
    assert stream.getvalue().count("\n") == 1
