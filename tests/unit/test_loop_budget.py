"""A Loop is unrolled only up to a budget of body nodes: a long decoder loop is refused at
once with the numbers, a loop whose condition stops it early builds whatever its M says."""

from __future__ import annotations

import time

import numpy as np
import pytest
from onnx import helper

from pydla.builder import build
from pydla.errors import ModelImportError
from pydla.frontend.onnx.ops.loops import MAX_UNROLLED_NODES
from tests.ops.test_loops import _loop_body, _loop_model
from tests.oracle import make_model


def _long_loop(trips: int, with_cond: bool):
    node = helper.make_node("Loop", ["M", "cond" if with_cond else "", "y0"], ["y", "ys"],
                            body=_loop_body("keep"))
    inits = {"M": np.array(trips, np.int64), "outer": np.ones((1, 2), np.float32)}
    if with_cond:
        inits["cond"] = np.array(True)
    return make_model([node], {"y0": (np.float32, [1, 2])}, ["y"], inits, opset=13)


def test_a_long_loop_is_refused_at_once_with_the_numbers():
    start = time.perf_counter()
    with pytest.raises(ModelImportError, match=r"copy its 7-node body at least 100000 times "
                       rf"\(its trip count\), more than the {MAX_UNROLLED_NODES:,} nodes"):
        build(_long_loop(100_000, with_cond=False))
    assert time.perf_counter() - start < 5


def test_a_condition_driven_loop_is_refused_when_it_reaches_the_budget():
    limit = MAX_UNROLLED_NODES // 7 + 1
    with pytest.raises(ModelImportError, match=f"at least {limit} times \\(its condition "
                       f"still true after {limit - 1} iterations\\)"):
        build(_long_loop(100_000, with_cond=True))


def test_a_huge_trip_count_that_stops_early_builds():
    build(_loop_model("stop", 10**9))  # ran against onnxruntime in tests/ops/test_loops.py
