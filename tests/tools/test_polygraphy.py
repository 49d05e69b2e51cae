"""pydla as a Polygraphy runner: ``polygraphy run model.onnx --pydla --onnxrt`` passes (the
plugin comes through the ``polygraphy.run.plugins`` entry point), and ``PydlaRunner``
works in Polygraphy's Python API."""

from __future__ import annotations

import os
import shutil
import subprocess

import onnx
import pytest

pytest.importorskip("polygraphy")
pytest.importorskip("onnxruntime")

from tests.runtime.test_session import _conv_model  # noqa: E402


def test_polygraphy_run_pydla_against_onnxrt(tmp_path):
    if shutil.which("polygraphy") is None:
        pytest.skip("the polygraphy command is not on PATH")
    path = tmp_path / "m.onnx"
    onnx.save(_conv_model(batch=2), path)
    env_cache = {"PYDLA_SESSION_CACHE": str(tmp_path / "cache")}
    result = subprocess.run(["polygraphy", "run", str(path), "--pydla", "--onnxrt"],
                            capture_output=True, text=True, timeout=600,
                            env={**os.environ, **env_cache})
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-3000:]
    assert "pydla-runner" in out and "PASSED" in out


def test_runner_in_the_python_api(tmp_path, monkeypatch):
    from polygraphy.backend.onnxrt import OnnxrtRunner, SessionFromOnnx
    from polygraphy.comparator import Comparator

    from pydla.polygraphy import PydlaRunner

    monkeypatch.setenv("PYDLA_SESSION_CACHE", str(tmp_path))
    model = _conv_model().SerializeToString()
    runners = [PydlaRunner(model), OnnxrtRunner(SessionFromOnnx(model))]
    results = Comparator.run(runners)
    assert bool(Comparator.compare_accuracy(results))
    meta = PydlaRunner(model)
    with meta:
        inputs = meta.get_input_metadata()
    assert list(inputs.keys()) == ["x"] and inputs["x"].shape[1:] == [3, 8, 8]
