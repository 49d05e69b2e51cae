"""A Loop is unrolled only up to a budget of body nodes; past it the Loop runs as one layer
(pydla.frontend.onnx.ops.loop_layer), built in about the time of one body, and a loop with
scan outputs, which a layer cannot stack, is refused at once."""

from __future__ import annotations

import time

import numpy as np
import pytest
from onnx import TensorProto, helper

from pydla.builder import BuildOptions, build
from pydla.errors import ModelImportError
from pydla.frontend.onnx.ops.loops import MAX_UNROLLED_NODES
from pydla.loadable import read_loadable
from tests.ops.test_loops import _loop_body, _loop_model
from tests.oracle import check_against_ort, make_model

FAST = BuildOptions(autotune=False)


def _long_loop(trips: int, with_cond: bool, scan: bool):
    body = _loop_body("keep")
    outputs = ["y", "ys"]
    if not scan:
        body.output.pop()  # the body's scan output
        outputs = ["y"]
    node = helper.make_node("Loop", ["M", "cond" if with_cond else "", "y0"], outputs,
                            body=body)
    inits = {"M": np.array(trips, np.int64), "outer": np.ones((1, 2), np.float32)}
    if with_cond:
        inits["cond"] = np.array(True)
    return make_model([node], {"y0": (np.float32, [1, 2])}, ["y"], inits, opset=13)


def _loops(data: bytes) -> int:
    return sum(lay.op == "Loop" for lay in read_loadable(data).layers)


def test_a_long_loop_with_scan_outputs_is_refused_at_once():
    start = time.perf_counter()
    with pytest.raises(ModelImportError, match="the body has 1 scan outputs; a Loop run as a "
                       "layer"):
        build(_long_loop(100_000, with_cond=False, scan=True), FAST)
    assert time.perf_counter() - start < 5


@pytest.mark.parametrize("with_cond", [False, True])
def test_a_long_loop_runs_as_one_layer(with_cond: bool):
    # 6 iterations of the 7-node body fit; 6,000 do not (the table holds 6 rows, so the
    # check against onnxruntime runs a short one; the long one is timed)
    assert 6000 * 7 > MAX_UNROLLED_NODES
    start = time.perf_counter()
    data = build(_long_loop(6000, with_cond, scan=False), FAST)
    assert time.perf_counter() - start < 10 and _loops(data) == 1


def test_a_condition_driven_loop_past_the_budget_becomes_a_layer():
    # M absent: the body's condition (i < 1999, known at build time in every copy) alone
    # decides; unrolling gives up at the budget and the loop runs as a layer
    nodes = [helper.make_node("Constant", [], ["k"], value=helper.make_tensor(
                 "k", TensorProto.FLOAT, [], [0.999])),
             helper.make_node("Constant", [], ["last"], value=helper.make_tensor(
                 "last", TensorProto.INT64, [], [1999])),
             helper.make_node("Mul", ["y_in", "k"], ["y_k"]),
             helper.make_node("Add", ["y_k", "outer"], ["y_out"]),
             helper.make_node("Less", ["i", "last"], ["c_out"])]
    vi = helper.make_tensor_value_info
    body = helper.make_graph(nodes, "body", [vi("i", TensorProto.INT64, []),
                                             vi("c_in", TensorProto.BOOL, []),
                                             vi("y_in", TensorProto.FLOAT, [1, 2])],
                             [vi("c_out", TensorProto.BOOL, []),
                              vi("y_out", TensorProto.FLOAT, [1, 2])])
    node = helper.make_node("Loop", ["", "cond", "y0"], ["y"], body=body)
    model = make_model([node], {"y0": (np.float32, [1, 2])}, ["y"],
                       {"cond": np.array(True), "outer": np.ones((1, 2), np.float32)}, opset=13)
    assert 2000 * len(nodes) > MAX_UNROLLED_NODES
    assert _loops(build(model, FAST)) == 1
    check_against_ort(model, {"y0": np.ones((1, 2), np.float32)}, options=FAST)


def test_a_huge_trip_count_that_stops_early_builds():
    build(_loop_model("stop", 10**9))  # ran against onnxruntime in tests/ops/test_loops.py
