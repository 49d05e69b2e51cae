"""LSTM with peepholes (input P) in the fused_gates tactic, against onnxruntime and against
the reference kernel: i and f see the previous cell state (Pi, Pf), o the new one (Po)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from tests.ops.test_fast_kernels import _rand, check_model, check_tactic
from tests.oracle import assert_close, make_model, run_ort


def _model(direction: str, batch: int, hidden: int, with_state: bool, p_input: bool):
    steps, size = 6, 10
    dirs = 2 if direction == "bidirectional" else 1
    ins = ["x", "w", "r", "b", "", "h0" if with_state else "", "c0" if with_state else "", "p"]
    node = helper.make_node("LSTM", ins, ["y", "yh", "yc"], hidden_size=hidden,
                            direction=direction)
    inputs = {"x": (np.float32, (steps, batch, size))}
    if with_state:
        inputs |= {"h0": (np.float32, (dirs, batch, hidden)),
                   "c0": (np.float32, (dirs, batch, hidden))}
    # Peepholes large enough that a wrong cell state (old for new) shows past tolerance.
    p = _rand(dirs, 3 * hidden, scale=1.5)
    inits = {"w": _rand(dirs, 4 * hidden, size, scale=0.3),
             "r": _rand(dirs, 4 * hidden, hidden, scale=0.3),
             "b": _rand(dirs, 8 * hidden, scale=0.1)}
    feeds = {"x": _rand(steps, batch, size)}
    if p_input:
        inputs["p"] = (np.float32, (dirs, 3 * hidden))
        feeds["p"] = p
    else:
        inits["p"] = p
    if with_state:
        feeds |= {"h0": _rand(dirs, batch, hidden, scale=0.5),
                  "c0": _rand(dirs, batch, hidden, scale=2.0)}
    return make_model([node], inputs, ["y", "yh", "yc"], inits), feeds


@pytest.mark.parametrize("direction,batch,hidden,with_state", [
    ("forward", 1, 16, True), ("reverse", 3, 20, False), ("bidirectional", 8, 16, True),
    ("bidirectional", 1, 25, False)])
def test_lstm_peepholes_fused(direction: str, batch: int, hidden: int,
                              with_state: bool) -> None:
    model, feeds = _model(direction, batch, hidden, with_state, p_input=False)
    module = check_model(model, feeds, {"LSTM": "fused_gates"})
    layer = module.program.layers[0]
    prog = module.program
    weights = [None if i < 0 else prog.weight(prog.tensors[i]) for i in layer.inputs]
    args = [feeds["x"], *weights[1:4], None,
            feeds.get("h0"), feeds.get("c0"), weights[7]]
    outs = [(prog.tensors[i].shape, np.float32) for i in layer.outputs]
    check_tactic("LSTM", dict(layer.attrs), args, outs, "fused_gates")


def test_lstm_peepholes_as_runtime_input() -> None:
    """P fed at run time is read at every run, not once at load."""
    model, feeds = _model("forward", 2, 16, True, p_input=True)
    module = check_model(model, feeds, {"LSTM": "fused_gates"})
    flipped = {**feeds, "p": -feeds["p"]}
    assert_close(module.run(flipped), run_ort(model, flipped), rtol=1e-4, atol=1e-5)


def test_lstm_input_forget_keeps_reference() -> None:
    """input_forget (f = 1 - i) is the reference kernel's, with or without peepholes."""
    model, feeds = _model("forward", 2, 16, True, p_input=False)
    model.graph.node[0].attribute.append(helper.make_attribute("input_forget", 1))
    check_model(model, feeds, {"LSTM": "reference"})
