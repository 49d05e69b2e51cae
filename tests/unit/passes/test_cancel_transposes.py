import numpy as np
import pytest

from pydla.passes.cancel_transposes import CancelTransposes, keeps_order
from tests.unit.passes.helpers import apply, assert_matches_ort, imported, model, node, ops


def shape(*dims: int) -> np.ndarray:
    return np.array(dims, np.int64)


def test_inverse_transposes_disappear():
    m = model([node("Transpose", ["x"], "a", perm=[0, 2, 3, 1]),
               node("Transpose", ["a"], "b", perm=[0, 3, 1, 2]), node("Relu", ["b"], "y")],
              {"x": [1, 3, 4, 5]}, ["y"])
    g = imported(m)
    assert apply(g, CancelTransposes())
    assert ops(g) == ["Relu"]
    assert g.nodes[0].inputs[0].name == "x"
    assert_matches_ort(m, g)


def test_transposes_compose_into_one():
    m = model([node("Transpose", ["x"], "a", perm=[1, 0, 2]),
               node("Transpose", ["a"], "y", perm=[0, 2, 1])], {"x": [2, 3, 4]}, ["y"])
    g = imported(m)
    assert apply(g, CancelTransposes())
    assert ops(g) == ["Transpose"]
    assert g.nodes[0].attrs["perm"] == [1, 2, 0]
    assert g.nodes[0].inputs[0].name == "x" and g.outputs[0].name == "y"
    assert sorted(g.nodes[0].fused_from) == ["Transpose_a", "Transpose_y"]
    assert_matches_ort(m, g)


def test_reshape_chain_becomes_one_reshape():
    m = model([node("Reshape", ["x", "s1"], "a"), node("Flatten", ["a"], "b", axis=2),
               node("Unsqueeze", ["b", "ax"], "y")], {"x": [2, 3, 4, 5]}, ["y"],
              {"s1": shape(6, 4, 5, 1), "ax": shape(0)})
    g = imported(m)
    assert apply(g, CancelTransposes())
    assert ops(g) == ["Reshape"]
    assert g.nodes[0].attrs == {"shape": [1, 24, 5]}
    assert_matches_ort(m, g)


def test_reshape_round_trip_disappears():
    m = model([node("Reshape", ["x", "s1"], "a"), node("Reshape", ["a", "s2"], "b"),
               node("Sigmoid", ["b"], "y")], {"x": [2, 3, 4]}, ["y"],
              {"s1": shape(6, 4), "s2": shape(2, 3, 4)})
    g = imported(m)
    assert apply(g, CancelTransposes())
    assert ops(g) == ["Sigmoid"]
    assert_matches_ort(m, g)


def test_reshape_transpose_pair_that_restores_disappears():
    # [2, 3] → [2, 1, 3] → (size-1 axis moved) [2, 3, 1] → [2, 3]: the input, unchanged.
    m = model([node("Unsqueeze", ["x", "ax"], "a"), node("Transpose", ["a"], "b", perm=[0, 2, 1]),
               node("Squeeze", ["b", "ax2"], "c"), node("Relu", ["c"], "y")],
              {"x": [2, 3]}, ["y"], {"ax": shape(1), "ax2": shape(2)})
    g = imported(m)
    assert apply(g, CancelTransposes())
    assert ops(g) == ["Relu"]
    assert_matches_ort(m, g)


def test_inner_with_another_reader_is_kept():
    m = model([node("Transpose", ["x"], "a", perm=[1, 0]),
               node("Transpose", ["a"], "b", perm=[1, 0]), node("Relu", ["b"], "y"),
               node("Neg", ["a"], "z")], {"x": [3, 4]}, ["y", "z"])
    g = imported(m)
    assert apply(g, CancelTransposes())
    assert ops(g) == ["Transpose", "Relu", "Neg"]
    assert g.nodes[1].inputs[0].name == "x"
    assert_matches_ort(m, g)


def test_graph_output_keeps_one_layer():
    # Input and output are distinct tensors of the loadable: one copy must remain.
    m = model([node("Transpose", ["x"], "a", perm=[1, 0]),
               node("Transpose", ["a"], "y", perm=[1, 0])], {"x": [3, 4]}, ["y"])
    g = imported(m)
    assert apply(g, CancelTransposes())
    assert len(g.nodes) == 1 and g.outputs[0].name == "y"
    assert_matches_ort(m, g)


@pytest.mark.parametrize("perm,dims,expected", [
    ([0, 2, 1], (2, 1, 3), True), ([1, 0], (1, 5), True), ([1, 0], (2, 5), False),
    ([0, 2, 3, 1], (1, 4, 1, 1), True), ([2, 1, 0], (3, 1, 2), False)])
def test_keeps_order(perm, dims, expected):
    assert keeps_order(perm, dims) is expected


def test_real_transpose_is_left_alone():
    m = model([node("Transpose", ["x"], "a", perm=[0, 2, 1]), node("Relu", ["a"], "y")],
              {"x": [2, 3, 4]}, ["y"])
    g = imported(m)
    assert not apply(g, CancelTransposes())
    assert ops(g) == ["Transpose", "Relu"]


def test_size_one_transpose_becomes_reshape():
    m = model([node("Transpose", ["x"], "a", perm=[1, 0, 2]), node("Relu", ["a"], "y")],
              {"x": [1, 3, 4]}, ["y"])
    g = imported(m)
    assert apply(g, CancelTransposes())
    assert ops(g) == ["Reshape", "Relu"]
    assert g.nodes[0].attrs == {"shape": [3, 1, 4]}
    assert_matches_ort(m, g)
