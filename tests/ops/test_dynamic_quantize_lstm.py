"""com.microsoft DynamicQuantizeLSTM against onnxruntime: W and R dequantized at build time,
X and each step's h through onnxruntime's dynamic uint8 round trip (without it the outputs
drift by 5e-3-1.4e-2 here, far past the tolerance below)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from pydla.errors import ModelImportError, NotConstantError
from tests.ops.test_fast_kernels import check_model
from tests.oracle import run_pydla

RNG = np.random.default_rng(11)
T, B, I = 7, 2, 5


def _q(shape, dtype):
    info = np.iinfo(dtype)
    return RNG.integers(info.min, int(info.max) + 1, shape).astype(dtype)


def _model(hidden: int, direction: str, wtype, per_channel: bool, extras: bool,
           **overrides) -> onnx.ModelProto:
    dirs = 2 if direction == "bidirectional" else 1
    params = (dirs, 4 * hidden) if per_channel else (dirs,)
    # onnxruntime takes per-channel weights only with zero points at 0 (signed) or 128
    # ("InputWeight zero point must be zero"); pydla takes any.
    mid = 128 if wtype == np.uint8 else 0
    zp = np.zeros((dirs, 1), np.int64) if per_channel else RNG.integers(-3, 4, dirs)
    inits = {"w": _q((dirs, I, 4 * hidden), wtype), "r": _q((dirs, hidden, 4 * hidden), wtype),
             "b": RNG.normal(0, 0.3, (dirs, 8 * hidden)).astype(np.float32),
             "ws": RNG.uniform(0.005, 0.015, params).astype(np.float32),
             "wz": np.broadcast_to(mid + zp, params).astype(wtype),
             "rs": RNG.uniform(0.004, 0.01, params).astype(np.float32),
             "rz": np.broadcast_to(mid - zp, params).astype(wtype)}
    names = ["x", "w", "r", "b", "", "", "", "", "ws", "wz", "rs", "rz"]
    state = (dirs, B, hidden)
    if extras:
        inits |= {"h0": RNG.normal(0, 0.5, state).astype(np.float32),
                  "c0": RNG.normal(0, 1, state).astype(np.float32),
                  "p": RNG.normal(0, 0.5, (dirs, 3 * hidden)).astype(np.float32)}
        names[5:8] = ["h0", "c0", "p"]
    inits |= overrides
    node = helper.make_node("DynamicQuantizeLSTM", names, ["y", "yh", "yc"],
                            domain="com.microsoft", direction=direction, hidden_size=hidden)
    outs = [helper.make_tensor_value_info("y", 1, [T, dirs, B, hidden]),
            helper.make_tensor_value_info("yh", 1, list(state)),
            helper.make_tensor_value_info("yc", 1, list(state))]
    graph = helper.make_graph([node], "dqlstm", [helper.make_tensor_value_info("x", 1, [T, B, I])],
                              outs, [numpy_helper.from_array(v, k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                   helper.make_opsetid("com.microsoft", 1)])


@pytest.mark.parametrize("hidden,direction,wtype,per_channel,extras", [
    (6, "bidirectional", np.int8, False, False),
    (8, "forward", np.uint8, True, True),
    (5, "reverse", np.int8, True, False),
])
def test_dynamic_quantize_lstm_matches_onnxruntime(hidden, direction, wtype, per_channel,
                                                   extras):
    model = _model(hidden, direction, wtype, per_channel, extras)
    feeds = {"x": RNG.normal(0, 1, (T, B, I)).astype(np.float32)}
    module = check_model(model, feeds, {"LSTM": "reference"}, rtol=1e-5, atol=2e-6)
    layer = next(la for la in module.program.layers if la.op == "LSTM")
    assert layer.attrs["quantize_hidden"] == 1


def test_weights_must_be_constant_and_fit():
    model = _model(4, "forward", np.int8, False, False)
    del model.graph.initializer[1]  # r becomes a graph input
    model.graph.input.append(helper.make_tensor_value_info("r", 3, [1, 4, 16]))
    with pytest.raises(NotConstantError, match="R"):
        run_pydla(model, {"x": np.zeros((T, B, I), np.float32)})
    bad = _model(4, "forward", np.int8, False, False, ws=np.ones(3, np.float32))
    with pytest.raises(ModelImportError, match=r"W_scale has shape \[3\]"):
        run_pydla(bad, {"x": np.zeros((T, B, I), np.float32)})
    bad = _model(4, "forward", np.int8, False, False, wz=np.zeros(1, np.uint8))
    with pytest.raises(ModelImportError, match="W_zero_point is uint8"):
        run_pydla(bad, {"x": np.zeros((T, B, I), np.float32)})
