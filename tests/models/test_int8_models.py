"""Small float models quantized by onnxruntime.quantization itself (quantize_static in QDQ
and QOperator formats, per-channel; quantize_dynamic), built by pydla and compared with
onnxruntime running the same quantized model: cosine ≥ 0.999 and ≥ 99.9 % of outputs within
one quantization step of the output; and the convolutions must run as int8 layers."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from pydla.builder import BuildOptions, build
from pydla.engine.module import LoadedModule
from pydla.tools.layerinfo import layer_info
from tests.oracle import run_ort

quantization = pytest.importorskip("onnxruntime.quantization")
RNG = np.random.default_rng(3)
SHAPE = (1, 3, 16, 16)


def _w(*shape: int) -> np.ndarray:
    fan_in = int(np.prod(shape[1:]))
    return (RNG.standard_normal(shape) / np.sqrt(fan_in)).astype(np.float32)


def _cnn() -> onnx.ModelProto:
    """conv-relu, strided conv-relu, 1x1 conv + residual add, depthwise conv, pooling, fc."""
    inits = {"w1": _w(8, 3, 3, 3), "b1": _w(8) * 0.1, "w2": _w(8, 8, 3, 3), "b2": _w(8) * 0.1,
             "w3": _w(8, 8, 1, 1), "b3": _w(8) * 0.1, "w4": _w(8, 1, 3, 3), "b4": _w(8),
             "wf": _w(10, 8), "bf": _w(10)}
    n = helper.make_node
    nodes = [
        n("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]), n("Relu", ["c1"], ["r1"]),
        n("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1], strides=[2, 2]),
        n("Relu", ["c2"], ["r2"]),
        n("Conv", ["r2", "w3", "b3"], ["c3"]), n("Add", ["c3", "r2"], ["a3"]),
        n("Conv", ["a3", "w4", "b4"], ["c4"], pads=[1, 1, 1, 1], group=8),
        n("Clip", ["c4", "lo", "hi"], ["r4"]),
        n("GlobalAveragePool", ["r4"], ["p"]), n("Flatten", ["p"], ["f"]),
        n("Gemm", ["f", "wf", "bf"], ["y"], transB=1),
    ]
    inits |= {"lo": np.array(0.0, np.float32), "hi": np.array(6.0, np.float32)}
    graph = helper.make_graph(
        nodes, "cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(SHAPE))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])],
        [numpy_helper.from_array(v, k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


def _mlp() -> onnx.ModelProto:
    n = helper.make_node
    inits = {"w1": _w(24, 32).T.copy(), "b1": _w(24), "w2": _w(16, 24).T.copy()}
    nodes = [n("MatMul", ["x", "w1"], ["m1"]), n("Add", ["m1", "b1"], ["a1"]),
             n("Relu", ["a1"], ["r1"]), n("MatMul", ["r1", "w2"], ["y"])]
    graph = helper.make_graph(
        nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 16])],
        [numpy_helper.from_array(v, k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


class _Reader(quantization.CalibrationDataReader):
    def __init__(self, name: str, shape: tuple[int, ...], count: int = 8) -> None:
        self.data = iter([{name: RNG.standard_normal(shape).astype(np.float32)}
                          for _ in range(count)])

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self.data, None)


def _static(tmp_path, fmt: str, activation: str) -> onnx.ModelProto:
    src, dst = tmp_path / "float.onnx", tmp_path / f"q_{fmt}.onnx"
    onnx.save(_cnn(), src)
    q = quantization
    quantization.quantize_static(
        str(src), str(dst), _Reader("x", SHAPE),
        quant_format=q.QuantFormat.QDQ if fmt == "qdq" else q.QuantFormat.QOperator,
        per_channel=True, activation_type=getattr(q.QuantType, activation),
        weight_type=q.QuantType.QInt8)
    return onnx.load(dst)


def _output_step(model: onnx.ModelProto) -> float:
    """The scale of the DequantizeLinear writing the graph output (one quantization step)."""
    inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    for node in model.graph.node:
        if node.op_type == "DequantizeLinear" and node.output[0] == model.graph.output[0].name:
            return float(inits[node.input[1]].reshape(-1)[0])
    raise AssertionError("the output is not dequantized")


def _agreement(got: np.ndarray, want: np.ndarray, step: float) -> tuple[float, float]:
    g, w = got.astype(np.float64).ravel(), want.astype(np.float64).ravel()
    cosine = float(g @ w / (np.linalg.norm(g) * np.linalg.norm(w)))
    within = float(np.mean(np.abs(g - w) <= step * 1.001))
    return cosine, within


def _build(model: onnx.ModelProto) -> tuple[LoadedModule, list[dict]]:
    module = LoadedModule(build(model, BuildOptions()))
    layers = layer_info(module.program)["layers"]
    return module, [{"op": lay["type"], "precision": lay["precision"]} for lay in layers]


@pytest.mark.parametrize("fmt,activation", [("qdq", "QUInt8"), ("qdq", "QInt8"),
                                            ("qoperator", "QUInt8")])
def test_quantize_static_runs_int8(tmp_path, fmt, activation):
    model = _static(tmp_path, fmt, activation)
    module, layers = _build(model)
    ops = [lay["op"] for lay in layers]
    assert ops.count("QConv") == 4, ops  # every convolution, the depthwise one too
    assert all(lay["precision"] == "int8" for lay in layers if lay["op"] == "QConv")
    step = _output_step(model)
    for seed in range(3):
        x = np.random.default_rng(100 + seed).standard_normal(SHAPE).astype(np.float32)
        got = module.run({"x": x})[0]
        want = run_ort(model, {"x": x})[0]
        cosine, within = _agreement(got, want, step)
        assert cosine >= 0.999 and within >= 0.999, (cosine, within)


def test_quantize_dynamic_runs_int8(tmp_path):
    src, dst = tmp_path / "float.onnx", tmp_path / "dyn.onnx"
    onnx.save(onnx.shape_inference.infer_shapes(_mlp()), src)
    quantization.quantize_dynamic(str(src), str(dst), weight_type=quantization.QuantType.QInt8,
                                  extra_options={"DefaultTensorType": TensorProto.FLOAT})
    model = onnx.load(dst)
    module, layers = _build(model)
    assert [lay["op"] for lay in layers].count("QGemm") == 2
    x = np.random.default_rng(5).standard_normal((4, 32)).astype(np.float32)
    got, want = module.run({"x": x})[0], run_ort(model, {"x": x})[0]
    # Every integer product is exact and the float steps are onnxruntime's: float rounding.
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
