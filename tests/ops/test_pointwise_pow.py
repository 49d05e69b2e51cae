"""Pow in compiled pointwise programs (fast_math.pow32): squares and cubes by
multiplication, as onnxruntime computes them (bit-equal), other exponents by powf; a
fused GELU-like chain with Pow(x, 3) and a runtime exponent tensor."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from pydla.builder import BuildOptions, build
from pydla.engine import LoadedModule
from pydla.loadable import read_loadable
from tests.oracle import assert_close, make_model, run_ort


@pytest.mark.parametrize("exponent", [2.0, 3.0, 0.5, -1.5, 2.5])
def test_constant_exponent_matches_onnxruntime(exponent: float) -> None:
    x = np.random.default_rng(3).uniform(0.1, 4.0, (4, 64, 33)).astype(np.float32)
    nodes = [helper.make_node("Pow", ["x", "e"], ["p"]),
             helper.make_node("Mul", ["p", "k"], ["y"])]
    model = make_model(nodes, {"x": (np.float32, x.shape)}, ["y"],
                       {"e": np.float32(exponent), "k": np.float32(0.044715)})
    data = build(model, BuildOptions(autotune=False))
    assert [lay.tactic for lay in read_loadable(data).layers] == ["fused_loop"]
    got = LoadedModule(data).run({"x": x})
    want = run_ort(model, {"x": x})
    if exponent in (2.0, 3.0):
        assert_close(got, want, rtol=0, atol=0)
    else:
        assert_close(got, want, rtol=2e-6, atol=0)


def test_runtime_exponents() -> None:
    rng = np.random.default_rng(4)
    x = rng.uniform(0.5, 2.0, (8, 16)).astype(np.float32)
    e = rng.choice(np.array([2, 3, 1.5, -2], np.float32), (8, 16))
    model = make_model([helper.make_node("Pow", ["x", "e"], ["y"])],
                       {"x": (np.float32, x.shape), "e": (np.float32, e.shape)}, ["y"])
    got = LoadedModule(build(model, BuildOptions(autotune=False))).run({"x": x, "e": e})
    assert_close(got, run_ort(model, {"x": x, "e": e}), rtol=2e-6, atol=0)
