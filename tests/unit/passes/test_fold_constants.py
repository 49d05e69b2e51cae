import numpy as np

from pydla.dtypes import DType
from pydla.ir import Graph, Node, Value
from pydla.passes import PassContext
from pydla.passes.fold_constants import FoldConstants
from tests.unit.passes.helpers import apply, ops, run_graph

F = DType.FLOAT32
A = np.arange(6, dtype=np.float32).reshape(2, 3)
B = np.full((2, 3), 0.5, np.float32)


def graph() -> Graph:
    """y = x · (a + b) · 2: the Add and the Mul of constants fold, the last Mul stays.

    Built directly: the importer already folds constant subgraphs of ONNX models."""
    g = Graph()
    x = Value("x", (2, 3), F)
    a, b = Value("a", (2, 3), F, const=A), Value("b", (2, 3), F, const=B)
    two = Value("two", (), F, const=np.array(2, np.float32))
    s, s2, y = Value("s", (2, 3), F), Value("s2", (2, 3), F), Value("y", (2, 3), F)
    g.inputs = [x]
    g.nodes = [Node("Add", "add", [a, b], [s]), Node("Mul", "scale", [s, two], [s2]),
               Node("Mul", "mul", [x, s2], [y])]
    g.outputs = [y]
    return g


def test_constant_layers_are_evaluated():
    g = graph()
    ctx = PassContext()
    assert apply(g, FoldConstants(), ctx=ctx)
    assert ops(g) == ["Mul"]
    np.testing.assert_array_equal(g.nodes[0].inputs[1].const, (A + B) * 2)
    assert sum("evaluated" in line for line in ctx.log) == 2
    x = np.ones((2, 3), np.float32)
    np.testing.assert_array_equal(run_graph(g, {"x": x})[0], x * (A + B) * 2)


def test_size_limit_keeps_large_results():
    g = graph()
    ctx = PassContext(fold_limit_bytes=16)  # below the 24 bytes of a 2×3 float32
    assert not apply(g, FoldConstants(), ctx=ctx)
    assert ops(g) == ["Add", "Mul", "Mul"]
    assert any("exceed the limit 16" in line for line in ctx.log)


def test_at_the_limit_folds():
    g = graph()
    assert apply(g, FoldConstants(), ctx=PassContext(fold_limit_bytes=24))
    assert ops(g) == ["Mul"]


def test_constant_graph_output_keeps_its_layer():
    # A folded graph output would be a weight; the loadable writes outputs from layers.
    g = Graph()
    a = Value("a", (3,), F, const=np.ones(3, np.float32))
    y = Value("y", (3,), F)
    g.nodes = [Node("Neg", "neg", [a], [y])]
    g.outputs = [y]
    assert not apply(g, FoldConstants())
    assert ops(g) == ["Neg"]
