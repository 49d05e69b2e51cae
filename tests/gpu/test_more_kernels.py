"""The CUDA kernels of Resize, LayerNormalization, BatchNormalization, Reduce*, MatMul,
Gather, Slice, Split, LSTM, ConvTranspose, strided Softmax and reshapes into channels-last
tensors, each against the CPU backend (fp32 within 1e-2 relative error, fp16 cosine ≥
0.999, bf16 ≥ 0.995)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.gpu.gpu import cosine, relative_error, require_gpu

cp = require_gpu()

from pydla.backends.cuda import CudaBackend  # noqa: E402
from pydla.builder import BuildOptions, build  # noqa: E402
from pydla.dtypes import DType  # noqa: E402
from pydla.engine.module import LoadedModule  # noqa: E402
from tests.gpu.more_cases import CASES  # noqa: E402


def run_both(model, feeds, options: BuildOptions):  # noqa: ANN001, ANN201
    """(GPU outputs, CPU outputs, the GPU program's summary) of one loadable."""
    data = build(model, options)
    inputs = [feeds[i.name] for i in model.graph.input]
    want = LoadedModule(data).run(inputs)
    gpu = LoadedModule(data, CudaBackend())
    got = gpu.run(inputs)
    again = gpu.run(inputs)  # the graph replays to the same result
    for a, b in zip(got, again):
        np.testing.assert_array_equal(a, b)
    summary = gpu.bound.summary()
    gpu.bound.close()
    return got, want, summary


def check(name: str, got, want, precision: DType | None) -> None:  # noqa: ANN001
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape, (name, g.shape, w.shape)
        if precision is None:
            assert relative_error(g, w) < 1e-2, (name, relative_error(g, w))
        else:
            limit = 0.999 if precision is DType.FLOAT16 else 0.995
            assert cosine(g, w) >= limit, (name, cosine(g, w))


@pytest.mark.parametrize("precision", [None, DType.FLOAT16, DType.BFLOAT16],
                         ids=["fp32", "fp16", "bf16"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_cpu(name, precision):
    model, feeds = CASES[name]()
    got, want, summary = run_both(model, feeds, BuildOptions(autotune=False, autocast=precision,
                                                             target="cuda"))
    check(name, got, want, precision)
    assert summary["graph_error"] is None, summary["graph_error"]
