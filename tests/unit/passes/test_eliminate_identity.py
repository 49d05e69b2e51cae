import numpy as np
import pytest

from pydla.dtypes import DType
from pydla.ir import Graph, Node, Value
from pydla.passes.eliminate_identity import EliminateIdentity
from tests.unit.passes.helpers import (
    apply,
    assert_matches_ort,
    imported,
    model,
    node,
    ops,
    run_graph,
)


def i64(*v: int) -> np.ndarray:
    return np.array(v, np.int64)


# Each: the no-op node (reading x[2, 3, 4], writing "n") and its initializers.
NOOPS = {
    "Reshape": (node("Reshape", ["x", "s"], "n"), {"s": i64(2, 3, 4)}),
    "Transpose": (node("Transpose", ["x"], "n", perm=[0, 1, 2]), {}),
    "Pad": (node("Pad", ["x", "p"], "n"), {"p": i64(0, 0, 0, 0, 0, 0)}),
    "Slice": (node("Slice", ["x", "st", "en"], "n"), {"st": i64(0), "en": i64(99)}),
    "Concat": (node("Concat", ["x"], "n", axis=1), {}),
    "Expand": (node("Expand", ["x", "s"], "n"), {"s": i64(1, 3, 1)}),
    "Split": (node("Split", ["x"], "n", axis=1, num_outputs=1), {}),
}


@pytest.mark.parametrize("op", sorted(NOOPS))
def test_noop_layers_are_removed(op):
    noop, inits = NOOPS[op]
    m = model([node("Relu", ["x"], "r"), noop, node("Add", ["n", "r"], "y")],
              {"x": [2, 3, 4]}, ["y"], inits, opset=18)
    g = imported(m)
    assert op in ops(g)
    assert apply(g, EliminateIdentity())
    assert ops(g) == ["Relu", "Add"]
    assert g.nodes[1].inputs[0].name == "x"
    assert_matches_ort(m, g)


def test_reversing_slice_is_kept():
    m = model([node("Slice", ["x", "st", "en", "ax", "sp"], "y")], {"x": [2, 3]}, ["y"],
              {"st": i64(-1), "en": i64(-99), "ax": i64(1), "sp": i64(-1)})
    g = imported(m)
    assert not apply(g, EliminateIdentity())
    assert ops(g) == ["Slice"]


def test_shape_changing_reshape_is_kept():
    m = model([node("Reshape", ["x", "s"], "y")], {"x": [2, 3]}, ["y"], {"s": i64(3, 2)})
    g = imported(m)
    assert not apply(g, EliminateIdentity())


def ir_chain(op: str) -> tuple[Graph, Value]:
    """x → op → Relu, built directly (the importer already drops these when it can)."""
    g = Graph()
    x = Value("x", (2, 3), DType.FLOAT32)
    mid = Value("mid", (2, 3), DType.FLOAT32)
    y = Value("y", (2, 3), DType.FLOAT32)
    g.inputs = [x]
    g.nodes = [Node(op, op.lower(), [x], [mid]), Node("Relu", "relu", [mid], [y])]
    g.outputs = [y]
    return g, x


@pytest.mark.parametrize("op", ["Identity", "Dropout", "Cast"])
def test_identity_dropout_and_same_type_cast_are_removed(op):
    g, x = ir_chain(op)
    feeds = {"x": np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)}
    assert apply(g, EliminateIdentity())
    assert ops(g) == ["Relu"] and g.nodes[0].inputs[0] is x
    np.testing.assert_array_equal(run_graph(g, feeds)[0], np.maximum(feeds["x"], 0))


def test_identity_between_input_and_output_stays():
    g = Graph()
    x = Value("x", (2,), DType.FLOAT32)
    y = Value("y", (2,), DType.FLOAT32)
    g.inputs, g.nodes, g.outputs = [x], [Node("Identity", "id", [x], [y])], [y]
    assert not apply(g, EliminateIdentity())
    assert ops(g) == ["Identity"] and g.outputs[0].name == "y"
