import numpy as np
import pytest

from pydla.passes import PassContext
from pydla.passes.recognize_layernorm import RecognizeLayerNorm
from tests.unit.passes.helpers import F32, apply, assert_matches_ort, imported, model, node, ops

RNG = np.random.default_rng(1)
D = 16


def layernorm(square: str = "pow", divide: str = "div", axes: tuple[int, ...] = (-1,),
              gamma: np.ndarray | None = None, beta: np.ndarray | None = None,
              eps_first: bool = False, extra_outputs: tuple[str, ...] = (),
              axes2: tuple[int, ...] | None = None, exponent: float = 2.0):
    """x[2, 6, D] normalised with primitive ops, in the variants exporters write."""
    inits: dict[str, np.ndarray] = {"eps": np.array(1e-5, F32)}
    nodes = [node("ReduceMean", ["x"], "mean", axes=list(axes), keepdims=1),
             node("Sub", ["x", "mean"], "d")]
    if square == "pow":
        inits["two"] = np.array(exponent, F32)
        nodes.append(node("Pow", ["d", "two"], "sq"))
    else:
        nodes.append(node("Mul", ["d", "d"], "sq"))
    nodes += [node("ReduceMean", ["sq"], "var", axes=list(axes2 or axes), keepdims=1),
              node("Add", ["eps", "var"] if eps_first else ["var", "eps"], "ve")]
    if divide == "div":
        nodes += [node("Sqrt", ["ve"], "std"), node("Div", ["d", "std"], "y")]
    elif divide == "reciprocal":
        nodes += [node("Sqrt", ["ve"], "std"), node("Reciprocal", ["std"], "inv"),
                  node("Mul", ["inv", "d"], "y")]
    else:
        inits["mhalf"] = np.array(-0.5, F32)
        nodes += [node("Pow", ["ve", "mhalf"], "inv"), node("Mul", ["d", "inv"], "y")]
    out = "y"
    if gamma is not None:
        inits["gamma"] = gamma
        nodes.append(node("Mul", ["gamma", out], "yg"))
        out = "yg"
    if beta is not None:
        inits["beta"] = beta
        nodes.append(node("Add", [out, "beta"], "yb"))
        out = "yb"
    return model(nodes, {"x": [2, 6, D]}, [out, *extra_outputs], inits)


def gamma_beta(shape=(D,)):
    return ((1 + 0.1 * RNG.standard_normal(shape)).astype(F32),
            (0.1 * RNG.standard_normal(shape)).astype(F32))


@pytest.mark.parametrize("square", ["pow", "mul"])
@pytest.mark.parametrize("divide", ["div", "reciprocal", "rsqrt"])
def test_variants_become_one_layernorm(square, divide):
    gamma, beta = gamma_beta()
    m = layernorm(square, divide, gamma=gamma, beta=beta, eps_first=divide == "div")
    g = imported(m)
    assert apply(g, RecognizeLayerNorm())
    assert ops(g) == ["LayerNormalization"]
    ln = g.nodes[0]
    assert ln.attrs["axis"] == 2 and ln.attrs["epsilon"] == pytest.approx(1e-5)
    np.testing.assert_array_equal(ln.inputs[1].const, gamma)
    np.testing.assert_array_equal(ln.inputs[2].const, beta)
    assert len(ln.fused_from) == len(m.graph.node)
    assert_matches_ort(m, g)


def test_without_affine_gets_unit_scale():
    m = layernorm()
    g = imported(m)
    assert apply(g, RecognizeLayerNorm())
    assert ops(g) == ["LayerNormalization"]
    ln = g.nodes[0]
    np.testing.assert_array_equal(ln.inputs[1].const, np.ones(D, F32))
    assert ln.inputs[2] is None
    assert_matches_ort(m, g)


def test_trailing_axes_and_broadcast_scale():
    gamma, beta = gamma_beta((1, 1, D))
    m = layernorm(axes=(1, 2), gamma=gamma, beta=np.array(0.25, F32))
    g = imported(m)
    assert apply(g, RecognizeLayerNorm())
    ln = g.nodes[0]
    assert ops(g) == ["LayerNormalization"] and ln.attrs["axis"] == 1
    assert ln.inputs[1].shape == (6, D) and ln.inputs[2].shape == (6, D)
    assert_matches_ort(m, g)


def test_scale_along_an_unnormalised_axis_stays_a_mul():
    gamma = (1 + RNG.standard_normal((6, 1))).astype(F32)  # varies over the token axis
    m = layernorm(gamma=gamma)
    g = imported(m)
    assert apply(g, RecognizeLayerNorm())
    assert ops(g) == ["LayerNormalization", "Mul"]
    assert_matches_ort(m, g)


@pytest.mark.parametrize("extra", ["d", "var", "std"])
def test_refuses_when_an_intermediate_has_another_reader(extra):
    m = layernorm(gamma=gamma_beta()[0], extra_outputs=(extra,))
    g = imported(m)
    ctx = PassContext()
    before = ops(g)
    assert not apply(g, RecognizeLayerNorm(), ctx=ctx)
    assert ops(g) == before
    assert any("kept" in line and repr(extra) in line for line in ctx.log)
    assert_matches_ort(m, g)


def test_refuses_non_trailing_axes():
    m = layernorm(axes=(1,))
    g = imported(m)
    ctx = PassContext()
    assert not apply(g, RecognizeLayerNorm(), ctx=ctx)
    assert "LayerNormalization" not in ops(g)
    assert any("trailing axes" in line for line in ctx.log)


@pytest.mark.parametrize("kw", [{"axes2": (1,)}, {"exponent": 3.0}])
def test_ignores_lookalikes(kw):
    m = layernorm(**kw)
    g = imported(m)
    assert not apply(g, RecognizeLayerNorm())
    assert "LayerNormalization" not in ops(g)
    assert_matches_ort(m, g)
