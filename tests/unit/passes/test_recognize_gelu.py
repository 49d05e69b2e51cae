import math

import numpy as np
import pytest

from pydla.passes import PassContext
from pydla.passes.recognize_gelu import RecognizeGelu
from tests.unit.passes.helpers import F32, apply, assert_matches_ort, imported, model, node, ops


def c(v: float) -> np.ndarray:
    return np.array(v, F32)


def erf_gelu(order: str = "xp_half", scale: str = "div", half: str = "mul",
             extra_outputs: tuple[str, ...] = (), root: float = math.sqrt(2), one: float = 1.0,
             plus: str = "Add"):
    """0.5·x·(1 + erf(x/√2)) on x[2, 3, 8], grouped as ``order``."""
    inits = {"one": c(one), "half": c(0.5), "two": c(2.0)}
    if scale == "div":
        inits["root"] = c(root)
        nodes = [node("Div", ["x", "root"], "u")]
    else:
        inits["inv_root"] = c(1 / root)
        nodes = [node("Mul", ["inv_root", "x"], "u")]
    nodes += [node("Erf", ["u"], "e"), node(plus, ["one", "e"], "p")]

    def halve(v: str, out: str):
        return node("Div", [v, "two"], out) if half == "div" else node("Mul", [v, "half"], out)

    if order == "xp_half":  # (x·p)·½ — what PyTorch exports
        nodes += [node("Mul", ["x", "p"], "xp"), halve("xp", "y")]
    elif order == "x_phi":  # x·(p·½) — x·Φ(x)
        nodes += [halve("p", "phi"), node("Mul", ["phi", "x"], "y")]
    else:  # (x·½)·p
        nodes += [halve("x", "hx"), node("Mul", ["p", "hx"], "y")]
    return model(nodes, {"x": [2, 3, 8]}, ["y", *extra_outputs], inits)


def tanh_gelu(cube: str = "pow", swap: bool = False):
    inits = {"three": c(3.0), "k": c(0.044715), "s": c(math.sqrt(2 / math.pi)), "one": c(1.0),
             "half": c(0.5)}
    if cube == "pow":
        nodes = [node("Pow", ["x", "three"], "x3")]
    else:
        nodes = [node("Mul", ["x", "x"], "x2"), node("Mul", ["x2", "x"] if swap else ["x", "x2"],
                                                    "x3")]
    nodes += [node("Mul", ["k", "x3"], "kx3"),
              node("Add", ["kx3", "x"] if swap else ["x", "kx3"], "inner"),
              node("Mul", ["inner", "s"], "arg"), node("Tanh", ["arg"], "t"),
              node("Add", ["t", "one"], "p"), node("Mul", ["half", "x"], "hx"),
              node("Mul", ["hx", "p"], "y")]
    return model(nodes, {"x": [4, 16]}, ["y"], inits)


@pytest.mark.parametrize("order", ["xp_half", "x_phi", "half_x_p"])
@pytest.mark.parametrize("scale,half", [("div", "mul"), ("mul", "div")])
def test_erf_forms_become_gelu(order, scale, half):
    m = erf_gelu(order, scale, half)
    g = imported(m)
    assert apply(g, RecognizeGelu())
    assert ops(g) == ["Gelu"]
    assert g.nodes[0].attrs == {"approximate": "none"}
    assert g.nodes[0].inputs[0].name == "x" and g.outputs[0].name == "y"
    assert len(g.nodes[0].fused_from) == len(m.graph.node)
    assert_matches_ort(m, g, rtol=1e-5, atol=1e-6)


def test_two_input_sum_counts_as_add():
    # ONNX's own function body of Gelu writes 1 + erf(…) as Sum.
    m = erf_gelu("half_x_p", plus="Sum")
    g = imported(m)
    assert apply(g, RecognizeGelu())
    assert ops(g) == ["Gelu"]
    assert_matches_ort(m, g, rtol=1e-5, atol=1e-6)


def test_rounded_constants_still_match():
    m = erf_gelu(root=1.41421)
    g = imported(m)
    assert apply(g, RecognizeGelu())
    assert ops(g) == ["Gelu"]


@pytest.mark.parametrize("cube,swap", [("pow", False), ("mul", False), ("mul", True)])
def test_tanh_form_becomes_approximate_gelu(cube, swap):
    m = tanh_gelu(cube, swap)
    g = imported(m)
    assert apply(g, RecognizeGelu())
    assert ops(g) == ["Gelu"]
    assert g.nodes[0].attrs == {"approximate": "tanh"}
    assert_matches_ort(m, g, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("extra", ["e", "p", "u"])
def test_refuses_when_an_intermediate_has_another_reader(extra):
    m = erf_gelu(extra_outputs=(extra,))
    g = imported(m)
    ctx = PassContext()
    before = ops(g)
    assert not apply(g, RecognizeGelu(), ctx=ctx)
    assert ops(g) == before
    assert any("kept" in line and repr(extra) in line for line in ctx.log)
    assert_matches_ort(m, g)


@pytest.mark.parametrize("kw", [{"root": 2.0}, {"one": 2.0}])
def test_ignores_other_constants(kw):
    m = erf_gelu(**kw)
    g = imported(m)
    assert not apply(g, RecognizeGelu())
    assert "Gelu" not in ops(g)
