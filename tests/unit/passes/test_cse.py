import numpy as np

from pydla.passes.cse import EliminateCommonSubexpressions
from tests.unit.passes.helpers import F32, apply, assert_matches_ort, imported, model, node, ops


def test_repeated_layers_run_once():
    m = model([node("Relu", ["x"], "a"), node("Relu", ["x"], "b"),
               node("Sigmoid", ["a"], "c"), node("Sigmoid", ["b"], "d"),
               node("Add", ["c", "d"], "y")], {"x": [2, 3]}, ["y"])
    g = imported(m)
    assert apply(g, EliminateCommonSubexpressions())
    assert ops(g) == ["Relu", "Sigmoid", "Add"]
    add = g.nodes[-1]
    assert add.inputs[0] is add.inputs[1]
    assert_matches_ort(m, g)


def test_identical_constants_are_stored_once():
    c = np.arange(6, dtype=F32).reshape(2, 3)
    m = model([node("Add", ["x", "c1"], "a"), node("Mul", ["a", "c2"], "y")],
              {"x": [2, 3]}, ["y"], {"c1": c, "c2": c.copy()})
    g = imported(m)
    assert apply(g, EliminateCommonSubexpressions())
    assert g.nodes[0].inputs[1] is g.nodes[1].inputs[1]
    assert len(list(g.constants())) == 1
    assert_matches_ort(m, g)


def test_different_attributes_or_inputs_are_kept():
    m = model([node("LeakyRelu", ["x"], "a", alpha=0.1),
               node("LeakyRelu", ["x"], "b", alpha=0.2), node("Relu", ["x"], "c"),
               node("Relu", ["a"], "d"), node("Sum", ["b", "c", "d"], "y")],
              {"x": [2, 3]}, ["y"])
    g = imported(m)
    assert not apply(g, EliminateCommonSubexpressions())
    assert len(g.nodes) == 5


def test_duplicate_graph_outputs_stay_distinct():
    m = model([node("Relu", ["x"], "y1"), node("Relu", ["x"], "y2")], {"x": [3]}, ["y1", "y2"])
    g = imported(m)
    assert not apply(g, EliminateCommonSubexpressions())
    assert [v.name for v in g.outputs] == ["y1", "y2"]
    assert_matches_ort(m, g)
