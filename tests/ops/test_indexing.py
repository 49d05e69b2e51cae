"""Indexing ops against onnxruntime, plus run-time index checks and build-time folding."""

from collections.abc import Sequence

import numpy as np
import onnx
import pytest
from onnx import helper

from pydla.builder import build
from pydla.engine import LoadedModule
from pydla.errors import KernelError, ModelImportError
from pydla.loadable import read_loadable
from tests.oracle import check_against_ort, make_model

RNG = np.random.default_rng(1)


def rand(*shape: int, dtype: type = np.float32) -> np.ndarray:
    if np.dtype(dtype).kind in "iu":
        return RNG.integers(0, 9, shape).astype(dtype)
    return RNG.standard_normal(shape).astype(dtype)


Feeds = dict[str, np.ndarray]


def model_of(nodes: list[onnx.NodeProto], feeds: Feeds, outputs: Sequence[str] = ("y",),
             inits: Feeds | None = None, opset: int = 17) -> onnx.ModelProto:
    inputs = {n: (a.dtype, a.shape) for n, a in feeds.items()}
    return make_model(nodes, inputs, list(outputs), inits, opset=opset)


def check(nodes: list[onnx.NodeProto], feeds: Feeds, outputs: Sequence[str] = ("y",),
          inits: Feeds | None = None, opset: int = 17) -> list[np.ndarray]:
    return check_against_ort(model_of(nodes, feeds, outputs, inits, opset), feeds)


def i64(*v: int) -> np.ndarray:
    return np.array(v, np.int64)


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_gather_negative_indices(axis):
    idx = np.array([[0, -1], [2, -3]], np.int64)
    check([helper.make_node("Gather", ["x", "i"], ["y"], axis=axis)],
          {"x": rand(3, 4, 3), "i": idx})


def test_gather_scalar_index_int32_and_fp16():
    check([helper.make_node("Gather", ["x", "i"], ["y"], axis=1)],
          {"x": rand(2, 5).astype(np.float16)}, inits={"i": np.array(-2, np.int32)})


def test_gather_embedding_weight_with_runtime_indices():
    check([helper.make_node("Gather", ["w", "i"], ["y"])],
          {"i": np.array([[1, 0, 4]], np.int64)}, inits={"w": rand(5, 3)})


def run_built(nodes: list[onnx.NodeProto], feeds: Feeds) -> list[np.ndarray]:
    return LoadedModule(build(model_of(nodes, feeds))).run(feeds)


@pytest.mark.parametrize("node,feeds", [
    (helper.make_node("Gather", ["x", "i"], ["y"], axis=1),
     {"x": rand(2, 3), "i": i64(0, 3)}),
    (helper.make_node("Gather", ["x", "i"], ["y"], axis=0),
     {"x": rand(2, 3), "i": i64(-3)}),
    (helper.make_node("GatherElements", ["x", "i"], ["y"], axis=0),
     {"x": rand(2, 3), "i": np.array([[0, 5, 1]], np.int64)}),
    (helper.make_node("GatherND", ["x", "i"], ["y"]),
     {"x": rand(2, 3), "i": np.array([[1, -4]], np.int64)}),
    (helper.make_node("ScatterND", ["x", "i", "u"], ["y"]),
     {"x": rand(2, 3), "i": np.array([[2]], np.int64), "u": rand(1, 3)}),
    (helper.make_node("ScatterElements", ["x", "i", "u"], ["y"], axis=1),
     {"x": rand(2, 3), "i": np.array([[7]], np.int64), "u": rand(1, 1)}),
])
def test_out_of_range_indices_raise_at_run_time(node, feeds):
    with pytest.raises(KernelError, match="out of range") as info:
        run_built([node], feeds)
    assert info.value.op == node.op_type


def test_out_of_range_constant_indices_fail_the_build():
    with pytest.raises(ModelImportError, match="out of range"):
        build(model_of([helper.make_node("Gather", ["w", "i"], ["y"])], {},
                       inits={"w": rand(3, 2), "i": i64(3)}))


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_gather_elements(axis):
    idx = RNG.integers(-2, 2, (2, 2, 3)).astype(np.int64)
    check([helper.make_node("GatherElements", ["x", "i"], ["y"], axis=axis)],
          {"x": rand(2, 2, 3), "i": idx}, opset=13)


@pytest.mark.parametrize("batch_dims,x_shape,i", [
    (0, (2, 3, 4), [[1, -1], [0, 2]]),
    (0, (2, 3), [[[1], [0]], [[-1], [0]]]),
    (1, (2, 3, 4), [[[1, 0], [2, -1]], [[0, 0], [1, 3]]]),
    (2, (2, 3, 4), [[[1], [3], [0]], [[2], [2], [-1]]]),
])
def test_gather_nd(batch_dims, x_shape, i):
    check([helper.make_node("GatherND", ["x", "i"], ["y"], batch_dims=batch_dims)],
          {"x": rand(*x_shape), "i": np.array(i, np.int64)}, opset=13)


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
def test_scatter_nd(reduction):
    idx = np.array([[0, 1], [-1, 2]] + ([[0, 1]] if reduction != "none" else []), np.int64)
    upd = rand(len(idx), 4)
    check([helper.make_node("ScatterND", ["x", "i", "u"], ["y"], reduction=reduction)],
          {"x": rand(2, 3, 4), "i": idx, "u": upd}, opset=18)


def test_scatter_nd_int_elements():
    check([helper.make_node("ScatterND", ["x", "i", "u"], ["y"], reduction="add")],
          {"x": rand(4, dtype=np.int32), "i": np.array([[1], [1], [-1]], np.int64),
           "u": rand(3, dtype=np.int32)}, opset=16)


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
@pytest.mark.parametrize("axis", [0, -1])
def test_scatter_elements(reduction, axis):
    if reduction == "none":  # duplicate targets would have no defined order
        idx = np.array([[1, -1, 0], [0, 2, 1]] if axis else [[1, 0, 2], [0, 2, 1]], np.int64)
    else:
        idx = np.array([[1, -1, 0], [0, 2, 2]] if axis else [[1, 0, -1], [1, 0, 2]], np.int64)
    check([helper.make_node("ScatterElements", ["x", "i", "u"], ["y"], axis=axis,
                            reduction=reduction)],
          {"x": rand(3, 3), "i": idx, "u": rand(2, 3)}, opset=18)


def test_legacy_scatter():
    check([helper.make_node("Scatter", ["x", "i", "u"], ["y"], axis=1)],
          {"x": rand(2, 4), "i": np.array([[3, -4]], np.int64), "u": rand(1, 2)}, opset=10)


@pytest.mark.parametrize("largest", [0, 1])
@pytest.mark.parametrize("axis", [0, -1])
def test_top_k_ties_prefer_lower_index(largest, axis):
    x = np.array([[3, 1, 3, 2], [1, 1, 0, 1], [2, 3, 2, 3]], np.float32)
    check([helper.make_node("TopK", ["x", "k"], ["y", "i"], axis=axis, largest=largest)],
          {"x": x}, ["y", "i"], {"k": i64(2)})


def test_top_k_opset9_attribute_and_ints():
    check([helper.make_node("TopK", ["x"], ["y", "i"], k=3)], {"x": rand(2, 5)}, ["y", "i"],
          opset=9)
    x = np.array([[0, 2**63 - 1, 7, 7, -2**63]], np.int64)
    check([helper.make_node("TopK", ["x", "k"], ["y", "i"])], {"x": x}, ["y", "i"],
          {"k": i64(4)})
    x = np.array([[np.iinfo(np.int32).min, 5, -1, 5]], np.int32)
    check([helper.make_node("TopK", ["x", "k"], ["y", "i"], largest=0)], {"x": x}, ["y", "i"],
          {"k": i64(4)})


@pytest.mark.parametrize("op,opset", [("CumSum", 14), ("CumProd", 26)])
@pytest.mark.parametrize("exclusive", [0, 1])
@pytest.mark.parametrize("reverse", [0, 1])
@pytest.mark.parametrize("axis", [0, -1])
def test_cumulative(op, opset, exclusive, reverse, axis):
    node = helper.make_node(op, ["x", "a"], ["y"], exclusive=exclusive, reverse=reverse)
    check([node], {"x": rand(3, 4)}, inits={"a": np.array(axis, np.int32)}, opset=opset)


def test_cumsum_int32():
    check([helper.make_node("CumSum", ["x", "a"], ["y"], exclusive=1)],
          {"x": rand(2, 5, dtype=np.int32)}, inits={"a": i64(1)})


@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_one_hot(axis):
    idx = np.array([[1, -1, 9], [0, -4, 2]], np.int64)  # 9 and -4 are out of range: all off
    check([helper.make_node("OneHot", ["i", "d", "v"], ["y"], axis=axis)], {"i": idx},
          inits={"d": np.array(3, np.int64), "v": np.array([-1, 5], np.float32)}, opset=11)


def test_one_hot_float_indices_runtime_values():
    check([helper.make_node("OneHot", ["i", "d", "v"], ["y"])],
          {"i": np.array([0.0, 2.7, -1.0], np.float32), "v": np.array([0, 1], np.float32)},
          inits={"d": np.array(4.0, np.float32)}, opset=11)


@pytest.mark.parametrize("axis", [None, 0, -1])
def test_compress_constant_condition(axis):
    kw = {} if axis is None else {"axis": axis}
    cond = np.array([True, False, True], bool)
    check([helper.make_node("Compress", ["x", "c"], ["y"], **kw)], {"x": rand(3, 3)},
          inits={"c": cond})


def test_nonzero_folds_constants_and_refuses_runtime_data():
    nodes = [helper.make_node("NonZero", ["c"], ["nz"]),
             helper.make_node("Gather", ["x", "nz"], ["y"], axis=1)]
    feeds = {"x": rand(3, 4)}
    inits = {"c": np.array([[0, 2], [3, 0]], np.float32)}
    check(nodes, feeds, inits=inits)
    layers = read_loadable(build(model_of(nodes, feeds, inits=inits))).layers
    assert [layer.op for layer in layers] == ["Gather"]
    with pytest.raises(ModelImportError, match="data-dependent"):
        build(model_of([helper.make_node("NonZero", ["x"], ["y"])], {"x": rand(2, 2)}))


@pytest.mark.parametrize("batch_axis,time_axis", [(1, 0), (0, 1)])
def test_reverse_sequence(batch_axis, time_axis):
    x = rand(4, 4, 2)
    lens = np.array([4, 1, 0, 2], np.int64)
    check([helper.make_node("ReverseSequence", ["x", "l"], ["y"], batch_axis=batch_axis,
                            time_axis=time_axis)], {"x": x, "l": lens})
