"""Parallel kernel compilation before autotuning (pydla.plan.precompile): layers survive
the JSON trip with the types their kernels are compiled for, workers run them, and the
builder only starts workers for tactics it has not bound yet."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from onnx import helper

from pydla.backends.base import LayerSpec, TensorSpec
from pydla.builder import BuildOptions, build
from pydla.dtypes import DType
from pydla.plan import precompile
from tests.oracle import make_model


def _conv_spec(tactic: str) -> LayerSpec:
    f32 = DType.FLOAT32
    attrs = {"strides": [1, 1], "pads": [1, 1, 1, 1], "dilations": [1, 1], "group": 1,
             "epilogue": {"inputs": 0, "program": [
                 {"op": "Relu", "in": [0], "attrs": {}, "shape": [1, 8, 6, 6],
                  "dtype": "float32"}]}}
    return LayerSpec("c", "Conv", attrs, (TensorSpec((1, 8, 6, 6), f32),
                                          TensorSpec((8, 8, 3, 3), f32),
                                          TensorSpec((8,), f32)),
                     (TensorSpec((1, 8, 6, 6), f32),), tactic)


def test_encode_keeps_what_the_kernel_types_depend_on() -> None:
    job = precompile.encode(_conv_spec("im2col"), [False, True, True], "m")
    back = json.loads(json.dumps(job))
    assert back["tactic"] == "im2col" and back["module"] == "m"
    assert back["inputs"][1] == [[8, 8, 3, 3], int(DType.FLOAT32), True]  # read-only weight
    assert back["attrs"]["epilogue"]["program"][0]["op"] == "Relu"
    precompile.run_jobs([back])  # runs (and compiles) it here, without raising
    precompile.run_jobs([{**back, "tactic": "no-such-tactic"}])  # a bad job is skipped


def test_workers_only_when_worth_it(monkeypatch: pytest.MonkeyPatch) -> None:
    jobs = [precompile.encode(_conv_spec(t), [False, True, True], t)
            for t in ("im2col", "winograd2", "direct_c16")]
    assert not precompile.compile_in_workers(jobs[:precompile.MIN_JOBS - 1])
    monkeypatch.setattr(precompile, "_cores", lambda: 1)
    assert not precompile.compile_in_workers(jobs)
    monkeypatch.setattr(precompile, "_cores", lambda: 2)
    assert precompile.compile_in_workers(jobs)  # two real worker processes


def test_builder_skips_tactics_it_has_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[list[str]] = []
    monkeypatch.setattr(precompile, "_SEEN", set())  # as in a fresh process
    monkeypatch.setattr(precompile, "compile_in_workers", lambda jobs, progress=None:
                        calls.append([j["tactic"] for j in jobs]) or False)
    w = np.random.default_rng(0).standard_normal((8, 8, 3, 3)).astype(np.float32)
    model = make_model([helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])],
                       {"x": (np.float32, (1, 8, 10, 10))}, ["y"], {"w": w})
    build(model, BuildOptions(autotune=True))
    assert calls and calls[0]  # the candidates not yet bound in this process
    build(model, BuildOptions(autotune=True))
    assert calls[-1] == []  # all bound by the first build: nothing to hand out


def test_slowest_groups_go_first_and_shared_kernels_stay_together() -> None:
    def job(op: str, module: str, layouts: list[str] | None = None) -> dict[str, object]:
        return {"op": op, "module": module, "tactic": module, "attrs": {"layouts": layouts}}

    blocked = ["nchw16c", "nchw16c"]
    jobs = [job("MaxPool", "pool"), job("Conv", "gemm", blocked), job("Conv", "wino", blocked),
            job("Flatten", "copy"), job("Conv", "wino", blocked), job("Conv", "wino"),
            job("Gemm", "matmul")]
    order = precompile.groups_in_order(jobs)
    # Winograd's two blocked tactics share one kernel: one group, the slowest (2 × 8 s).
    assert [(g[0]["module"], len(g)) for g in order[:2]] == [("wino", 2), ("matmul", 1)]
    # Its planar tactic is compiled apart (its layout flags are constants): a group of
    # its own, which another worker may take.
    assert {(g[0]["module"], len(g)) for g in order[2:4]} == {("wino", 1), ("gemm", 1)}
    assert {g[0]["module"] for g in order[4:]} == {"pool", "copy"}


def test_a_worker_answers_each_group() -> None:
    job = precompile.encode(_conv_spec("im2col"), [False, True, True], "m")
    lines = json.dumps([job]) + "\n" + json.dumps([{**job, "tactic": "no-such"}]) + "\n"
    done = subprocess.run([sys.executable, "-m", "pydla.plan.precompile"], input=lines,
                          capture_output=True, text=True, timeout=600, check=True)
    assert done.stdout.split() == ["done", "done"]  # a bad job is skipped, not fatal
