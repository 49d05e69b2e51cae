import numpy as np
import pytest

from pydla.passes import PassContext
from pydla.passes.recognize_softmax import RecognizeSoftmax
from tests.unit.passes.helpers import apply, assert_matches_ort, imported, model, node, ops


def softmax(axes=(-1,), stable: bool = True, log: bool = False, max_axes=None,
            extra_outputs: tuple[str, ...] = ()):
    """Softmax of x[2, 5, 7] from primitives; ReduceSum takes its axes as an input (opset 13+)."""
    inits = {"axes": np.array(axes, np.int64)}
    nodes = []
    src = "x"
    if stable:
        nodes += [node("ReduceMax", ["x"], "mx", axes=list(max_axes or axes), keepdims=1),
                  node("Sub", ["x", "mx"], "shifted")]
        src = "shifted"
    nodes += [node("Exp", [src], "e"), node("ReduceSum", ["e", "axes"], "s", keepdims=1),
              node("Div", ["e", "s"], "y")]
    out = "y"
    if log:
        nodes.append(node("Log", ["y"], "ly"))
        out = "ly"
    return model(nodes, {"x": [2, 5, 7]}, [out, *extra_outputs], inits)


@pytest.mark.parametrize("axes,canonical", [((-1,), [2]), ((1,), [1]), ((1, 2), [1, 2])])
@pytest.mark.parametrize("stable", [True, False])
def test_primitives_become_softmax(axes, canonical, stable):
    m = softmax(axes, stable)
    g = imported(m)
    assert apply(g, RecognizeSoftmax())
    assert ops(g) == ["Softmax"]
    assert g.nodes[0].attrs == {"axes": canonical}
    assert g.nodes[0].inputs[0].name == "x"
    assert_matches_ort(m, g, atol=1e-6)


def test_log_of_primitive_softmax_becomes_log_softmax():
    m = softmax(log=True)
    g = imported(m)
    assert apply(g, RecognizeSoftmax())
    assert ops(g) == ["LogSoftmax"]
    assert g.nodes[0].attrs == {"axes": [2]}
    assert len(g.nodes[0].fused_from) == len(m.graph.node)
    assert_matches_ort(m, g)


def test_log_after_onnx_softmax():
    m = model([node("Softmax", ["x"], "y", axis=1), node("Log", ["y"], "ly")],
              {"x": [3, 6]}, ["ly"])
    g = imported(m)
    assert apply(g, RecognizeSoftmax())
    assert ops(g) == ["LogSoftmax"] and g.nodes[0].attrs == {"axes": [1]}
    assert_matches_ort(m, g)


def test_max_over_other_axes_stays_outside():
    # x − max over axis 1 then a softmax over axis 2: still a softmax, of the difference.
    m = softmax(axes=(2,), max_axes=(1,))
    g = imported(m)
    assert apply(g, RecognizeSoftmax())
    assert ops(g) == ["ReduceMax", "Sub", "Softmax"]
    assert_matches_ort(m, g, atol=1e-6)


@pytest.mark.parametrize("extra", ["e", "s", "mx"])
def test_refuses_when_an_intermediate_has_another_reader(extra):
    m = softmax(extra_outputs=(extra,))
    g = imported(m)
    ctx = PassContext()
    before = ops(g)
    assert not apply(g, RecognizeSoftmax(), ctx=ctx)
    assert ops(g) == before
    assert any("kept" in line and repr(extra) in line for line in ctx.log)
    assert_matches_ort(m, g)


def test_refuses_non_contiguous_axes():
    m = model([node("Exp", ["x"], "e"), node("ReduceSum", ["e", "axes"], "s", keepdims=1),
               node("Div", ["e", "s"], "y")], {"x": [2, 5, 7]}, ["y"],
              {"axes": np.array([0, 2], np.int64)})
    g = imported(m)
    ctx = PassContext()
    assert not apply(g, RecognizeSoftmax(), ctx=ctx)
    assert "Softmax" not in ops(g)
    assert any("contiguous" in line for line in ctx.log)


def test_softmax_read_elsewhere_keeps_its_log():
    m = model([node("Softmax", ["x"], "y", axis=-1), node("Log", ["y"], "ly")],
              {"x": [3, 6]}, ["ly", "y"])
    g = imported(m)
    assert not apply(g, RecognizeSoftmax())
    assert ops(g) == ["Softmax", "Log"]
