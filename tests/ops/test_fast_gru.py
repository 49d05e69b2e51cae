"""The fused GRU and RNN tactic (kernels/fast_gru.py) against onnxruntime.

Every attribute the tactic accepts — directions, linear_before_reset, biases and initial
state present or not, Y or Y_h left out, batches on each of the recurrent product's paths
(fast_gemv's loop: 1; the packed micro-kernel: 5; sgemm: 20), hidden sizes whose gate
columns fill whole panels (64) or not (25), both layouts — and where it refuses a layer.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import helper

from pydla.backends.base import LayerSpec, TensorSpec
from pydla.backends.cpu.kernels import fast_gru
from pydla.backends.cpu.registry import candidate_tactics
from pydla.builder import BuildOptions, build
from pydla.dtypes import DType
from pydla.engine import LoadedModule
from pydla.errors import KernelError
from tests.ops.test_fast_kernels import check_tactic
from tests.oracle import assert_close, make_model, run_ort

RNG = np.random.default_rng(27)
GATES = {"GRU": 3, "RNN": 1}
STEPS, SIZE = 6, 7
FUSED = ("fused_gates", "fused_gates_parallel")


def _rand(*shape: int, scale: float = 0.5) -> np.ndarray:
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def _model(op: str, direction: str, *, batch: int = 1, hidden: int = 25, bias: bool = True,
           initial: bool = False, outputs: Sequence[str] = ("y", "yh"), lens: bool = False,
           runtime_weights: bool = False, steps: int = STEPS, size: int = SIZE, **attrs: Any
           ) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """One recurrent node; X, initial_h, sequence_lens (and W, R, B where
    ``runtime_weights``) are graph inputs, the rest initializers."""
    dirs = 2 if direction == "bidirectional" else 1
    gates = GATES[op] * hidden
    # R scaled by 1/√H: larger recurrent weights make a long sequence chaotic, and rounding
    # then separates any two kernels (the reference too) from onnxruntime.
    weights = {"w": _rand(dirs, gates, size, scale=0.2),
               "r": _rand(dirs, gates, hidden, scale=hidden ** -0.5)}
    if bias:
        weights["b"] = _rand(dirs, 2 * gates, scale=0.3)
    feeds = {"x": _rand(steps, batch, size, scale=1.0)}
    names = ["x", "w", "r", "b" if bias else "", "", ""]
    if lens:
        feeds["lens"] = np.full(batch, steps, np.int32)
        names[4] = "lens"
    if initial:
        feeds["h0"] = _rand(dirs, batch, hidden)
        names[5] = "h0"
    while not names[-1]:
        names.pop()
    inits = {}
    if runtime_weights:
        feeds |= weights
    else:
        inits = weights
    node = helper.make_node(op, names, list(outputs), hidden_size=hidden, direction=direction,
                            **attrs)
    inputs = {k: (v.dtype, v.shape) for k, v in feeds.items()}
    return make_model([node], inputs, [o for o in outputs if o], inits), feeds


def _check(model: onnx.ModelProto, feeds: dict[str, np.ndarray],
           tactic: str | tuple[str, ...] = "fused_gates", autotune: bool = False
           ) -> LoadedModule:
    """Build (by priority, or timing every tactic), check the tactic (one of ``tactic``),
    compare with ORT."""
    module = LoadedModule(build(model, BuildOptions(autotune=autotune)))
    [layer] = module.program.layers
    assert layer.tactic in (tactic if isinstance(tactic, tuple) else (tactic,)), \
        f"{layer.tactic} chosen, expected {tactic}"
    got = module.run(feeds)
    assert_close(got, run_ort(model, feeds), rtol=1e-4, atol=2e-5)
    return module


# (bias, initial_h, outputs, batch, hidden): each value of each appears with every
# direction and linear_before_reset.
_GRU_CASES = [
    (True, False, ("y", "yh"), 1, 25),
    (False, True, ("y",), 5, 64),
    (True, True, ("", "yh"), 5, 25),
    (False, False, ("y", "yh"), 1, 64),
]


@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("before", [0, 1])
@pytest.mark.parametrize("bias,initial,outputs,batch,hidden", _GRU_CASES)
def test_gru(direction: str, before: int, bias: bool, initial: bool, outputs: Sequence[str],
             batch: int, hidden: int) -> None:
    model, feeds = _model("GRU", direction, batch=batch, hidden=hidden, bias=bias,
                          initial=initial, outputs=outputs, linear_before_reset=before)
    _check(model, feeds)


@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("bias,initial,outputs,batch,hidden", _GRU_CASES[:2])
def test_rnn(direction: str, bias: bool, initial: bool, outputs: Sequence[str], batch: int,
             hidden: int) -> None:
    model, feeds = _model("RNN", direction, batch=batch, hidden=hidden, bias=bias,
                          initial=initial, outputs=outputs)
    _check(model, feeds)


@pytest.mark.parametrize("op,before", [("GRU", 0), ("GRU", 1), ("RNN", 0)])
def test_sgemm_batch_and_runtime_weights(op: str, before: int) -> None:
    # Batch 20 takes sgemm per step; W, R and B as graph inputs are packed at every run.
    attrs = {"linear_before_reset": before} if op == "GRU" else {}
    model, feeds = _model(op, "bidirectional", batch=20, hidden=16, initial=True,
                          runtime_weights=True, **attrs)
    _check(model, feeds)


@pytest.mark.parametrize("op", ["GRU", "RNN"])
@pytest.mark.parametrize("batch", [1, 5])
def test_batch_major_layout(op: str, batch: int) -> None:
    # onnxruntime has no layout=1: the layout-0 model's results, transposed, are the oracle.
    attrs = {"linear_before_reset": 1} if op == "GRU" else {}
    model0, feeds0 = _model(op, "bidirectional", batch=batch, initial=True, **attrs)
    dirs, hidden = 2, 25
    x1 = np.ascontiguousarray(feeds0["x"].transpose(1, 0, 2))
    h1 = np.ascontiguousarray(feeds0["h0"].transpose(1, 0, 2))
    node = helper.make_node(op, ["x", "w", "r", "b", "", "h0"], ["y", "yh"], hidden_size=hidden,
                            direction="bidirectional", layout=1, **attrs)
    inits = {t.name: onnx.numpy_helper.to_array(t) for t in model0.graph.initializer}
    model1 = make_model([node], {"x": (np.float32, x1.shape), "h0": (np.float32, h1.shape)},
                        ["y", "yh"], inits)
    module = LoadedModule(build(model1, BuildOptions(autotune=False)))
    assert module.program.layers[0].tactic == "fused_gates"
    got = module.run({"x": x1, "h0": h1})
    want = run_ort(model0, feeds0)
    assert got[0].shape == (batch, STEPS, dirs, hidden)
    assert_close(got, [want[0].transpose(2, 0, 1, 3), want[1].transpose(1, 0, 2)],
                 rtol=1e-4, atol=2e-5)


@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("op,before", [("GRU", 0), ("GRU", 1), ("RNN", 0)])
def test_sequence_lengths_run_fused(monkeypatch: pytest.MonkeyPatch, direction: str, op: str,
                                    before: int) -> None:
    """Lengths shorter than the sequence, an empty one among them, and all of them short
    (the steps stop at the longest): the fused loop, never the reference, matches ORT."""
    def no_reference(spec: LayerSpec):  # noqa: ANN202
        def run(inputs: Any, outputs: Any) -> None:
            raise AssertionError("the reference kernel ran")
        return run

    monkeypatch.setattr(fast_gru, "bind_recurrent", no_reference)
    attrs = {"linear_before_reset": before} if op == "GRU" else {}
    model, feeds = _model(op, direction, batch=5, lens=True, initial=True, **attrs)
    module = _check(model, feeds)  # every length is the sequence's
    for lens in ([6, 3, 1, 6, 2], [0, 3, 1, 6, 2], [2, 1, 2, 0, 1], [0, 0, 0, 0, 0]):
        feeds["lens"] = np.array(lens, np.int32)
        assert_close(module.run(feeds), run_ort(model, feeds), rtol=1e-4, atol=2e-5)


def test_sequence_lengths_out_of_range_go_to_the_reference() -> None:
    model, feeds = _model("GRU", "forward", batch=2, lens=True)
    module = _check(model, feeds)
    feeds["lens"] = np.array([STEPS + 1, 2], np.int32)
    with pytest.raises(KernelError, match=r"sequence_lens \[7, 2\] must lie in \[0, 6\]"):
        module.run(feeds)


def test_autotuner_chooses_fused_gates() -> None:
    model, feeds = _model("GRU", "forward", hidden=25, initial=True, linear_before_reset=1)
    _check(model, feeds, autotune=True)


@pytest.mark.parametrize("op,before", [("GRU", 0), ("GRU", 1), ("RNN", 0)])
def test_parallel_tactic(op: str, before: int) -> None:
    # Two directions of 100 steps × 64 × 64·gates: the input product and the directions
    # fork; without timing the parallel tactic is preferred, timed it may lose.
    attrs = {"linear_before_reset": before} if op == "GRU" else {}
    model, feeds = _model(op, "bidirectional", hidden=64, steps=100 if op == "GRU" else 300,
                          size=64, initial=True, **attrs)
    _check(model, feeds, tactic="fused_gates_parallel")
    _check(model, feeds, tactic=FUSED, autotune=True)


def _spec(op: str, **attrs: Any) -> LayerSpec:
    hidden, gates = 8, GATES[op] * 8
    base = {"direction": "forward", "hidden_size": hidden, "layout": 0, "clip": None,
            "activations": ["sigmoid", "tanh"] if op == "GRU" else ["tanh"],
            "activation_alpha": [0.0] * 2, "activation_beta": [0.0] * 2,
            "linear_before_reset": 0}
    f32 = DType.FLOAT32
    ins = (TensorSpec((4, 2, 6), f32), TensorSpec((1, gates, 6), f32),
           TensorSpec((1, gates, hidden), f32))
    return LayerSpec("layer", op, base | attrs, ins, (TensorSpec((4, 1, 2, hidden), f32),),
                     "fused_gates")


@pytest.mark.parametrize("op,attrs", [
    ("GRU", {}), ("RNN", {}),
    ("GRU", {"clip": 3.0}), ("RNN", {"clip": 1.0}),
    ("GRU", {"activations": ["hardsigmoid", "tanh"]}), ("RNN", {"activations": ["relu"]}),
])
def test_tactic_applies_only_to_default_cells(op: str, attrs: dict[str, Any]) -> None:
    chosen = [t.name for t in candidate_tactics(_spec(op, **attrs))]
    assert chosen == ([] if attrs else ["fused_gates"])


def test_clip_keeps_the_reference_kernel() -> None:
    model, feeds = _model("GRU", "forward", clip=0.5)
    _check(model, feeds, tactic="reference")


@pytest.mark.parametrize("op", ["GRU", "RNN"])
def test_float16_layer_matches_reference(op: str) -> None:
    # Half types compute in float32 (the backend widens around the kernel).
    steps, batch, size, hidden, gates = 5, 2, 6, 8, GATES[op] * 8
    attrs = {"direction": "bidirectional", "hidden_size": hidden, "layout": 0, "clip": None,
             "activations": (["sigmoid", "tanh"] if op == "GRU" else ["tanh"]) * 2,
             "activation_alpha": [0.0] * 4, "activation_beta": [0.0] * 4,
             "linear_before_reset": 1}
    args = [_rand(steps, batch, size), _rand(2, gates, size), _rand(2, gates, hidden),
            _rand(2, 2 * gates, scale=0.3), None, _rand(2, batch, hidden)]
    args = [None if a is None else a.astype(np.float16) for a in args]
    check_tactic(op, attrs, args, [((steps, 2, batch, hidden), np.float16),
                                   ((2, batch, hidden), np.float16)],
                 "fused_gates", rtol=3e-3, atol=3e-3)
