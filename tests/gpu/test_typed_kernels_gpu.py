"""Integer and bool tensors on the GPU: casts, integer arithmetic, comparisons and logic,
Where, Expand, Gather, Pad, ArgMax/ArgMin and reshapes, each against the CPU backend with
exact equality (fp32, fp16 and bf16 builds for the cases over float data); a run-time Gather
index out of range raises the CPU backend's KernelError at sync, and the module runs on."""

from __future__ import annotations

import numpy as np
import pytest

from tests.gpu.gpu import relative_error, require_gpu

cp = require_gpu()

from pydla.backends.cuda import CudaBackend  # noqa: E402
from pydla.builder import BuildOptions, build  # noqa: E402
from pydla.dtypes import DType  # noqa: E402
from pydla.engine.module import LoadedModule  # noqa: E402
from pydla.errors import KernelError  # noqa: E402
from tests.gpu.typed_cases import (  # noqa: E402
    EXACT_CASES,
    FLOAT_CASES,
    TOLERANT_CASES,
    gather_out_of_range,
)


def _run_both(name: str, precision: DType | None):  # noqa: ANN202
    cases = {**EXACT_CASES, **FLOAT_CASES, **{k: c for k, (c, _) in TOLERANT_CASES.items()}}
    model, feeds = cases[name]()
    data = build(model, BuildOptions(autotune=False, autocast=precision, target="cuda"))
    inputs = [feeds[i.name] for i in model.graph.input]
    want = LoadedModule(data).run(inputs)
    gpu = LoadedModule(data, CudaBackend())
    try:
        got = gpu.run(inputs)
        summary = gpu.bound.summary()
    finally:
        gpu.bound.close()
    assert summary["graph_error"] is None, summary["graph_error"]
    assert len(got) == len(want)
    return got, want


@pytest.mark.parametrize("name", sorted(EXACT_CASES))
def test_exact_on_the_gpu(name: str) -> None:
    got, want = _run_both(name, None)
    for k, (g, w) in enumerate(zip(got, want)):
        assert g.dtype == w.dtype and g.shape == w.shape, (name, k, g.dtype, w.dtype)
        np.testing.assert_array_equal(g, w, err_msg=f"{name} output {k}")


@pytest.mark.parametrize("precision", [None, DType.FLOAT16, DType.BFLOAT16],
                         ids=["fp32", "fp16", "bf16"])
@pytest.mark.parametrize("name", sorted(FLOAT_CASES))
def test_float_data_exact_at_every_precision(name: str, precision: DType | None) -> None:
    got, want = _run_both(name, precision)
    for k, (g, w) in enumerate(zip(got, want)):
        assert g.dtype == w.dtype and g.shape == w.shape, (name, k)
        np.testing.assert_array_equal(g, w, err_msg=f"{name} output {k}")


@pytest.mark.parametrize("name", sorted(TOLERANT_CASES))
def test_float_math(name: str) -> None:
    got, want = _run_both(name, None)
    bound = TOLERANT_CASES[name][1]
    for k, (g, w) in enumerate(zip(got, want)):
        assert relative_error(g, w) < bound, (name, k, relative_error(g, w))


def test_gather_index_out_of_range_raises_at_sync_and_recovers() -> None:
    model, feeds = gather_out_of_range()
    data = build(model, BuildOptions(autotune=False, target="cuda"))
    gpu = LoadedModule(data, CudaBackend())
    try:
        [y] = gpu.run([feeds["x"], feeds["i"]])  # -4 is the first row
        np.testing.assert_array_equal(y, feeds["x"][[1, 0]])
        with pytest.raises(KernelError, match=r"index 4 is out of range for axis 0 of size 4"):
            gpu.run([feeds["x"], np.array([4, 0], np.int64)])
        with pytest.raises(KernelError, match=r"index -5 is out of range"):
            gpu.run([feeds["x"], np.array([2, -5], np.int64)])
        [y] = gpu.run([feeds["x"], np.array([3, 2], np.int64)])  # the flag was reset
        np.testing.assert_array_equal(y, feeds["x"][[3, 2]])
    finally:
        gpu.bound.close()
    with pytest.raises(KernelError, match="out of range"):  # the CPU backend agrees
        LoadedModule(data).run([feeds["x"], np.array([4, 0], np.int64)])


def test_sequence_lens_out_of_range_raises_at_sync() -> None:
    model, feeds = EXACT_CASES["reverse_sequence"]()
    data = build(model, BuildOptions(autotune=False, target="cuda"))
    gpu = LoadedModule(data, CudaBackend())
    try:
        bad = dict(feeds, lens=np.array([7, 8, 0, 1], np.int64))
        with pytest.raises(KernelError, match=r"index 8 is out of range for sequence_lens of "
                                              r"size 7 \(valid: 0\.\.7\)"):
            gpu.run([bad[i.name] for i in model.graph.input])
        got = gpu.run([feeds[i.name] for i in model.graph.input])
    finally:
        gpu.bound.close()
    want = LoadedModule(data).run([feeds[i.name] for i in model.graph.input])
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
