import numpy as np
import pytest

from pydla.dtypes import DType
from pydla.ir import Graph, Node, Value, verify
from pydla.ir.verifier import IRVerificationError


def small_graph() -> Graph:
    g = Graph()
    x = Value("x", (2, 3), DType.FLOAT32)
    w = Value("w", (3,), DType.FLOAT32, const=np.ones(3, np.float32))
    a = Value("a", (2, 3), DType.FLOAT32)
    b = Value("b", (2, 3), DType.FLOAT32)
    dead = Value("dead", (2, 3), DType.FLOAT32)
    g.inputs = [x]
    g.nodes = [Node("Add", "add", [x, w], [a]), Node("Relu", "relu", [a], [b]),
               Node("Relu", "unused", [x], [dead])]
    g.outputs = [b]
    return g


def test_verify_and_remove_dead():
    g = small_graph()
    verify(g)
    assert g.remove_dead()
    assert [n.name for n in g.nodes] == ["add", "relu"]
    assert not g.remove_dead()
    assert [c.name for c in g.constants()] == ["w"]


def test_verifier_catches_use_before_definition():
    g = small_graph()
    g.nodes.reverse()
    with pytest.raises(IRVerificationError, match="before it is defined"):
        verify(g)


def test_verifier_catches_duplicate_names_and_missing_outputs():
    g = small_graph()
    g.nodes[1].name = "add"
    with pytest.raises(IRVerificationError, match="duplicate"):
        verify(g)
    g = small_graph()
    g.outputs.append(Value("ghost", (1,), DType.FLOAT32))
    with pytest.raises(IRVerificationError, match="never produced"):
        verify(g)


def test_unique_names():
    g = Graph()
    assert g.unique_name("t") == "t"
    assert g.unique_name("t") != "t"
    assert g.unique_node_name("t") == "t"  # layers and tensors have separate namespaces
