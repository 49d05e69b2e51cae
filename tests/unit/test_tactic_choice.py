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


def test_resident_bytes_count_winograd_filters() -> None:
    """3×3 filters count as Winograd's transformed ones (4×); others as they are."""
    import numpy as np
    from onnx import helper

    from pydla.builder import BuildOptions, build_graph
    from tests.oracle import make_model

    w3 = np.zeros((8, 4, 3, 3), np.float32)
    w1 = np.zeros((16, 8, 1, 1), np.float32)
    nodes = [helper.make_node("Conv", ["x", "w3"], ["a"], pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["a", "w1"], ["y"])]
    model = make_model(nodes, {"x": (np.float32, (1, 4, 8, 8))}, ["y"],
                       {"w3": w3, "w1": w1})
    graph = build_graph(model, BuildOptions(autotune=False))
    assert tactics.resident_bytes(graph) == tactics.DERIVED_3X3 * w3.nbytes + w1.nbytes
