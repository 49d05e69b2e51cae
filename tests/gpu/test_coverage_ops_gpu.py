"""The CUDA kernels issue 26's coverage work added (GRU, TopK, the quantize family, 3-D
convolutions) on the GPU against the CPU backend: ``coverage_cases.EXACT_CASES`` bit for
bit, ``TOLERANT_CASES`` within their bound at fp32, and the GRU cases again at fp16 (cosine
≥ 0.999: the recurrence computes in float32 whatever the tensors' type)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.gpu.gpu import cosine, relative_error, require_gpu

cp = require_gpu()

from pydla.backends.cuda import CudaBackend  # noqa: E402
from pydla.builder import BuildOptions, build  # noqa: E402
from pydla.dtypes import DType  # noqa: E402
from pydla.engine.module import LoadedModule  # noqa: E402
from tests.gpu.coverage_cases import (  # noqa: E402
    EXACT_CASES,
    FLOAT_CASES,
    GRU_CASES,
    TOLERANT_CASES,
)


def _run_both(name: str, precision: DType | None, autotune: bool = False):  # noqa: ANN202
    cases = {**EXACT_CASES, **FLOAT_CASES, **{k: c for k, (c, _) in TOLERANT_CASES.items()}}
    model, feeds = cases[name]()
    data = build(model, BuildOptions(autotune=autotune, autocast=precision, target="cuda"))
    inputs = [feeds[i.name] for i in model.graph.input]
    want = LoadedModule(data).run(inputs)
    gpu = LoadedModule(data, CudaBackend())
    try:
        got = gpu.run(inputs)
        again = gpu.run(inputs)  # the graph replays to the same result
        summary = gpu.bound.summary()
    finally:
        gpu.bound.close()
    assert summary["graph_error"] is None, summary["graph_error"]
    for a, b in zip(got, again):
        np.testing.assert_array_equal(a, b)
    assert len(got) == len(want)
    return got, want


@pytest.mark.parametrize("name", sorted(EXACT_CASES))
def test_exact(name: str) -> None:
    got, want = _run_both(name, None)
    for k, (g, w) in enumerate(zip(got, want)):
        assert g.dtype == w.dtype and g.shape == w.shape, (name, k, g.dtype, w.dtype)
        np.testing.assert_array_equal(g, w, err_msg=f"{name} output {k}")


@pytest.mark.parametrize("precision", [DType.FLOAT16, DType.BFLOAT16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("name", sorted(FLOAT_CASES))
def test_exact_in_half_builds(name: str, precision: DType) -> None:
    got, want = _run_both(name, precision)
    for k, (g, w) in enumerate(zip(got, want)):
        assert g.dtype == w.dtype and g.shape == w.shape, (name, k, g.dtype, w.dtype)
        np.testing.assert_array_equal(g, w, err_msg=f"{name} output {k}")


@pytest.mark.parametrize("name", sorted(TOLERANT_CASES))
def test_tolerant(name: str) -> None:
    got, want = _run_both(name, None)
    bound = TOLERANT_CASES[name][1]
    for k, (g, w) in enumerate(zip(got, want)):
        assert g.shape == w.shape, (name, k)
        assert relative_error(g, w) < bound, (name, k, relative_error(g, w))


@pytest.mark.parametrize("name", ["gru_model", "gru_reverse_after_lens_input"])
def test_gru_fp16(name: str) -> None:
    got, want = _run_both(name, DType.FLOAT16)
    for k, (g, w) in enumerate(zip(got, want)):
        assert cosine(g, w) >= 0.999, (name, k, cosine(g, w))


def test_gru_runs_a_timed_gemm_not_the_fallback() -> None:
    """The plain projection kernel is a fallback: the load times the GEMM variants only."""
    model, feeds = GRU_CASES["gru_model"]()
    data = build(model, BuildOptions(autotune=False, target="cuda"))
    gpu = LoadedModule(data, CudaBackend())
    try:
        gpu.run([feeds[i.name] for i in model.graph.input])
        tactics = {c.op: c.tactic for c in gpu.bound.choices}
    finally:
        gpu.bound.close()
    assert tactics["GRU"] in ("tile32", "tile64", "warp"), tactics


def test_flat_3d_convolutions_run_as_2d_ones() -> None:
    """RivaGAN's 1×k×k filters over a depth of 1 take the 2-D candidates (cuDNN), not the
    direct 3-D fallback."""
    model, feeds = TOLERANT_CASES["conv3d_flat"][0]()
    data = build(model, BuildOptions(autotune=False, target="cuda"))
    gpu = LoadedModule(data, CudaBackend())
    try:
        gpu.run([feeds[i.name] for i in model.graph.input])
        tactics = [c.tactic for c in gpu.bound.choices if c.op == "Conv"]
    finally:
        gpu.bound.close()
    assert len(tactics) == 2 and "direct3d" not in tactics, tactics
