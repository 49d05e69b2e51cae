"""``pydla bench``: trtexec's summary, its agreement with the exported raw times, the profile."""

import json
import re

import numpy as np
import onnx
import pytest
from onnx import helper

from pydla.builder import BuildOptions, build
from pydla.engine import LoadedModule
from pydla.plan.lower import IOFormat
from pydla.tools.benchloop import BenchResult
from pydla.tools.benchreport import summary_lines
from pydla.tools.cli import main
from pydla.tools.perfstats import median, percentile, summarize
from pydla.tools.profiling import InferenceTrace, StagedRunner
from tests.oracle import make_model, run_ort
from tests.tools.tiny import conv_chain, save_model

METRICS = {"Latency": "latencyMs", "Enqueue Time": "enqueueMs", "H2D Latency": "h2dMs",
           "Compute Time": "computeMs", "D2H Latency": "d2hMs"}


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    return save_model(conv_chain(), tmp_path_factory.mktemp("bench"))


def _trtexec_percentile(values, p):
    """Written out again from trtexec's sampleReporting.cpp, independently of pydla's."""
    s = sorted(values)
    return s[max(len(s) - 1 - int((1 - p / 100) * len(s)), 0)]


def _printed(out: str, metric: str) -> dict[str, float]:
    line = next(x for x in out.splitlines() if f"] {metric}: " in x)
    return {k: float(v) for k, v in re.findall(r"(\w+|percentile\([\d.]+%\)) = ([\d.e+-]+)",
                                                line)}


def test_percentiles_agree_with_exported_times(engine, tmp_path, capsys):
    _, bin_path = engine
    times, prof = tmp_path / "times.json", tmp_path / "profile.json"
    rc = main(["bench", f"--loadEngine={bin_path}", "--iterations=41", "--warmUp=0",
               "--duration=0", "--percentile=50,90,99", f"--exportTimes={times}",
               f"--exportProfile={prof}", "--dumpProfile"])
    out = capsys.readouterr().out
    assert rc == 0, out
    records = json.loads(times.read_text())
    assert len(records) == 41
    for metric, key in METRICS.items():
        values = [r[key] for r in records]
        printed = _printed(out, metric)
        want = {"min": min(values), "max": max(values), "mean": float(np.mean(values)),
                "median": float(np.median(values))}
        want.update({f"percentile({p}%)": _trtexec_percentile(values, p) for p in (50, 90, 99)})
        assert printed.keys() == want.keys()
        for k, v in want.items():
            assert printed[k] == pytest.approx(v, rel=1e-5, abs=1e-9), (metric, k)
    for r in records:  # Latency is H2D + Compute + D2H, as in trtexec
        assert r["latencyMs"] == pytest.approx(r["h2dMs"] + r["computeMs"] + r["d2hMs"])
        assert r["endMs"] - r["startMs"] == pytest.approx(r["latencyMs"])
    wall_s = (max(r["endMs"] for r in records) - min(r["startMs"] for r in records)) / 1e3
    qps = float(re.search(r"Throughput: ([\d.e+-]+) qps", out).group(1))
    assert qps == pytest.approx(41 / wall_s, rel=1e-4)
    assert "Total Host Walltime" in out and "Total Compute Time" in out


def test_profile_lists_every_layer(engine, tmp_path, capsys):
    _, bin_path = engine
    prof = tmp_path / "profile.json"
    assert main(["bench", f"--loadEngine={bin_path}", "--iterations=12", "--warmUp=0",
                 "--duration=0", "--dumpProfile", f"--exportProfile={prof}"]) == 0
    out = capsys.readouterr().out
    entries = json.loads(prof.read_text())
    assert entries[0] == {"count": 12}
    layers = [lay.name for lay in LoadedModule(bin_path.read_bytes()).program.layers]
    assert [e["name"] for e in entries[1:]] == layers
    assert sum(e["percentage"] for e in entries[1:]) == pytest.approx(100)
    for e in entries[1:]:
        assert set(e) == {"name", "timeMs", "averageMs", "medianMs", "percentage"}
        assert e["averageMs"] == pytest.approx(e["timeMs"] / 12)
    assert "=== Profile (12 iterations ) ===" in out
    assert all(re.search(rf"\d\s+{name}$", out, re.M) for name in layers)


def test_streams_each_run_their_own_copy(engine, tmp_path, capsys):
    _, bin_path = engine
    times = tmp_path / "times.json"
    assert main(["bench", f"--loadEngine={bin_path}", "--infStreams=2", "--iterations=20",
                 "--warmUp=5", "--duration=0", f"--exportTimes={times}", "--verbose",
                 "--avgRuns=5"]) == 0
    out = capsys.readouterr().out
    records = json.loads(times.read_text())
    # As in trtexec, every stream runs the iterations (duration 0 adds none).
    assert sorted(r["stream"] for r in records) == [0] * 20 + [1] * 20
    assert "2 stream(s)" in out and "Average on 5 runs - Compute latency" in out
    assert "Explanations of the performance metrics" in out


def test_build_first_and_export_outputs(tmp_path, capsys):
    model = make_model([helper.make_node("MatMul", ["x", "w"], ["y"], name="fc")],
                       {"x": (np.float32, ["N", 4])}, ["y"],
                       {"w": np.arange(12, dtype=np.float32).reshape(4, 3)})
    onnx.save(model, tmp_path / "m.onnx")
    x = np.random.default_rng(3).standard_normal((2, 4)).astype(np.float32)
    np.savez(tmp_path / "in.npz", x=x)
    for name in ("out.npz", "out.json"):
        rc = main(["bench", f"--onnx={tmp_path / 'm.onnx'}", "--shapes=x:2x4", "--warmUp=0",
                   "--duration=0", "--iterations=2", f"--loadInputs={tmp_path / 'in.npz'}",
                   f"--exportOutput={tmp_path / name}", f"--saveEngine={tmp_path / 'm.bin'}"])
        assert rc == 0, capsys.readouterr().err
    want = run_ort(model, {"x": x})[0]
    with np.load(tmp_path / "out.npz") as z:
        np.testing.assert_allclose(z["y"], want, rtol=1e-6)
    (entry,) = json.loads((tmp_path / "out.json").read_text())
    assert entry["name"] == "y" and entry["dimensions"] == "2x3"
    np.testing.assert_allclose(entry["values"], want.ravel(), rtol=1e-6)
    assert (tmp_path / "m.bin").exists()


def test_staged_runner_computes_what_run_buffers_does():
    """The bench splits run_buffers into H2D / compute / D2H; the result must not change."""
    model = make_model([helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
                        helper.make_node("Relu", ["c"], ["y"])],
                       {"x": (np.float16, [1, 3, 4, 4])}, ["y"],
                       {"w": np.random.default_rng(0).standard_normal((5, 3, 3, 3))
                        .astype(np.float16)})
    data = build(model, BuildOptions(input_formats=[IOFormat(None, "chw16")],
                                     output_formats=[IOFormat(None, "chw16")]))
    module = LoadedModule(data)
    x = np.random.default_rng(1).standard_normal((1, 3, 4, 4)).astype(np.float16)
    runner = StagedRunner(module)
    runner.set_inputs([x])
    trace = runner.run()
    np.testing.assert_array_equal(runner.outputs()[0], module.run([x])[0])
    assert trace.start_ns <= trace.h2d_end_ns <= trace.compute_end_ns <= trace.end_ns
    assert trace.layer_ns.shape == (len(module.program.layers),)
    assert 0 <= trace.layer_ns.sum() <= trace.compute_ns


def _trace(h2d: int, layers: list[int], overhead: int, d2h: int, at: int = 0) -> InferenceTrace:
    compute = sum(layers) + overhead
    return InferenceTrace(0, at, at + h2d, at + h2d + compute, at + h2d + compute + d2h,
                          np.array(layers, np.int64))


@pytest.mark.parametrize("traces,expected", [
    ([_trace(10, [100], 1000, 10, i * 3000) for i in range(5)], ["Enqueue Time"]),
    ([_trace(5000, [1000], 0, 10, i * 7000) for i in range(5)], ["host-to-device"]),
    ([_trace(10, [1000], 0, 5000, i * 7000) for i in range(5)], ["device-to-host"]),
    ([_trace(10, [v], 0, 10, i * 9000) for i, v in enumerate([1000, 8000, 1000, 8000])],
     ["unstable"]),
    ([_trace(10, [1000], 10, 10, i * 2000) for i in range(5)], []),
])
def test_warnings(traces, expected):
    _, warnings, _ = summary_lines(BenchResult(timed=traces), [90])
    heads = [w for w in warnings if w.startswith("*")]
    assert len(heads) == len(expected), warnings
    for head, word in zip(heads, expected):
        assert word in head


def test_trtexec_statistics():
    values = [float(v) for v in range(1, 11)]
    # n = 10: p90 excludes int(0.1 * 10) = 0 (float rounding) → the largest value, as trtexec.
    assert percentile(values, 90) == _trtexec_percentile(values, 90)
    assert percentile(values, 90) == 10.0
    assert percentile(values, 50) == 5.0 and percentile(values, 0) == 1.0
    assert median(values) == 5.5 and median(values[:9]) == 5.0
    s = summarize([2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0], [95])
    assert (s.min, s.max, s.mean, s.median) == (2.0, 9.0, 5.0, 4.5)
    assert s.cv == pytest.approx(40.0)
    assert "percentile(95%) = 9 ms" in s.format()


@pytest.mark.parametrize("flags,message", [
    (["--iterations=0"], "--iterations"),
    (["--percentile=101"], "--percentile"),
    (["--onnx=x.onnx"], "exactly one"),
])
def test_flag_errors(engine, capsys, flags, message):
    _, bin_path = engine
    assert main(["bench", f"--loadEngine={bin_path}", *flags]) == 1
    assert message in capsys.readouterr().err
