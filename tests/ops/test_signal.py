"""DFT, STFT, the window generators and MelWeightMatrix against onnxruntime."""

import numpy as np
import pytest
from onnx import helper

from tests.oracle import check_against_ort, make_model

RNG = np.random.default_rng(17)


def _check(node, feeds: dict, inits: dict | None = None, opset: int = 17,
           tol: float = 1e-4) -> None:
    model = make_model([node], {n: (a.dtype, a.shape) for n, a in feeds.items()},
                       list(node.output), inits, opset=opset)
    check_against_ort(model, feeds, rtol=tol, atol=tol)


@pytest.mark.parametrize("onesided", [0, 1])
@pytest.mark.parametrize("axis", [1, 2])
@pytest.mark.parametrize("length", [None, 6, 12])
def test_dft_forward_opset17(onesided, axis, length):
    x = RNG.standard_normal((2, 8, 10, 1)).astype(np.float32)
    inputs = ["x", "n"] if length else ["x"]
    inits = {"n": np.array(length, np.int64)} if length else None
    node = helper.make_node("DFT", inputs, ["y"], axis=axis, onesided=onesided)
    _check(node, {"x": x}, inits)


@pytest.mark.parametrize("axis", [-2, 1, -3])
def test_dft_complex_and_inverse_opset20(axis):
    x = RNG.standard_normal((2, 8, 6, 2)).astype(np.float32)
    for inverse in (0, 1):
        node = helper.make_node("DFT", ["x", "", "axis"], ["y"], inverse=inverse)
        _check(node, {"x": x}, {"axis": np.array(axis, np.int64)}, opset=20)


def test_dft_double_and_fp16():
    x = RNG.standard_normal((3, 16, 1))
    node = helper.make_node("DFT", ["x"], ["y"], axis=1)
    _check(node, {"x": x})
    _check(node, {"x": x.astype(np.float16)}, tol=2e-2)


@pytest.mark.parametrize("onesided", [0, 1])
def test_stft(onesided):
    signal = RNG.standard_normal((2, 40, 1)).astype(np.float32)
    window = np.hanning(16).astype(np.float32)
    node = helper.make_node("STFT", ["s", "step", "w", "n"], ["y"], onesided=onesided)
    _check(node, {"s": signal, "w": window},
           {"step": np.array(6, np.int64), "n": np.array(16, np.int64)})
    node = helper.make_node("STFT", ["s", "step", "", "n"], ["y"], onesided=onesided)
    _check(node, {"s": signal}, {"step": np.array(8, np.int64), "n": np.array(10, np.int64)})


def test_stft_complex_signal():
    signal = RNG.standard_normal((1, 24, 2)).astype(np.float32)
    node = helper.make_node("STFT", ["s", "step", "", "n"], ["y"], onesided=0)
    _check(node, {"s": signal}, {"step": np.array(4, np.int64), "n": np.array(8, np.int64)})


@pytest.mark.parametrize("op", ["HannWindow", "HammingWindow", "BlackmanWindow"])
@pytest.mark.parametrize("periodic", [0, 1])
def test_windows(op, periodic):
    # The window is a constant; adding an input keeps a layer in the loadable.
    nodes = [helper.make_node(op, ["n"], ["w"], periodic=periodic),
             helper.make_node("Add", ["w", "x"], ["y"])]
    model = make_model(nodes, {"x": (np.float32, [10])}, ["y"],
                       {"n": np.array(10, np.int64)}, opset=17)
    check_against_ort(model, {"x": np.zeros(10, np.float32)})


def test_window_output_type():
    nodes = [helper.make_node("HannWindow", ["n"], ["w"], output_datatype=11),
             helper.make_node("Add", ["w", "x"], ["y"])]
    model = make_model(nodes, {"x": (np.float64, [7])}, ["y"], {"n": np.array(7, np.int32)},
                       opset=17)
    check_against_ort(model, {"x": np.ones(7)})


def test_mel_weight_matrix():
    names = ["bins", "dft", "rate", "low", "high"]
    inits = {"bins": np.array(8, np.int64), "dft": np.array(64, np.int64),
             "rate": np.array(8000, np.int64), "low": np.array(100, np.float32),
             "high": np.array(3800, np.float32)}
    nodes = [helper.make_node("MelWeightMatrix", names, ["m"]),
             helper.make_node("MatMul", ["x", "m"], ["y"])]
    model = make_model(nodes, {"x": (np.float32, [3, 33])}, ["y"], inits, opset=17)
    check_against_ort(model, {"x": RNG.random((3, 33)).astype(np.float32)})
