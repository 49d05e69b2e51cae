"""--adjust: each rewrite gives the model's results (onnxruntime on both models) and makes
the layer DLA-capable; --verbose-style notes list every rewrite."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from pydla.dla import check_model
from pydla.dla.adjust import adjust_for_dla
from tests.models.families import FAMILIES

ort = pytest.importorskip("onnxruntime")


def _run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def _one(op: str, opset: int = 17, axes_input: bool = False, **attrs) -> onnx.ModelProto:  # noqa: ANN003
    out = [2, 8, 5, 7]
    if op == "ReduceMean":
        out = [2, 8, 1, 1] if attrs.get("keepdims", 1) else [2, 8]
    inits, inputs = [], ["x"]
    if axes_input:
        inits.append(numpy_helper.from_array(np.array([2, 3], np.int64), "axes"))
        inputs.append("axes")
    node = helper.make_node(op, inputs, ["y"], name="layer", **attrs)
    graph = helper.make_graph([node], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8, 5, 7])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, out)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


CASES = [
    (_one("HardSwish"), "HardSwish -> Mul, Add, Clip, Mul"),
    (_one("HardSigmoid", alpha=0.25, beta=0.4), "HardSigmoid -> Mul, Add, Clip"),
    (_one("ReduceMean", axes=[2, 3], keepdims=1), "ReduceMean over H, W -> GlobalAveragePool"),
    (_one("ReduceMean", opset=18, axes_input=True, keepdims=1),
     "ReduceMean over H, W -> GlobalAveragePool"),
]


@pytest.mark.parametrize("model, line", CASES)
def test_rewrite_keeps_results_and_runs_on_dla(model, line):
    x = np.random.default_rng(3).uniform(-5, 5, (2, 8, 5, 7)).astype(np.float32)
    assert not check_model(model).layers[0].supported
    adjusted, log = adjust_for_dla(model)
    assert log == [f"layer: {line}"]
    onnx.checker.check_model(adjusted)
    np.testing.assert_allclose(_run(adjusted, {"x": x})[0], _run(model, {"x": x})[0],
                               rtol=1e-6, atol=1e-6)
    report = check_model(model, adjust=True)
    assert report.supported_layers == len(report.layers)
    assert report.notes == [f"adjusted: layer: {line}"]


def test_reduce_mean_without_kept_dims_is_left_alone():
    model = _one("ReduceMean", axes=[2, 3], keepdims=0)
    assert adjust_for_dla(model)[1] == []


def test_dbnet_runs_whole_on_dla_after_adjusting():
    model, feeds = FAMILIES["dbnet"]()
    assert check_model(model).supported_layers < len(check_model(model).layers)
    adjusted, log = adjust_for_dla(model)
    assert len(log) == 3
    report = check_model(adjusted)
    assert report.supported_layers == len(report.layers) and len(report.segments) == 1
    np.testing.assert_allclose(_run(adjusted, feeds)[0], _run(model, feeds)[0], rtol=1e-5,
                               atol=1e-6)
