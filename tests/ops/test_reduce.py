import numpy as np
import pytest
from onnx import helper

from tests.oracle import check_against_ort, make_model

REDUCE_OPS = ["ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1",
              "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"]


def _axes_input_since(op):
    return 13 if op == "ReduceSum" else 18


def _reduce_model(op, shape, axes, opset, dtype=np.float32, **attrs):
    """axes=None leaves them out; they go to the attribute or the input as the opset wants."""
    inits = {}
    inputs = ["x"]
    if axes is not None:
        if opset >= _axes_input_since(op):
            inits["axes"] = np.array(axes, np.int64)
            inputs.append("axes")
        else:
            attrs["axes"] = axes
    node = helper.make_node(op, inputs, ["y"], **attrs)
    return make_model([node], {"x": (dtype, shape)}, ["y"], inits, opset=opset)


def _data(shape, dtype=np.float32, seed=0):
    # Positive values keep ReduceLogSum finite.
    return np.random.default_rng(seed).uniform(0.5, 2.0, shape).astype(dtype)


@pytest.mark.parametrize("op", REDUCE_OPS)
@pytest.mark.parametrize("opset", [7, 13, 18])
@pytest.mark.parametrize("axes,keepdims", [([1], 1), ([0, -1], 0), (None, 1), (None, 0)])
def test_reduce(op, opset, axes, keepdims):
    model = _reduce_model(op, [2, 3, 4], axes, opset, keepdims=keepdims)
    check_against_ort(model, {"x": _data((2, 3, 4))})


@pytest.mark.parametrize("op", REDUCE_OPS)
def test_reduce_noop_with_empty_axes(op):
    # Reducing over no axis still applies the elementwise part (square, abs, log…).
    model = _reduce_model(op, [2, 3], [], 18, noop_with_empty_axes=1)
    x = _data((2, 3)) if op == "ReduceLogSum" else _data((2, 3)) - 1.0
    check_against_ort(model, {"x": x})


def test_reduce_sum_empty_axes_reduce_all():
    model = _reduce_model("ReduceSum", [2, 3], [], 13, keepdims=0)
    check_against_ort(model, {"x": _data((2, 3))})


@pytest.mark.parametrize("op", REDUCE_OPS)
def test_reduce_empty_set(op):
    model = _reduce_model(op, [2, 0, 3], [1], 18, keepdims=1)
    check_against_ort(model, {"x": np.zeros((2, 0, 3), np.float32)})


@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin",
                                "ReduceProd", "ReduceSumSquare", "ReduceL1"])
@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_reduce_integer(op, dtype):
    model = _reduce_model(op, [3, 4], [1], 18, dtype=dtype, keepdims=0)
    x = np.random.default_rng(1).integers(-7, 8, (3, 4)).astype(dtype)
    check_against_ort(model, {"x": x})


@pytest.mark.parametrize("op", ["ReduceMean", "ReduceSum", "ReduceMax", "ReduceL2",
                                "ReduceLogSumExp"])
def test_reduce_fp16(op):
    model = _reduce_model(op, [2, 3, 4], [2], 18, dtype=np.float16)
    check_against_ort(model, {"x": _data((2, 3, 4), np.float16)}, rtol=2e-3, atol=2e-3)


def test_reduce_log_sum_exp_large_values():
    model = _reduce_model("ReduceLogSumExp", [2, 3], [1], 18)
    check_against_ort(model, {"x": np.array([[100.0, 101.0, 99.0], [-50.0, 80.0, 80.0]],
                                            np.float32)})


def test_reduce_constant_folded():
    nodes = [helper.make_node("ReduceSum", ["c", "axes"], ["s"], keepdims=0),
             helper.make_node("Add", ["x", "s"], ["y"])]
    model = make_model(nodes, {"x": (np.float32, [4])}, ["y"],
                       {"c": _data((3, 4)), "axes": np.array([0], np.int64)}, opset=13)
    check_against_ort(model, {"x": _data((4,), seed=2)})


def _arg_model(op, shape, dtype=np.float32, opset=13, **attrs):
    node = helper.make_node(op, ["x"], ["y"], **attrs)
    return make_model([node], {"x": (dtype, shape)}, ["y"], opset=opset)


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("keepdims", [0, 1])
@pytest.mark.parametrize("last", [0, 1])
def test_arg(op, axis, keepdims, last):
    # Few distinct values, so ties (where select_last_index matters) are common.
    x = np.random.default_rng(3).integers(0, 3, (3, 4, 2)).astype(np.float32)
    model = _arg_model(op, [3, 4, 2], axis=axis, keepdims=keepdims, select_last_index=last)
    check_against_ort(model, {"x": x})


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
def test_arg_defaults_old_opset(op):
    x = np.random.default_rng(4).standard_normal((3, 5)).astype(np.float32)
    check_against_ort(_arg_model(op, [3, 5], opset=11), {"x": x})


@pytest.mark.parametrize("dtype", [np.int32, np.float16])
def test_arg_types(dtype):
    x = np.random.default_rng(5).integers(-5, 5, (4, 3)).astype(dtype)
    check_against_ort(_arg_model("ArgMax", [4, 3], dtype=dtype, axis=1, keepdims=0), {"x": x})
