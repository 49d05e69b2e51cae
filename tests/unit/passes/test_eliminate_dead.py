import numpy as np

from pydla.dtypes import DType
from pydla.ir import Graph, Node, Value
from pydla.passes import PassContext
from pydla.passes.eliminate_dead import EliminateDead
from tests.unit.passes.helpers import apply, ops, run_graph


def graph_with_dead_branch() -> Graph:
    """x → Relu → Tanh (the output), plus Sigmoid → Neg that nothing reads."""
    g = Graph()
    t = [Value(n, (2, 3), DType.FLOAT32) for n in ("x", "a", "dead", "dead2", "y")]
    x, a, dead, dead2, y = t
    g.inputs = [x]
    g.nodes = [Node("Relu", "relu", [x], [a]), Node("Sigmoid", "sigmoid", [x], [dead]),
               Node("Neg", "neg", [dead], [dead2]), Node("Tanh", "tanh", [a], [y])]
    g.outputs = [y]
    return g


def test_unread_layers_are_removed():
    g = graph_with_dead_branch()
    ctx = PassContext()
    assert apply(g, EliminateDead(), ctx=ctx)
    assert ops(g) == ["Relu", "Tanh"]
    assert any("removed 2" in line for line in ctx.log)
    x = np.linspace(-2, 2, 6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_allclose(run_graph(g, {"x": x})[0], np.tanh(np.maximum(x, 0)), rtol=1e-6)


def test_nothing_to_remove():
    g = graph_with_dead_branch()
    g.outputs.append(g.nodes[2].outputs[0])
    assert not apply(g, EliminateDead())
    assert len(g.nodes) == 4
