import numpy as np
import pytest

from pydla.passes.fuse_pointwise import FuseEpilogue, FusePointwise
from tests.unit.passes.helpers import F32, apply, assert_matches_ort, imported, model, node, ops

RNG = np.random.default_rng(7)
W = (0.3 * RNG.standard_normal((4, 4, 3, 3))).astype(F32)
B = (0.1 * RNG.standard_normal(4)).astype(F32)


def epilogue_ops(n) -> list[str]:  # noqa: ANN001
    return [s["op"] for s in n.attrs["epilogue"]["program"]]


def test_residual_add_and_relu_fuse_into_the_conv():
    m = model([node("Conv", ["x", "w", "b"], "h", pads=[1, 1, 1, 1]),
               node("Add", ["h", "x"], "s"), node("Relu", ["s"], "y")],
              {"x": [1, 4, 5, 5]}, ["y"], {"w": W, "b": B})
    g = imported(m)
    assert apply(g, FusePointwise(), FuseEpilogue())
    assert ops(g) == ["Conv"]
    conv = g.nodes[0]
    assert epilogue_ops(conv) == ["Add", "Relu"]
    assert conv.attrs["epilogue"]["inputs"] == 1 and conv.inputs[-1].name == "x"
    assert sorted(conv.fused_from) == ["Add_s", "Conv_h", "Relu_y"]
    assert conv.outputs[0].name == "y"
    assert_matches_ort(m, g)


def test_residual_between_two_convs_goes_to_the_later_one():
    m = model([node("Conv", ["x", "w"], "h1", pads=[1, 1, 1, 1]),
               node("Conv", ["x", "w2"], "h2", pads=[1, 1, 1, 1]),
               node("Add", ["h1", "h2"], "y")], {"x": [1, 4, 5, 5]}, ["y"],
              {"w": W, "w2": W[::-1].copy()})
    g = imported(m)
    assert apply(g, FusePointwise(), FuseEpilogue())
    assert ops(g) == ["Conv", "Conv"]
    assert "epilogue" not in g.nodes[0].attrs and epilogue_ops(g.nodes[1]) == ["Add"]
    assert_matches_ort(m, g)


@pytest.mark.parametrize("host", ["MatMul", "Gemm"])
def test_bias_and_activation_fuse_into_a_matrix_product(host):
    m = model([node(host, ["x", "w"], "h"), node("Add", ["h", "b"], "a"),
               node("Sigmoid", ["a"], "s"), node("Mul", ["a", "s"], "y")],
              {"x": [3, 8]}, ["y"], {"w": RNG.standard_normal((8, 4)).astype(F32), "b": B})
    g = imported(m)
    assert apply(g, FusePointwise(), FuseEpilogue())
    assert ops(g) == [host]
    assert sorted(epilogue_ops(g.nodes[0])) == ["Add", "Mul", "Sigmoid"]
    assert_matches_ort(m, g)


def test_refuses_when_the_product_has_another_reader():
    m = model([node("Conv", ["x", "w"], "h", pads=[1, 1, 1, 1]), node("Relu", ["h"], "y")],
              {"x": [1, 4, 5, 5]}, ["y", "h"], {"w": W})
    g = imported(m)
    assert not apply(g, FusePointwise(), FuseEpilogue())
    assert ops(g) == ["Conv", "Relu"]


def test_refuses_an_addend_that_grows_the_output():
    m = model([node("Conv", ["x", "w"], "h", pads=[1, 1, 1, 1]), node("Add", ["h", "z"], "y")],
              {"x": [1, 4, 5, 5], "z": [2, 4, 5, 5]}, ["y"], {"w": W})
    g = imported(m)
    assert not apply(g, FuseEpilogue())
    assert ops(g) == ["Conv", "Add"]
    assert_matches_ort(m, g)
