"""Small int8 convolution networks for the CUDA QConv kernel (``kernels/qconv.py``): both of
its inner loops (dp4a over channels-last words, scalar), uint8 and int8 activations, per-
channel weights, depthwise and grouped, strides, padding, 1-D, a folded Relu, a residual
folded at its own int8 scale or added in float, float and int32 outputs. Built without
CUDA: ``tests/unit/test_cuda_int8_emulate.py`` runs the kernels on the host
(``scripts/cuda_emulate.py``) and ``tests/gpu/test_int8_gpu.py`` on the GPU, both against
the CPU backend running the same (``--target=cuda``) loadable. Every output must match bit
for bit (the int8 layers' semantics are exact; the float layers between them are
pointwise)."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from tests.models.netbuilder import Net

Feeds = dict[str, np.ndarray]
Case = Callable[[], tuple[onnx.ModelProto, Feeds]]


def _feeds(shape: tuple[int, ...], seed: int) -> Feeds:
    return {"x": np.random.default_rng(seed).standard_normal(shape).astype(np.float32)}


def _quantized(model: onnx.ModelProto, shape: tuple[int, ...], signed: bool) -> onnx.ModelProto:
    """onnxruntime's quantize_static, QDQ format, per-channel int8 weights, uint8 (or
    int8) activations, calibrated on 3 random batches."""
    from onnxruntime import quantization as q

    class Reader(q.CalibrationDataReader):
        def __init__(self) -> None:
            self.it = iter([_feeds(shape, 10 + i) for i in range(3)])

        def get_next(self) -> Feeds | None:
            return next(self.it, None)

    with tempfile.TemporaryDirectory() as tmp:
        src, dst = Path(tmp) / "f.onnx", Path(tmp) / "q.onnx"
        onnx.save(model, src)
        q.quantize_static(str(src), str(dst), Reader(), quant_format=q.QuantFormat.QDQ,
                          per_channel=True, weight_type=q.QuantType.QInt8,
                          activation_type=q.QuantType.QInt8 if signed else q.QuantType.QUInt8)
        return onnx.load(dst)


def _convnet(signed: bool) -> Case:
    """Conv 3→16 3×3 + Relu, 8-bit MaxPool 3×3, depthwise 3×3 stride 2 + Relu, 1×1 16→24,
    3×3 24→24, float residual Add + Relu, 5×5 24→8 + Relu (a float-output QConv),
    quantized."""
    def case() -> tuple[onnx.ModelProto, Feeds]:
        shape = (2, 3, 12, 12)
        n = Net("qconvnet", seed=3)
        x = n.input("x", shape)
        a = n.conv(x, 3, 16, k=3, bn=False, bias=True)
        a = n.op("MaxPool", [a], kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1])
        b = n.conv(a, 16, 16, k=3, s=2, groups=16, bn=False, bias=True)
        c = n.conv(b, 16, 24, k=1, act=None, bn=False, bias=True)
        d = n.conv(c, 24, 24, k=3, act=None, bn=False, bias=True)
        e = n.op("Relu", [n.op("Add", [c, d])])
        f = n.conv(e, 24, 8, k=5, act="relu", bn=False, bias=True)
        return _quantized(n.model([f]), shape, signed), _feeds(shape, 1)

    return case


def _wide(signed: bool) -> Case:
    """Channels in whole 32-byte chunks (the tensor-core kernel's layers): 32→64 3×3,
    64→96 1×1 stride 2 (a partial channel tile), 96→256 3×3 + Relu (full 128-channel
    tiles); 3·13·11 pixels (a partial pixel tile)."""
    def case() -> tuple[onnx.ModelProto, Feeds]:
        shape = (3, 32, 13, 11)
        n = Net("qwide", seed=5)
        x = n.input("x", shape)
        a = n.conv(x, 32, 64, k=3, bn=False, bias=True)
        b = n.conv(a, 64, 96, k=1, s=2, act=None, bn=False, bias=True)
        c = n.conv(b, 96, 256, k=3, bn=False, bias=True)
        return _quantized(n.model([c]), shape, signed), _feeds(shape, 2)

    return case


def _init(name: str, value: np.ndarray) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(value), name)


def _residual(to_int8: bool) -> tuple[onnx.ModelProto, Feeds]:
    """DQ(x) → Conv(DQ(w), DQ(bias)) → Add(DQ(r)) → Relu [→ Q → DQ]: the Add folds into
    the QConv, at r's own scale before the one rounding (``to_int8``), else in float."""
    rng = np.random.default_rng(7)
    xs, rs, ys = 0.05, 0.07, 0.09
    w = rng.integers(-127, 128, (8, 8, 3, 3)).astype(np.int8)
    ws = (rng.uniform(0.002, 0.01, 8)).astype(np.float32)
    bias = rng.integers(-400, 400, 8).astype(np.int32)
    inits = [_init("xs", np.float32(xs)), _init("xz", np.uint8(120)), _init("w", w),
             _init("ws", ws), _init("wz", np.zeros(8, np.int8)), _init("b", bias),
             _init("bs", (np.float32(xs) * ws).astype(np.float32)),
             _init("bz", np.zeros(8, np.int32)), _init("rs", np.float32(rs)),
             _init("rz", np.int8(-5)), _init("ys", np.float32(ys)), _init("yz", np.uint8(3))]
    nodes = [helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"]),
             helper.make_node("QuantizeLinear", ["r", "rs", "rz"], ["rq"]),
             helper.make_node("DequantizeLinear", ["rq", "rs", "rz"], ["rd"]),
             helper.make_node("DequantizeLinear", ["w", "ws", "wz"], ["wd"], axis=0),
             helper.make_node("DequantizeLinear", ["b", "bs", "bz"], ["bd"], axis=0),
             helper.make_node("Conv", ["xd", "wd", "bd"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["c", "rd"], ["s"]),
             helper.make_node("Relu", ["s"], ["y" if not to_int8 else "yr"])]
    if to_int8:
        nodes += [helper.make_node("QuantizeLinear", ["yr", "ys", "yz"], ["yq"]),
                  helper.make_node("DequantizeLinear", ["yq", "ys", "yz"], ["y"])]
    shape = [2, 8, 7, 9]
    graph = helper.make_graph(
        nodes, "residual", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape),
                            helper.make_tensor_value_info("r", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    feeds = {"x": (rng.standard_normal(shape) * 3).astype(np.float32),
             "r": (rng.standard_normal(shape) * 4).astype(np.float32)}
    return model, feeds


def _qlinear(nd: int, uint8_weights: bool) -> Case:
    """QLinearConv with int8 activations (zero point -3), grouped (2), stride 2, dilation
    2 in 2-D; uint8 weights with zero point 7 give offsets beyond int8 (the scalar loop);
    plus a ConvInteger (int32 output) of the same tensors."""
    def case() -> tuple[onnx.ModelProto, Feeds]:
        rng = np.random.default_rng(11 + nd)
        spatial = [13] if nd == 1 else [9, 11]
        kernel = [3] * nd
        wtype = np.uint8 if uint8_weights else np.int8
        lo, hi = (0, 256) if uint8_weights else (-128, 128)
        w = rng.integers(lo, hi, (12, 4, *kernel)).astype(wtype)
        inits = [_init("xs", np.float32(0.04)), _init("xz", np.int8(-3)), _init("w", w),
                 _init("ws", rng.uniform(0.001, 0.02, 12).astype(np.float32)),
                 _init("wz", wtype(7) if uint8_weights else np.zeros(12, np.int8)),
                 _init("ys", np.float32(0.3)), _init("yz", np.int8(4)),
                 _init("b", rng.integers(-1000, 1000, 12).astype(np.int32))]
        attrs = {"group": 2, "pads": [1] * (2 * nd), "strides": [2] * nd,
                 "dilations": [1] * nd if nd == 1 else [2, 1]}
        nodes = [helper.make_node("QLinearConv", ["xq", "xs", "xz", "w", "ws", "wz", "ys",
                                                  "yz", "b"], ["y"], **attrs),
                 helper.make_node("ConvInteger", ["xq", "w", "xz", "wz"], ["acc"], **attrs)]
        if not uint8_weights:  # ConvInteger's w_zero_point is per tensor
            nodes[1].input[3] = "wz0"
            inits.append(_init("wz0", np.int8(0)))
        shape = [2, 8, *spatial]
        graph = helper.make_graph(
            nodes, f"qlinear{nd}d", [helper.make_tensor_value_info("xq", TensorProto.INT8,
                                                                    shape)],
            [helper.make_empty_tensor_value_info("y"),
             helper.make_empty_tensor_value_info("acc")], inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        model.ir_version = 8
        model = onnx.shape_inference.infer_shapes(model)
        del model.graph.value_info[:]
        return model, {"xq": rng.integers(-128, 128, shape).astype(np.int8)}

    return case


CASES: dict[str, Case] = {
    "qdq_convnet_u8": _convnet(False),
    "qdq_convnet_s8": _convnet(True),
    "qdq_wide_u8": _wide(False),
    "qdq_wide_s8": _wide(True),
    "residual_int8": lambda: _residual(True),
    "residual_float": lambda: _residual(False),
    "qlinear_conv2d_u8w": _qlinear(2, True),
    "qlinear_conv1d": _qlinear(1, False),
}
