"""3-D convolutions of depth 1 on the 2-D fast tactics (pydla.backends.cpu.conv_as_2d):
a Conv on [N, C, 1, H, W] with a [M, C/g, 1, kh, kw] kernel and no depth pads runs as the
2-D one, and matches onnxruntime — strides, dilations, pads, groups, a bias, fused
epilogues (ReLU and a residual Add, a per-channel scale of rank 4). A layer with real
depth keeps the 3-D reference kernel."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from pydla.backends.base import LayerSpec, TensorSpec
from pydla.backends.cpu import conv_as_2d
from pydla.backends.cpu.registry import KERNELS, REFERENCE, candidate_tactics
from pydla.backends.cpu.steps import prebind
from pydla.builder import BuildOptions, build
from pydla.dtypes import DType
from pydla.engine import LoadedModule
from pydla.loadable import read_loadable
from tests.oracle import assert_close, make_model, run_ort

CASES = {  # (N, C, H, W, M, k, stride, dilation, pads (h0, w0, h1, w1), group)
    "rivagan_11x11": (1, 4, 24, 20, 8, 11, 1, 1, (5, 5, 5, 5), 1),
    "strided": (2, 3, 17, 15, 8, 3, 2, 1, (1, 0, 1, 1), 1),
    "dilated_grouped": (1, 8, 16, 16, 8, 3, 1, 2, (2, 2, 2, 2), 4),
}


def _geometry(case: str):  # noqa: ANN202
    n, c, h, w_, m, k, s, d, (h0, w0, h1, w1), g = CASES[case]
    attrs = {"strides": [1, s, s], "dilations": [1, d, d], "pads": [0, h0, w0, 0, h1, w1],
             "group": g}
    oh = (h + h0 + h1 - (k - 1) * d - 1) // s + 1
    ow = (w_ + w0 + w1 - (k - 1) * d - 1) // s + 1
    return (n, c, 1, h, w_), (m, c // g, 1, k, k), (n, m, 1, oh, ow), attrs


def _model(case: str, epilogue: str | None):  # noqa: ANN202
    xs, ws, ys, attrs = _geometry(case)
    rng = np.random.default_rng(len(case))
    w = rng.standard_normal(ws).astype(np.float32) * 0.2
    b = rng.standard_normal(ws[0]).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], **attrs)]
    out, inits = "c", {"w": w, "b": b}
    if epilogue == "Relu":  # runs inside the conv kernels
        nodes += [helper.make_node("Relu", ["c"], ["r"]),
                  helper.make_node("Add", ["r", "c"], ["y"])]
        out = "y"
    elif epilogue == "scale":  # a per-channel (M, 1, 1, 1) operand: rank 4 against rank 5
        inits["s"] = rng.standard_normal((ws[0], 1, 1, 1)).astype(np.float32)
        nodes += [helper.make_node("Mul", ["c", "s"], ["m"]),
                  helper.make_node("Tanh", ["m"], ["y"])]
        out = "y"
    model = make_model(nodes, {"x": (np.float32, list(xs))}, [out], inits)
    return model, {"x": rng.standard_normal(xs).astype(np.float32)}


@pytest.mark.parametrize("epilogue", [None, "Relu", "scale"], ids=["plain", "relu", "scale"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_the_built_layer_matches_onnxruntime(case, epilogue):
    model, feeds = _model(case, epilogue)
    want = run_ort(model, feeds)
    data = build(model, BuildOptions(autotune=False))
    layer = next(lay for lay in read_loadable(data).layers if lay.op == "Conv")
    assert layer.tactic != REFERENCE, "a 2-D tactic takes the flat 3-D layer"
    assert_close(LoadedModule(data).run(feeds), want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_applicable_tactic_matches_the_reference(case):
    xs, ws, ys, attrs = _geometry(case)
    rng = np.random.default_rng(7)
    x = rng.standard_normal(xs).astype(np.float32)
    w = rng.standard_normal(ws).astype(np.float32)
    b = rng.standard_normal(ws[0]).astype(np.float32)
    w.flags.writeable = b.flags.writeable = False  # constants, as the executor binds them
    f = DType.FLOAT32
    spec = LayerSpec("c", "Conv", attrs,
                     (TensorSpec(xs, f), TensorSpec(ws, f), TensorSpec(b.shape, f)),
                     (TensorSpec(ys, f),))
    want = np.empty(ys, np.float32)
    KERNELS["Conv"](spec)([x, w, b], [want])
    tactics = candidate_tactics(spec)
    assert tactics, "no fast tactic takes the flat 3-D layer"
    for t in tactics:
        got = np.full(ys, np.nan, np.float32)
        run = t.bind(LayerSpec(spec.name, spec.op, spec.attrs, spec.inputs, spec.outputs,
                               t.name))
        prebind(run, [x, w, b], [got])()  # the executor's path
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, err_msg=t.name)


def test_a_layer_with_depth_is_not_flattened():
    f = DType.FLOAT32
    attrs = {"strides": [1, 1, 1], "pads": [0, 1, 1, 0, 1, 1]}
    deep = LayerSpec("c", "Conv", attrs, (TensorSpec((1, 2, 3, 8, 8), f),
                                          TensorSpec((4, 2, 1, 3, 3), f)),
                     (TensorSpec((1, 4, 3, 8, 8), f),))
    padded = LayerSpec("c", "Conv", {**attrs, "pads": [1, 1, 1, 0, 1, 1]},
                       (TensorSpec((1, 2, 1, 8, 8), f), TensorSpec((4, 2, 1, 3, 3), f)),
                       (TensorSpec((1, 4, 2, 8, 8), f),))
    assert not conv_as_2d.applies_to(deep) and not conv_as_2d.applies_to(padded)
    assert candidate_tactics(deep) == [] and candidate_tactics(padded) == []
    flat = conv_as_2d.as_2d(LayerSpec(
        "c", "Conv", {"strides": [3, 2, 1], "dilations": [1, 2, 1], "kernel_shape": [1, 3, 3],
                      "pads": [0, 1, 2, 0, 3, 4]},
        (TensorSpec((1, 2, 1, 8, 8), f), TensorSpec((4, 2, 1, 3, 3), f), TensorSpec((4,), f)),
        (TensorSpec((1, 4, 1, 5, 11), f),)))
    assert flat.attrs["strides"] == [2, 1] and flat.attrs["dilations"] == [2, 1]
    assert flat.attrs["kernel_shape"] == [3, 3] and flat.attrs["pads"] == [1, 2, 3, 4]
    assert [t.shape for t in flat.inputs] == [(1, 2, 8, 8), (4, 2, 3, 3), (4,)]
    assert flat.outputs[0].shape == (1, 4, 5, 11)
