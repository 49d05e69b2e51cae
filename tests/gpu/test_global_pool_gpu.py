"""Global pools on the GPU: every candidate (``thread``, ``block``, ``split``) against numpy,
on the shapes that pick each (large maps with few channels — squeeze-excite blocks of
detectors —, many channels on small maps, odd sizes), fp32 and fp16 storage."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from tests.gpu.gpu import require_gpu

cp = require_gpu()

import pydla.backends.cuda.tuning as tuning  # noqa: E402
from pydla.backends.cuda import CudaBackend  # noqa: E402
from pydla.builder import BuildOptions, build  # noqa: E402
from pydla.dtypes import DType  # noqa: E402
from pydla.engine.module import LoadedModule  # noqa: E402


def _model(op: str, shape: tuple[int, int, int, int]) -> onnx.ModelProto:
    n, c = shape[:2]
    graph = helper.make_graph(
        [helper.make_node(op, ["x"], ["y"], name="pool")], "pool",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [n, c, 1, 1])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _forced(monkeypatch: pytest.MonkeyPatch, tactic: str) -> None:
    real = tuning.tune

    def force(data, **kwargs):  # noqa: ANN001, ANN003, ANN202
        result = real(data, **kwargs)
        result["tactics"] = {k: (tactic if k == "pool" else v)
                             for k, v in result["tactics"].items()}
        return result

    monkeypatch.setattr(tuning, "tune", force)


@pytest.mark.parametrize("shape", [(1, 64, 160, 160), (2, 24, 37, 41), (4, 2048, 7, 7),
                                   (1, 3, 5, 5)])
@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool"])
@pytest.mark.parametrize("tactic", ["thread", "block", "split"])
@pytest.mark.parametrize("half", [False, True])
def test_global_pool_candidates(monkeypatch, shape, op, tactic, half):
    x = np.random.default_rng(7).standard_normal(shape).astype(np.float32)
    if op == "GlobalMaxPool":
        x.reshape(shape[0], shape[1], -1)[:, 0, 3] = np.nan  # a NaN wins, as on the CPU
    _forced(monkeypatch, tactic)
    options = BuildOptions(target="cuda", autocast=DType.FLOAT16 if half else None)
    data = build(_model(op, shape), options)
    module = LoadedModule(data, CudaBackend())
    summary = module.bound.summary()
    if summary["tactics"].get("pool") != tactic:  # "split" exists only where it pays
        module.bound.close()
        assert tactic == "split", summary
        pytest.skip(f"no split candidate for {shape}: one block per output already fills it")
    got = module.run([x])[0].astype(np.float64)
    module.bound.close()
    xs = x.astype(np.float16).astype(np.float64) if half else x.astype(np.float64)
    want = (xs.mean(axis=(2, 3), keepdims=True) if op == "GlobalAveragePool"
            else xs.max(axis=(2, 3), keepdims=True))
    if op == "GlobalMaxPool":
        want[:, 0] = np.nan
    np.testing.assert_allclose(got, want, rtol=2e-3 if half else 1e-5,
                               atol=2e-3 if half else 1e-5, equal_nan=True)


def _reduce_model(op: str, shape: tuple[int, int, int, int], keepdims: int) -> onnx.ModelProto:
    n, c = shape[:2]
    out = [n, c, 1, 1] if keepdims else [n, c]
    inits = [onnx.numpy_helper.from_array(np.eye(c, dtype=np.float32).reshape(c, c, 1, 1), "w")]
    if op == "ReduceSum":  # axes an input from opset 13
        inits.append(onnx.numpy_helper.from_array(np.array([2, 3], np.int64), "axes"))
        reduce = helper.make_node(op, ["a", "axes"], ["y"], keepdims=keepdims, name="pool")
    else:
        reduce = helper.make_node(op, ["a"], ["y"], axes=[2, 3], keepdims=keepdims, name="pool")
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["a"], name="conv"), reduce],  # conv: NHWC
        "reduce", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, out)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("shape", [(1, 32, 96, 96), (2, 24, 37, 41)])
@pytest.mark.parametrize("op", ["ReduceMean", "ReduceMax", "ReduceSum"])
@pytest.mark.parametrize("tactic", ["pool-thread", "pool-block", "pool-split"])
@pytest.mark.parametrize("keepdims", [0, 1])
def test_spatial_reduce_candidates(monkeypatch, shape, op, tactic, keepdims):
    x = np.random.default_rng(5).standard_normal(shape).astype(np.float32)
    _forced(monkeypatch, tactic)
    data = build(_reduce_model(op, shape, keepdims), BuildOptions(target="cuda"))
    module = LoadedModule(data, CudaBackend())
    summary = module.bound.summary()
    if summary["tactics"].get("pool") != tactic:
        module.bound.close()
        assert tactic == "pool-split", summary
        pytest.skip(f"no split candidate for {shape}")
    got = module.run([x])[0].astype(np.float64)
    module.bound.close()
    fn = {"ReduceMean": np.mean, "ReduceMax": np.max, "ReduceSum": np.sum}[op]
    want = fn(x.astype(np.float64), axis=(2, 3), keepdims=bool(keepdims))
    # The 1x1 conv that keeps the map channels-last runs in TF32 (10-bit mantissa): each
    # element is off by up to 2^-11 relative, a sum by about that times sqrt(H*W).
    atol = 2e-3 * (np.sqrt(shape[2] * shape[3]) if op == "ReduceSum" else 1)
    np.testing.assert_allclose(got, want, rtol=2e-3, atol=atol)
