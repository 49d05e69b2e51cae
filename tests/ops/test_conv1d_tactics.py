"""1-D convolutions on the 2-D fast tactics (pydla.backends.cpu.conv1d): every tactic that
applies to the height-1 view runs the 1-D layer and matches onnxruntime — strides,
dilations, pads, groups, a bias, fused epilogues (ReLU and a residual Add, a sequence mask)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from pydla.backends.base import LayerSpec, TensorSpec
from pydla.backends.cpu.registry import KERNELS, REFERENCE, candidate_tactics
from pydla.backends.cpu.steps import prebind
from pydla.builder import BuildOptions, build
from pydla.dtypes import DType
from pydla.engine import LoadedModule
from pydla.loadable import read_loadable
from tests.oracle import assert_close, make_model, run_ort

CASES = {  # (N, C, L, M, K, stride, dilation, pads, group)
    "dilated_128": (1, 32, 300, 32, 3, 1, 8, (8, 8), 1),
    "strided": (2, 8, 101, 16, 5, 2, 1, (2, 1), 1),
    "grouped": (1, 16, 64, 16, 3, 1, 2, (2, 2), 4),
    "long_filter_one_channel": (1, 1, 2000, 4, 64, 2, 1, (0, 0), 1),
}


def _model(case: str, epilogue: str | None):  # noqa: ANN202
    n, c, length, m, k, s, d, pads, g = CASES[case]
    rng = np.random.default_rng(len(case))
    w = rng.standard_normal((m, c // g, k)).astype(np.float32) * 0.2
    b = rng.standard_normal(m).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], strides=[s], dilations=[d],
                              pads=list(pads), group=g)]
    out, inputs = "c", {"x": (np.float32, [n, c, length])}
    x = rng.standard_normal((n, c, length)).astype(np.float32)
    feeds = {"x": x}
    if epilogue == "Relu":  # runs inside the conv kernels
        nodes += [helper.make_node("Relu", ["c"], ["r"]),
                  helper.make_node("Add", ["r", "c"], ["y"])]
        out = "y"
    elif epilogue == "mask":
        # a sequence mask (N, 1, L) as in piper's TTS: the generic epilogue runs it on the
        # height-1 views, its steps' shapes with the unit axis too
        out_len = (length + sum(pads) - (k - 1) * d - 1) // s + 1
        nodes += [helper.make_node("Mul", ["c", "mask"], ["y"])]
        out = "y"
        inputs["mask"] = (np.float32, [n, 1, out_len])
        feeds["mask"] = (rng.random((n, 1, out_len)) > 0.3).astype(np.float32)
    model = make_model(nodes, inputs, [out], {"w": w, "b": b})
    return model, feeds


@pytest.mark.parametrize("epilogue", [None, "Relu", "mask"], ids=["plain", "relu", "mask"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_the_built_layer_matches_onnxruntime(case, epilogue):
    model, feeds = _model(case, epilogue)
    want = run_ort(model, feeds)
    data = build(model, BuildOptions(autotune=False))
    layer = next(lay for lay in read_loadable(data).layers if lay.op == "Conv")
    assert layer.tactic != REFERENCE, "a 2-D tactic takes the 1-D layer"
    assert_close(LoadedModule(data).run(feeds), want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_applicable_tactic_matches_the_reference(case):
    n, c, length, m, k, s, d, pads, g = CASES[case]
    rng = np.random.default_rng(7)
    x = rng.standard_normal((n, c, length)).astype(np.float32)
    w = rng.standard_normal((m, c // g, k)).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32)
    w.flags.writeable = b.flags.writeable = False  # constants, as the executor binds them
    out_len = (length + sum(pads) - (k - 1) * d - 1) // s + 1
    f = DType.FLOAT32
    spec = LayerSpec("c", "Conv", {"strides": [s], "dilations": [d], "pads": list(pads),
                                   "group": g},
                     (TensorSpec(x.shape, f), TensorSpec(w.shape, f), TensorSpec(b.shape, f)),
                     (TensorSpec((n, m, out_len), f),))
    want = np.empty((n, m, out_len), np.float32)
    KERNELS["Conv"](spec)([x, w, b], [want])
    tactics = candidate_tactics(spec)
    assert tactics, "no fast tactic takes the 1-D layer"
    for t in tactics:
        got = np.full((n, m, out_len), np.nan, np.float32)
        run = t.bind(LayerSpec(spec.name, spec.op, spec.attrs, spec.inputs, spec.outputs,
                               t.name))
        run([x, w, b], [got])
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, err_msg=t.name)
        got[:] = np.nan
        prebind(run, [x, w, b], [got])()  # the executor's path
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, err_msg=t.name)
