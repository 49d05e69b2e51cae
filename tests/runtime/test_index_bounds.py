"""Runtime index values the loadable's rules cannot see (issue 29): every kernel that
indexes with them bounds them first and raises a KernelError naming the layer — never a
read or write outside a buffer, never a silent wrap. (Gathers and scatters:
tests/ops/test_indexing.py.)"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from pydla.builder import BuildOptions, build
from pydla.engine import LoadedModule
from pydla.errors import KernelError
from tests.oracle import check_against_ort, make_model

F, I64 = np.float32, np.int64


def _run(node, feeds: dict[str, np.ndarray], opset: int, outputs: list[str] | None = None):
    ins = {k: (v.dtype, v.shape) for k, v in feeds.items()}
    model = make_model([node], ins, outputs or ["y"], opset=opset)
    return LoadedModule(build(model, BuildOptions(opt_level=0))).run(feeds)


def _x(*shape: int) -> np.ndarray:
    return np.random.default_rng(0).standard_normal(shape).astype(F)


CASES = [
    ("MaxUnpool negative", helper.make_node("MaxUnpool", ["x", "i"], ["y"], kernel_shape=[2, 2],
                                            strides=[2, 2]),
     {"x": _x(1, 1, 2, 2), "i": np.array([0, 3, -1, 10], I64).reshape(1, 1, 2, 2)}, 11,
     "index -1 is outside"),
    ("MaxUnpool past the end", helper.make_node("MaxUnpool", ["x", "i"], ["y"],
                                                kernel_shape=[2, 2], strides=[2, 2]),
     {"x": _x(1, 1, 2, 2), "i": np.array([0, 3, 16, 10], I64).reshape(1, 1, 2, 2)}, 11,
     "index 16 is outside"),
    ("RoiAlign batch", helper.make_node("RoiAlign", ["x", "r", "b"], ["y"]),
     {"x": _x(2, 1, 4, 4), "r": np.array([[0, 0, 2, 2]], F), "b": np.array([2], I64)}, 16,
     "out of range for the batch"),
    ("RoiAlign huge box", helper.make_node("RoiAlign", ["x", "r", "b"], ["y"]),
     {"x": _x(1, 1, 4, 4), "r": np.array([[0, 0, 3e9, 3e9]], F), "b": np.array([0], I64)},
     16, "sampling grid"),
    ("RoiAlign NaN box", helper.make_node("RoiAlign", ["x", "r", "b"], ["y"]),
     {"x": _x(1, 1, 4, 4), "r": np.array([[0, 0, np.nan, 2]], F), "b": np.array([0], I64)},
     16, "not finite"),
    ("RotaryEmbedding position", helper.make_node("RotaryEmbedding", ["x", "c", "s", "p"],
                                                  ["y"]),
     {"x": _x(1, 1, 2, 4), "c": _x(3, 2), "s": _x(3, 2), "p": np.array([[0, 3]], I64)}, 23,
     "out of range for the position cache"),
    ("NLL target", helper.make_node("NegativeLogLikelihoodLoss", ["x", "t"], ["y"]),
     {"x": _x(2, 3), "t": np.array([1, 3], I64)}, 13, "out of range for the class axis"),
    ("TensorScatter write index", helper.make_node("TensorScatter", ["p", "u", "w"], ["y"]),
     {"p": _x(1, 4, 2), "u": _x(1, 2, 2), "w": np.array([3], I64)}, 24, "do not fit"),
    ("ReverseSequence length", helper.make_node("ReverseSequence", ["x", "n"], ["y"]),
     {"x": _x(3, 2), "n": np.array([1, 4], I64)}, 10, "must lie in"),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c[0])
def test_runtime_indices_are_bounded(case) -> None:
    _, node, feeds, opset, message = case
    with pytest.raises(KernelError, match=message) as err:
        _run(node, feeds, opset)
    assert err.value.op == node.op_type


def test_gather_elements_indices_shorter_than_the_data() -> None:
    """ONNX reads the corner the indices cover (numpy's take_along_axis would broadcast)."""
    node = helper.make_node("GatherElements", ["x", "i"], ["y"], axis=1)
    feeds = {"x": _x(3, 4), "i": np.array([[3, 0], [1, 1]], I64)}
    model = make_model([node], {k: (v.dtype, v.shape) for k, v in feeds.items()}, ["y"],
                       opset=13)
    check_against_ort(model, feeds)
