"""How the builder picks a layer's tactic from its timings (pydla.plan.tactics)."""

from __future__ import annotations

import pydla.builder  # noqa: F401  (imports the passes before the planner: no cycle)
from pydla.plan import tactics
from pydla.plan.tactics import REFERENCE, pick


def test_fastest_fast_tactic_wins() -> None:
    assert pick({"im2col": 1.0, "winograd4": 0.5, REFERENCE: 2.0}) == "winograd4"


def test_reference_needs_a_clear_margin() -> None:
    # A near-tie goes to the fast tactic (alone the reference's BLAS looks as good).
    assert pick({"blas": 0.045, REFERENCE: 0.042}) == "blas"
    # A clear win stays the reference's.
    assert pick({"blas": 0.10, REFERENCE: 0.05}) == REFERENCE
    assert pick({REFERENCE: 0.05}) == REFERENCE


def test_cache_size_is_read() -> None:
    assert tactics._last_level_cache_bytes() >= 1 << 20
