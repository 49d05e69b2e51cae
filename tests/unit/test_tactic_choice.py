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


def test_reference_must_also_beat_the_runner_up_on_one_thread() -> None:
    one = tactics.ONE_THREAD
    # cores busy with other work: the parallel run lost time slices; on one thread the
    # fast kernel beats the single-threaded reference
    assert pick({"gemm": 5.0, REFERENCE: 1.0, "gemm" + one: 0.8}) == "gemm"
    # a real win of the reference holds on one thread too
    assert pick({"gemm": 1.2, REFERENCE: 1.0, "gemm" + one: 2.4}) == REFERENCE
    # one-thread entries never win by themselves
    assert pick({"gemm": 1.0, REFERENCE: 2.0, "gemm" + one: 0.1}) == "gemm"


def test_timer_times_the_runner_up_on_one_thread_where_the_reference_wins(
        monkeypatch) -> None:  # noqa: ANN001
    import numpy as np

    from pydla.backends.base import LayerSpec, TensorSpec
    from pydla.backends.cpu import threads
    from pydla.dtypes import DType

    calls: list[tuple[str, bool]] = []

    def fake(spec, name, inputs, cold=True, one_thread=False, **_):  # noqa: ANN001, ANN202
        calls.append((name, one_thread))
        if name == REFERENCE:
            return 1.0
        return 0.7 if one_thread else 6.0  # parallel runs slowed by busy cores

    monkeypatch.setattr(tactics, "time_tactic", fake)
    monkeypatch.setattr(threads, "num_threads", lambda: 2)
    spec = LayerSpec("c", "Conv", {"strides": [1, 1], "pads": [0, 0, 0, 0],
                                   "dilations": [1, 1], "group": 1},
                     [TensorSpec((1, 16, 8, 8), DType.FLOAT32),
                      TensorSpec((16, 16, 1, 1), DType.FLOAT32)],
                     [TensorSpec((1, 16, 8, 8), DType.FLOAT32)], None)
    w = np.ones((16, 16, 1, 1), np.float32)
    cache = tactics.TimingCache.load(None)
    timer = tactics.LayerTimer(cache, cold=False)
    timings = timer.timings(spec, [None, w])
    assert pick(timings) != REFERENCE
    assert sum(one for _, one in calls) == 1  # only the runner-up, only once
    calls.clear()
    assert timer.timings(spec, [None, w]) == timings and not calls  # from the cache
