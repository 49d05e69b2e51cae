"""Loop and Scan (unrolled at build time) against onnxruntime."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from pydla.builder import build
from pydla.errors import ModelImportError
from tests.oracle import check_against_ort, make_model

RNG = np.random.default_rng(29)
F = TensorProto.FLOAT


def _vi(name: str, elem: int, shape: list) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, shape)


def _loop_body(cond_rule: str) -> onnx.GraphProto:
    """y += table[i] (picked with the iteration number); scans y; cond per ``cond_rule``."""
    table = helper.make_tensor("table", F, [6, 2], RNG.standard_normal(12).tolist())
    nodes = [
        helper.make_node("Reshape", ["i", "one"], ["start"]),
        helper.make_node("Add", ["start", "one"], ["end"]),
        helper.make_node("Slice", ["table", "start", "end"], ["row"]),
        helper.make_node("Add", ["y_in", "row"], ["y_add"]),
        helper.make_node("Mul", ["y_add", "outer"], ["y_out"]),
        helper.make_node("Identity", ["y_out"], ["scan_out"]),
    ]
    if cond_rule == "keep":
        nodes.append(helper.make_node("Identity", ["c_in"], ["c_out"]))
    else:  # stop after iteration 2
        nodes.append(helper.make_node("Less", ["i", "two"], ["c_out"]))
    inits = [table, helper.make_tensor("one", TensorProto.INT64, [1], [1]),
             helper.make_tensor("two", TensorProto.INT64, [], [2])]
    return helper.make_graph(
        nodes, "body",
        [_vi("i", TensorProto.INT64, []), _vi("c_in", TensorProto.BOOL, []),
         _vi("y_in", F, [1, 2])],
        [_vi("c_out", TensorProto.BOOL, []), _vi("y_out", F, [1, 2]),
         _vi("scan_out", F, [1, 2])], inits)


def _loop_model(cond_rule: str, trips: int | None, opset: int = 13) -> onnx.ModelProto:
    inputs = ["M" if trips is not None else "", "cond", "y0"]
    node = helper.make_node("Loop", inputs, ["y", "ys"], body=_loop_body(cond_rule))
    inits = {"cond": np.array(True), "outer": np.array([[1.0, 0.5]], np.float32)}
    if trips is not None:
        inits["M"] = np.array(trips, np.int64)
    return make_model([node], {"y0": (np.float32, [1, 2])}, ["y", "ys"], inits, opset=opset)


@pytest.mark.parametrize("opset", [11, 13, 16])
@pytest.mark.parametrize("trips", [1, 5])
def test_loop_fixed_trip_count(opset, trips):
    check_against_ort(_loop_model("keep", trips, opset), {"y0": RNG.random((1, 2), np.float32)})


def test_loop_condition_turns_false():
    feeds = {"y0": RNG.random((1, 2), np.float32)}
    check_against_ort(_loop_model("stop", 6), feeds)
    check_against_ort(_loop_model("stop", None), feeds)


def test_loop_trip_count_from_data_is_refused():
    node = helper.make_node("Loop", ["M", "", "y0"], ["y", "ys"], body=_loop_body("keep"))
    model = make_model([node], {"M": (np.int64, []), "y0": (np.float32, [1, 2])}, ["y"],
                       {"outer": np.ones((1, 2), np.float32)}, opset=13)
    with pytest.raises(ModelImportError, match="trip count"):
        build(model)


def _scan_body() -> onnx.GraphProto:
    """s += x_t; out_t = s · w_t (one state, two scan inputs, two scan outputs)."""
    nodes = [helper.make_node("Add", ["s_in", "x_t"], ["s_out"]),
             helper.make_node("Mul", ["s_out", "w_t"], ["o1"]),
             helper.make_node("Neg", ["x_t"], ["o2"])]
    return helper.make_graph(
        nodes, "scan_body", [_vi("s_in", F, [3]), _vi("x_t", F, [3]), _vi("w_t", F, [3])],
        [_vi("s_out", F, [3]), _vi("o1", F, [3]), _vi("o2", F, [3])])


@pytest.mark.parametrize("opset", [9, 11, 16])
@pytest.mark.parametrize("directions,axes,out_dirs,out_axes", [
    ([0, 0], [0, 0], [0, 0], [0, 0]),
    ([1, 0], [0, 1], [0, 1], [1, 0]),
    ([0, 1], [1, -2], [1, 0], [-1, 1]),
])
def test_scan(opset, directions, axes, out_dirs, out_axes):
    shapes = [[4, 3] if a % 2 == 0 else [3, 4] for a in axes]
    node = helper.make_node("Scan", ["s0", "x", "w"], ["s", "o1", "o2"], body=_scan_body(),
                            num_scan_inputs=2, scan_input_directions=directions,
                            scan_input_axes=axes, scan_output_directions=out_dirs,
                            scan_output_axes=out_axes)
    feeds = {"s0": RNG.random(3, np.float32), "x": RNG.random(shapes[0], np.float32),
             "w": RNG.random(shapes[1], np.float32)}
    model = make_model([node], {n: (a.dtype, a.shape) for n, a in feeds.items()},
                       ["s", "o1", "o2"], opset=opset)
    check_against_ort(model, feeds)


def test_scan8_batched_with_directions():
    node = helper.make_node("Scan", ["", "s0", "x", "w"], ["s", "o1", "o2"], body=_scan_body(),
                            num_scan_inputs=2, directions=[0, 1])
    feeds = {"s0": RNG.random((2, 3), np.float32), "x": RNG.random((2, 4, 3), np.float32),
             "w": RNG.random((2, 4, 3), np.float32)}
    model = make_model([node], {n: (a.dtype, a.shape) for n, a in feeds.items()},
                       ["s", "o1", "o2"], opset=8)
    check_against_ort(model, feeds)


def test_scan_over_constant_folds():
    node = helper.make_node("Scan", ["s0", "x", "w"], ["s", "o1", "o2"], body=_scan_body(),
                            num_scan_inputs=2)
    add = helper.make_node("Add", ["s", "z"], ["y"])
    model = make_model([node, add], {"z": (np.float32, [3])}, ["y", "o1"],
                       {"s0": np.zeros(3, np.float32),
                        "x": RNG.random((5, 3)).astype(np.float32),
                        "w": RNG.random((5, 3)).astype(np.float32)}, opset=16)
    check_against_ort(model, {"z": RNG.random(3, np.float32)})


# -- If with a condition known only at run time ----------------------------------------------

def _if_model(else_shape: list[int]) -> onnx.ModelProto:
    """y = If(sum(x) >= 0) then Relu(x)·2 else Neg(x) (a score gating a second stage)."""
    two = helper.make_tensor("two", F, [], [2.0])
    then = helper.make_graph([helper.make_node("Relu", ["x"], ["r"]),
                              helper.make_node("Mul", ["r", "two"], ["t"])],
                             "then", [], [_vi("t", F, [2, 3])], [two])
    other_nodes = [helper.make_node("Neg", ["x"], ["e0"])]
    if else_shape != [2, 3]:
        shape = helper.make_tensor("shape", TensorProto.INT64, [len(else_shape)], else_shape)
        other_nodes.append(helper.make_node("Reshape", ["e0", "shape"], ["e"]))
        other = helper.make_graph(other_nodes, "else", [], [_vi("e", F, else_shape)], [shape])
    else:
        other_nodes.append(helper.make_node("Identity", ["e0"], ["e"]))
        other = helper.make_graph(other_nodes, "else", [], [_vi("e", F, else_shape)])
    zero = helper.make_tensor("zero", F, [1], [0.0])
    nodes = [helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
             helper.make_node("GreaterOrEqual", ["s", "zero"], ["c"]),
             helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)]
    graph = helper.make_graph(nodes, "gate", [_vi("x", F, [2, 3])], [_vi("y", F, [2, 3])],
                              [zero])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_if_with_a_runtime_condition_takes_the_right_branch(sign: float) -> None:
    x = np.abs(RNG.standard_normal((2, 3))).astype(np.float32) * sign
    got = check_against_ort(_if_model([2, 3]), {"x": x})
    np.testing.assert_allclose(got[0], 2 * x if sign > 0 else -x, rtol=1e-6)


def test_if_with_a_runtime_condition_refuses_branches_of_other_shapes() -> None:
    with pytest.raises(ModelImportError, match=r"output 0 is float32\[2, 3\] in the then "
                                               r"branch and float32\[3, 2\]"):
        build(_if_model([3, 2]))
