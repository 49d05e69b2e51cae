import numpy as np

from pydla.passes.fuse_pointwise import FusePointwise
from tests.unit.passes.helpers import F32, apply, assert_matches_ort, imported, model, node, ops


def steps(n) -> list[str]:  # noqa: ANN001
    return [s["op"] for s in n.attrs["program"]]


def test_chain_becomes_one_layer():
    m = model([node("Add", ["x", "c"], "a"), node("Relu", ["a"], "b"),
               node("Mul", ["b", "x"], "d"), node("Sigmoid", ["d"], "y")],
              {"x": [2, 3, 4]}, ["y"], {"c": np.linspace(-1, 1, 4, dtype=F32)})
    g = imported(m)
    assert apply(g, FusePointwise())
    assert ops(g) == ["Pointwise"]
    fused = g.nodes[0]
    assert steps(fused) == ["Add", "Relu", "Mul", "Sigmoid"]
    assert [v.name for v in fused.inputs if not v.is_const] == ["x"]
    assert sorted(fused.fused_from) == sorted(n.name for n in m.graph.node)
    assert g.outputs[0].name == "y"
    assert_matches_ort(m, g)


def test_diamond_fuses_without_recomputing():
    m = model([node("Exp", ["x"], "a"), node("Relu", ["a"], "b"), node("Neg", ["a"], "c"),
               node("Add", ["b", "c"], "y")], {"x": [5]}, ["y"])
    g = imported(m)
    assert apply(g, FusePointwise())
    assert ops(g) == ["Pointwise"]
    assert sorted(steps(g.nodes[0])) == ["Add", "Exp", "Neg", "Relu"]
    assert_matches_ort(m, g)


def test_intermediate_read_outside_the_chain_is_not_duplicated():
    m = model([node("Exp", ["x"], "a"), node("Relu", ["a"], "b"), node("Neg", ["b"], "y"),
               node("Softmax", ["a"], "z", axis=-1)], {"x": [2, 5]}, ["y", "z"])
    g = imported(m)
    assert apply(g, FusePointwise())
    assert ops(g) == ["Exp", "Pointwise", "Softmax"]
    assert steps(g.nodes[1]) == ["Relu", "Neg"]
    assert_matches_ort(m, g)


def test_non_pointwise_layers_break_chains():
    m = model([node("Relu", ["x"], "a"), node("Softmax", ["a"], "b", axis=-1),
               node("Neg", ["b"], "y")], {"x": [2, 6]}, ["y"])
    g = imported(m)
    assert not apply(g, FusePointwise())
    assert ops(g) == ["Relu", "Softmax", "Neg"]


def test_graph_output_in_the_middle_stays():
    m = model([node("Relu", ["x"], "a"), node("Neg", ["a"], "y")], {"x": [4]}, ["y", "a"])
    g = imported(m)
    assert not apply(g, FusePointwise())
    assert ops(g) == ["Relu", "Neg"]
