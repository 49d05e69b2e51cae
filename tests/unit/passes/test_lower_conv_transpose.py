"""lower_conv_transpose: a ConvTranspose whose kernel overlaps its stride becomes a Conv of
s² phases, DepthToSpace and a crop (CPU target), and computes what onnxruntime computes
for the original — decoder upsamplings (k=4 s=2 p=1), kernels not a multiple of the
stride, output_padding past the natural size, stride 1, a bias and a following ReLU.
What it leaves alone stays a ConvTranspose."""

from __future__ import annotations

import numpy as np
import pytest

from pydla.passes import PassContext
from pydla.passes.lower_conv_transpose import LowerConvTranspose
from tests.unit.passes.helpers import F32, apply, assert_matches_ort, imported, model, node, ops

RNG = np.random.default_rng(11)


def deconv(c: int = 6, m: int = 4, k: tuple[int, int] = (4, 4), bias: bool = True,
           size: tuple[int, int] = (7, 9), relu: bool = False, **attrs):  # noqa: ANN003, ANN201
    inits = {"w": (0.3 * RNG.standard_normal((c, m, *k))).astype(F32)}
    inputs = ["x", "w"]
    if bias:
        inits["b"] = RNG.standard_normal(m).astype(F32)
        inputs.append("b")
    nodes = [node("ConvTranspose", inputs, "t" if relu else "y", **attrs)]
    if relu:
        nodes.append(node("Relu", ["t"], "y"))
    return model(nodes, {"x": [2, c, *size]}, ["y"], inits)


@pytest.mark.parametrize("k,attrs", [
    ((4, 4), {"strides": [2, 2], "pads": [1, 1, 1, 1]}),           # the decoder's ×2
    ((3, 3), {"strides": [2, 2], "pads": [1, 1, 1, 1], "output_padding": [1, 1]}),
    ((5, 3), {"strides": [2, 2], "pads": [2, 0, 1, 1]}),           # k not a multiple of s
    ((3, 3), {"strides": [1, 1], "pads": [1, 1, 1, 1]}),           # stride 1: a flipped Conv
    ((4, 4), {"strides": [3, 3], "output_padding": [2, 1]}),       # past the natural size
])
def test_lowered_layers_match_onnxruntime(k, attrs):  # noqa: ANN001
    m = deconv(k=k, **attrs)
    g = imported(m)
    ctx = PassContext()
    assert apply(g, LowerConvTranspose(), ctx=ctx)
    assert "ConvTranspose" not in ops(g) and ops(g)[0] == "Conv"
    assert g.nodes[-1].outputs[0].name == "y"
    assert any("lower_conv_transpose" in line for line in ctx.log)
    assert_matches_ort(m, g)


def test_without_bias_and_with_a_relu_after():
    m = deconv(bias=False, relu=True, strides=[2, 2], pads=[1, 1, 1, 1])
    g = imported(m)
    assert apply(g, LowerConvTranspose())
    assert ops(g) == ["Conv", "DepthToSpace", "Slice", "Relu"]
    assert_matches_ort(m, g)


@pytest.mark.parametrize("k,attrs,target", [
    ((2, 2), {"strides": [2, 2]}, "cpu"),                          # k = s: gemm_scatter's
    ((4, 4), {"strides": [2, 2], "pads": [1, 1, 1, 1], "group": 2}, "cpu"),
    ((3, 3), {"strides": [2, 2], "dilations": [2, 2]}, "cpu"),
    ((4, 4), {"strides": [2, 1], "pads": [1, 1, 1, 1]}, "cpu"),   # unequal strides
    ((4, 4), {"strides": [2, 2], "pads": [1, 1, 1, 1]}, "cuda"),   # other targets' own
])
def test_left_alone(k, attrs, target):  # noqa: ANN001
    m = deconv(k=k, **attrs)
    g = imported(m)
    ctx = PassContext()
    ctx.target = target
    assert not apply(g, LowerConvTranspose(), ctx=ctx)
    assert ops(g) == ["ConvTranspose"]
