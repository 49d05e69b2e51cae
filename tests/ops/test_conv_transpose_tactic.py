"""The ``gemm_scatter`` ConvTranspose tactic (kernel = stride) against the reference kernel
and onnxruntime: shapes, batch, bias, natively fused epilogues, half layers and the cases
it must refuse."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pytest
from onnx import helper

from pydla.backends.base import LayerSpec, TensorSpec
from pydla.backends.cpu.backend import bind_layer
from pydla.backends.cpu.registry import REFERENCE, candidate_tactics
from pydla.builder import BuildOptions, build_graph
from pydla.dtypes import DType
from pydla.engine import LoadedModule
from pydla.loadable import write_loadable
from pydla.plan.lower import lower
from tests.oracle import make_model, run_ort

RNG = np.random.default_rng(11)
TACTIC = "gemm_scatter"


def _rand(*shape: int, dtype: Any = np.float32) -> np.ndarray:
    return RNG.standard_normal(shape).astype(dtype)


def _spec(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, attrs: Mapping[str, Any],
          out: Sequence[int], tactic: str, extra: Sequence[np.ndarray] = (),
          program: Sequence[Mapping[str, Any]] | None = None,
          dtype: DType = DType.FLOAT32) -> LayerSpec:
    ins = [TensorSpec(x.shape, dtype), TensorSpec(w.shape, dtype)]
    if b is not None:
        ins.append(TensorSpec(b.shape, dtype))
    a = dict(attrs)
    if program is not None:
        a["epilogue"] = {"program": [{**s, "shape": list(out), "dtype": dtype.name.lower()}
                                     for s in program], "inputs": len(extra)}
    ins += [TensorSpec(e.shape, dtype) for e in extra]
    return LayerSpec("up", "ConvTranspose", a, tuple(ins), (TensorSpec(tuple(out), dtype),),
                     tactic)


def _run(spec: LayerSpec, inputs: Sequence[np.ndarray | None]) -> np.ndarray:
    out = np.empty(spec.outputs[0].shape, spec.outputs[0].dtype.np)
    bind_layer(spec)(list(inputs), [out])
    return out


def _close(got: np.ndarray, want: np.ndarray, tol: float = 1e-4) -> None:
    err = float(np.max(np.abs(got.astype(np.float64) - want)))
    assert err <= tol * max(1.0, float(np.max(np.abs(want)))), err


def _with(spec: LayerSpec, tactic: str) -> LayerSpec:
    return LayerSpec(spec.name, spec.op, spec.attrs, spec.inputs, spec.outputs, tactic)


@pytest.mark.parametrize("n,c,h,w,m,k", [(1, 24, 10, 12, 24, (2, 2)), (2, 5, 7, 3, 9, (3, 2)),
                                         (1, 40, 4, 4, 1, (4, 4)), (3, 16, 1, 1, 33, (2, 2))])
@pytest.mark.parametrize("bias", [True, False])
def test_matches_reference(n: int, c: int, h: int, w: int, m: int, k: Sequence[int],
                           bias: bool) -> None:
    x, wt = _rand(n, c, h, w), _rand(c, m, *k)
    b = _rand(m) if bias else None
    out = (n, m, h * k[0], w * k[1])
    spec = _spec(x, wt, b, {"strides": list(k)}, out, REFERENCE)
    assert TACTIC in {t.name for t in candidate_tactics(spec)}
    inputs = [x, wt] + ([b] if b is not None else [])
    _close(_run(_with(spec, TACTIC), inputs), _run(spec, inputs))


@pytest.mark.parametrize("program,extra", [
    ([{"op": "Relu", "in": [0], "attrs": {}}], 0),
    ([{"op": "Add", "in": [0, 1], "attrs": {}}, {"op": "Sigmoid", "in": [2], "attrs": {}}], 1),
])
def test_native_epilogue(program: list[dict[str, Any]], extra: int) -> None:
    x, wt, b = _rand(2, 8, 5, 6), _rand(8, 4, 2, 2), _rand(4)
    out = (2, 4, 10, 12)
    extras = [_rand(*out) for _ in range(extra)]
    spec = _spec(x, wt, b, {"strides": [2, 2]}, out, TACTIC, extras, program)
    base = _run(_spec(x, wt, b, {"strides": [2, 2]}, out, REFERENCE), [x, wt, b])
    want = base + extras[0] if extra else base
    want = 1 / (1 + np.exp(-want)) if extra else np.maximum(want, 0)
    _close(_run(spec, [x, wt, b, *extras]), want)


def test_half_layer() -> None:
    x, wt, b = _rand(1, 8, 6, 6, dtype=np.float16), _rand(8, 8, 2, 2, dtype=np.float16), \
        _rand(8, dtype=np.float16)
    spec = _spec(x, wt, b, {"strides": [2, 2]}, (1, 8, 12, 12), TACTIC, dtype=DType.FLOAT16)
    want = _run(_with(spec, REFERENCE), [x, wt, b]).astype(np.float64)
    _close(_run(spec, [x, wt, b]).astype(np.float64), want, 1e-2)


@pytest.mark.parametrize("attrs,k,out", [
    ({"strides": [2, 2]}, (3, 3), (1, 4, 11, 11)),              # kernel ≠ stride: overlaps
    ({"strides": [2, 2], "pads": [1, 1, 1, 1]}, (2, 2), (1, 4, 8, 8)),
    ({"strides": [2, 2], "output_padding": [1, 1]}, (2, 2), (1, 4, 11, 11)),
    ({"strides": [2, 2], "group": 2}, (2, 2), (1, 4, 10, 10)),
])
def test_refuses(attrs: Mapping[str, Any], k: Sequence[int], out: Sequence[int]) -> None:
    group = int(attrs.get("group", 1))
    spec = _spec(_rand(1, 4, 5, 5), _rand(4, 4 // group, *k), None, attrs, out, REFERENCE)
    assert TACTIC not in {t.name for t in candidate_tactics(spec)}


def test_against_onnxruntime() -> None:
    """ConvTranspose + BatchNormalization + Relu (fused by the builder into one layer) run by
    the tactic through the engine."""
    c, m = 16, 8
    x, wt, b = _rand(1, c, 9, 7), _rand(c, m, 2, 2) * np.float32(0.3), _rand(m)
    bn = {"s": _rand(m) ** 2 + 0.5, "o": _rand(m), "mu": _rand(m), "var": _rand(m) ** 2 + 0.5}
    nodes = [helper.make_node("ConvTranspose", ["x", "w", "b"], ["t"], strides=[2, 2]),
             helper.make_node("BatchNormalization", ["t", "s", "o", "mu", "var"], ["n"]),
             helper.make_node("Relu", ["n"], ["y"])]
    model = make_model(nodes, {"x": (np.float32, x.shape)}, ["y"], {"w": wt, "b": b, **bn})
    graph = build_graph(model, BuildOptions(autotune=False))
    layers = [node for node in graph.nodes if node.op == "ConvTranspose"]
    assert [node.tactic for node in layers] == [TACTIC]  # the default by priority
    meta, weights = lower(graph, target={"backend": "cpu", "dla_core": None, "mem_pools": {}},
                          build={"opset": graph.opset, "opt_level": 2, "shapes": {}})
    module = LoadedModule(write_loadable(meta, weights))
    assert "epilogue" in module.program.layers[-1].attrs
    _close(module.run({"x": x})[0], run_ort(model, {"x": x})[0])
