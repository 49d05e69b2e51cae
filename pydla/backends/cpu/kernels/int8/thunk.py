"""A layer's fork calls as one callable that keeps its buffers alive."""

from __future__ import annotations

from collections.abc import Callable, Sequence


def bound(steps: Sequence[Callable[[], object]], keep: tuple[object, ...]) -> Callable[[], None]:
    """The steps in order, as one call; ``keep`` (scratch, packed copies) lives as long as
    it does. A new function: a fork call's own ``keep`` (its argument blob) must not be
    overwritten."""
    if len(steps) == 1:
        only = steps[0]

        def run() -> None:
            only()
    else:
        first, then = steps

        def run() -> None:
            first()
            then()

    run.keep = keep  # type: ignore[attr-defined]
    return run
