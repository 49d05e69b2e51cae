"""``--device=cuda`` for the tools on a GPU: ``pydla bench`` (trtexec's summary from CUDA
events, the per-layer profile from the profiled graph), ``compare`` against onnxruntime at
fp32 and fp16, ``run``, and a loadable whose layers lack a CUDA kernel."""

from __future__ import annotations

import json
import re

import numpy as np
import onnx
import pytest

from tests.gpu.gpu import require_gpu

cp = require_gpu()

from pydla.loadable import read_loadable  # noqa: E402
from pydla.tools.cli import main  # noqa: E402
from tests.tools.tiny import conv_chain  # noqa: E402

QUICK = ["--warmUp=50", "--duration=0.3", "--iterations=50"]


@pytest.fixture(scope="module")
def model_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("gpu_tools") / "chain.onnx"
    onnx.save(conv_chain(), path)
    return path


def _profiling_line(out: str) -> tuple[float, float, float]:
    """(profiled GPU compute median, unprofiled median, inside the layers) in ms."""
    m = re.search(r"GPU Compute Time median ([\d.e+-]+) ms \(([\d.e+-]+) ms unprofiled\), "
                  r"inside the layers ([\d.e+-]+) ms", out)
    assert m, out
    return float(m[1]), float(m[2]), float(m[3])


def test_bench_prints_the_summary_and_a_per_layer_gpu_profile(model_path, tmp_path, capsys):
    engine, profile_path = tmp_path / "chain.bin", tmp_path / "profile.json"
    rc = main(["bench", f"--onnx={model_path}", "--device=cuda", f"--saveEngine={engine}",
               *QUICK, "--dumpProfile", f"--exportProfile={profile_path}",
               f"--exportTimes={tmp_path / 'times.json'}"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert "device cuda:0" in out
    throughput = float(re.search(r"Throughput: ([\d.e+-]+) qps", out)[1])
    assert throughput > 0
    for metric in ("Latency", "Enqueue Time", "H2D Latency", "GPU Compute Time", "D2H Latency"):
        line = next(x for x in out.splitlines() if f"] {metric}: " in x)
        assert "median = " in line and "percentile(99%)" in line, line
    assert "Total GPU Compute Time:" in out
    program = read_loadable(engine.read_bytes())
    assert program.target["backend"] == "cuda"  # --device=cuda built for the GPU
    profile = json.loads(profile_path.read_text())
    assert profile[0]["count"] >= 1
    rows = profile[1:]
    assert [r["name"] for r in rows] == [lay.name for lay in program.layers]
    for r in rows:
        assert set(r) == {"name", "timeMs", "averageMs", "medianMs", "percentage"}
        assert r["averageMs"] > 0 and r["timeMs"] > 0, r
    assert sum(r["percentage"] for r in rows) == pytest.approx(100.0)
    profiled, unprofiled, inside = _profiling_line(out)
    # The layers' times add up to the profiled task's time, less its copies and stamps (on a
    # model this small, launch-bound, about 30 % of it on the H200).
    assert sum(r["medianMs"] for r in rows) == pytest.approx(inside, rel=0.25)
    assert 0.1 * profiled < inside <= profiled
    assert 0 < unprofiled <= profiled * 1.5
    assert "=== Profile (" in out and any(x.endswith("   Total") for x in out.splitlines())
    times = json.loads((tmp_path / "times.json").read_text())
    assert times and all(t["computeMs"] > 0 and t["latencyMs"] >= t["computeMs"]
                         for t in times)


def test_bench_without_a_profile_times_the_plain_graph(model_path, tmp_path, capsys):
    engine = tmp_path / "chain.bin"
    assert main(["bench", f"--onnx={model_path}", "--device=cuda:0", f"--saveEngine={engine}",
                 "--infStreams=2", *QUICK, f"--exportOutput={tmp_path / 'y.npz'}"]) == 0
    out = capsys.readouterr().out
    assert "2 stream(s), device cuda:0" in out and "Profiling run" not in out
    from tests.oracle import run_ort

    x = np.random.default_rng(0).standard_normal((1, 3, 8, 8)).astype(np.float32)
    want = run_ort(conv_chain(), {"x": x})[0]
    with np.load(tmp_path / "y.npz") as z:
        got = z["y"]
    # cuDNN may use TF32 for float32 convolutions
    np.testing.assert_allclose(got, want, rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("flags", [["--noTF32"], ["--atol=1e-2", "--rtol=1e-2"],
                                   ["--fp16", "--atol=2e-2", "--rtol=2e-2"],
                                   ["--autocast=fp16", "--atol=2e-2", "--rtol=2e-2"]],
                         ids=["fp32-noTF32", "fp32", "fp16", "autocast-fp16"])
def test_compare_on_the_gpu_passes(model_path, flags, capsys):
    rc = main(["compare", str(model_path), "--device=cuda", *flags])
    out, err = capsys.readouterr()
    assert rc == 0, out + err
    assert "Comparing pydla on cuda:0" in out and "PASSED | all 1 outputs match" in out


def test_compare_names_a_gpu_difference_beyond_tolerance(model_path, capsys):
    rc = main(["compare", str(model_path), "--device=cuda", "--autocast=fp16", "--atol=1e-7",
               "--rtol=1e-7"])
    assert rc == 1
    assert "FAILED | 1 of 1 outputs differ beyond tolerance" in capsys.readouterr().out


def test_run_on_the_gpu_matches_the_cpu(model_path, tmp_path, capsys):
    engine = tmp_path / "chain.bin"
    assert main(["build", f"--onnx={model_path}", f"--saveEngine={engine}"]) == 0
    outs = {}
    for device in ("cpu", "cuda"):
        path = tmp_path / f"{device}.npz"
        assert main(["run", f"--loadEngine={engine}", f"--device={device}",
                     f"--exportOutput={path}"]) == 0, capsys.readouterr().err
        with np.load(path) as z:
            outs[device] = z["y"]
    np.testing.assert_allclose(outs["cuda"], outs["cpu"], rtol=1e-2, atol=1e-2)


def test_a_layer_without_a_cuda_kernel_is_named(model_path, tmp_path, monkeypatch, capsys):
    from pydla.backends.cuda import CudaBackend

    engine = tmp_path / "chain.bin"
    assert main(["build", f"--onnx={model_path}", f"--saveEngine={engine}"]) == 0
    convs = [lay.name for lay in read_loadable(engine.read_bytes()).layers if lay.op == "Conv"]
    assert convs
    ops = CudaBackend().supported_ops() - {"Conv"}
    monkeypatch.setattr(CudaBackend, "supported_ops", lambda self: ops)
    capsys.readouterr()
    assert main(["bench", f"--loadEngine={engine}", "--device=cuda", *QUICK]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert f"{len(convs)} layer(s) have no CUDA kernel" in err
    assert all(f"{name!r} (Conv)" in err for name in convs), err


def test_a_gpu_number_past_the_last_is_refused(model_path, capsys):
    count = int(cp.cuda.runtime.getDeviceCount())
    assert main(["compare", str(model_path), f"--device=cuda:{count}"]) == 1
    err = capsys.readouterr().err
    assert f"this machine has {count} CUDA GPU(s)" in err and "Traceback" not in err
