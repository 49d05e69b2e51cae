"""Fast loads: a tuned loadable loaded on the GPU it was tuned on deserializes its cuDNN
plans from the plan cache (the build's tuning filled it) and builds none; another GPU or
cuDNN, or an entry cuDNN refuses, falls back to building with a note, with the same
outputs."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest

from tests.gpu.gpu import require_gpu

cp = require_gpu()

import pydla.backends.cuda.context as context  # noqa: E402
import pydla.backends.cuda.kernels.cudnn_graphs as graphs  # noqa: E402
from pydla.backends.cuda import CudaBackend  # noqa: E402
from pydla.backends.cuda.plan_cache import encode_entry  # noqa: E402
from pydla.builder import BuildOptions, build  # noqa: E402
from pydla.dtypes import DType  # noqa: E402
from pydla.engine.module import LoadedModule  # noqa: E402
from pydla.loadable import read_loadable  # noqa: E402
from tests.models.families import resnet50  # noqa: E402

if context.cudnn_module() is None:
    pytest.skip("the cuDNN frontend is not installed", allow_module_level=True)


@pytest.fixture
def tuned(tmp_path, monkeypatch):  # noqa: ANN001, ANN201
    """A small ResNet built for cuda with a fresh plan cache; (data, input, cuDNN layers)."""
    monkeypatch.setenv("PYDLA_CUDNN_PLAN_CACHE", str(tmp_path / "plans"))
    model, feeds = resnet50(size=32, batch=2, layers=(1, 1))
    data = build(model, BuildOptions(autocast=DType.FLOAT16, target="cuda"))
    program = read_loadable(data)
    n_cudnn = sum(t.startswith("cudnn/") for t in program.target["cuda_tactics"].values())
    assert n_cudnn > 0
    assert program.build["cuda_autotune"]["env"] == context.fingerprint(0).as_dict()
    return data, feeds["input"], n_cudnn


def load(data: bytes, x: np.ndarray, **options: Any) -> tuple[dict[str, Any], np.ndarray]:
    module = LoadedModule(data, CudaBackend(**options))
    summary = module.bound.summary()
    y = module.run([x])[0]
    module.bound.close()
    return summary, y


def count_builds(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    real = graphs._build_conv_graph

    def counted(*args: Any) -> Any:
        calls.append(1)
        return real(*args)

    monkeypatch.setattr(graphs, "_build_conv_graph", counted)
    return calls


def test_load_after_tuning_builds_no_cudnn_plan(tuned, monkeypatch):
    data, x, n_cudnn = tuned
    builds = count_builds(monkeypatch)
    summary, y = load(data, x)
    assert builds == [], summary["notes"]
    plans = summary["cudnn_plans"]
    assert (plans["cached"], plans["built"], plans["rejected"]) == (n_cudnn, 0, 0)
    assert summary["timed_layers"] == 0
    assert not any("plan cache" in n or "tuned under" in n for n in summary["notes"])
    built, y_built = load(data, x, plan_cache=False)
    assert len(builds) == n_cudnn and built["cudnn_plans"]["built"] == n_cudnn
    np.testing.assert_array_equal(y, y_built)  # (test_tactics_gpu compares with the CPU)


def test_foreign_gpu_or_cudnn_builds_plans_with_a_note(tuned, monkeypatch):
    data, x, n_cudnn = tuned
    _, want = load(data, x)
    here = context.fingerprint(0)
    foreign = dataclasses.replace(here, gpu="NVIDIA H100 80GB HBM3", cudnn=here.cudnn - 1)
    monkeypatch.setattr(context, "fingerprint", lambda ordinal: foreign)
    builds = count_builds(monkeypatch)
    summary, y = load(data, x)
    assert len(builds) == n_cudnn and summary["cudnn_plans"]["cached"] == 0
    [note] = [n for n in summary["notes"] if "tuned under another GPU" in n]
    assert f"gpu {here.gpu} (here NVIDIA H100 80GB HBM3)" in note
    assert f"cudnn {here.cudnn} (here {here.cudnn - 1})" in note
    np.testing.assert_array_equal(y, want)
    again, y = load(data, x)  # this "GPU" has its own entries now
    assert again["cudnn_plans"]["built"] == 0 and len(builds) == n_cudnn
    assert not any("tuned under" in n for n in again["notes"])
    np.testing.assert_array_equal(y, want)


def test_entries_cudnn_refuses_are_rebuilt(tuned, monkeypatch, tmp_path):
    data, x, n_cudnn = tuned
    _, want = load(data, x)
    entries = list((tmp_path / "plans").glob("*.plan"))
    assert len(entries) >= n_cudnn
    for k, path in enumerate(entries):  # well-formed entries, payloads that are no plan
        payload = [b"", b"\x00not a plan", path.read_bytes()[100:]][k % 3]
        path.write_bytes(encode_entry(bytes.fromhex(path.stem), payload))
    summary, y = load(data, x)
    plans = summary["cudnn_plans"]
    assert plans["rejected"] == plans["built"] == n_cudnn and plans["cached"] == 0
    assert sum("refused by cuDNN" in n for n in summary["notes"]) == n_cudnn
    np.testing.assert_array_equal(y, want)
    again, _ = load(data, x)  # the rebuilt plans were written back
    assert again["cudnn_plans"]["cached"] == n_cudnn
