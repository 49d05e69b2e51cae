"""``--device`` for bench, run and compare without a GPU: parsing, the one-line refusal
where no CUDA device is available (before anything is built), the layers a device has no
kernel for, and the GPU profile's conversion from task statistics to trtexec's JSON."""

from __future__ import annotations

import argparse
import sys
import time
import types

import numpy as np
import pytest

from pydla.engine.stats import Recorder, buffer_size, decode_task_statistics
from pydla.errors import DeviceError, PydlaError
from pydla.loadable import read_loadable
from pydla.tools import device_arg
from pydla.tools.benchloop import BenchResult
from pydla.tools.benchreport import layer_profile, profile_lines, summary_lines
from pydla.tools.cli import main
from pydla.tools.device_arg import Device, check_kernels, parse_device, resolve_device
from pydla.tools.flags import FlagError
from pydla.tools.profiling import InferenceTrace, layer_times_ns
from tests.tools.tiny import conv_chain, save_model


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    return save_model(conv_chain(), tmp_path_factory.mktemp("device"))


@pytest.mark.parametrize("text, want", [("cpu", Device("cpu")), ("CPU", Device("cpu")),
                                        ("cuda", Device("cuda", 0)),
                                        ("cuda:0", Device("cuda", 0)),
                                        ("cuda:3", Device("cuda", 3)),
                                        ("2", Device("cuda", 2))])
def test_device_names(text, want):
    assert parse_device(text) == want
    assert str(want) in ("cpu", f"cuda:{want.ordinal}")


@pytest.mark.parametrize("text", ["gpu", "cuda:", "cuda:-1", "cuda:x", "tpu", "-1", ""])
def test_bad_device_names_are_refused(text):
    with pytest.raises(FlagError, match="expected cpu, cuda or cuda:N"):
        parse_device(text)


@pytest.mark.parametrize("command", ["bench", "run", "compare"])
def test_every_running_command_documents_the_flag(command, capsys):
    with pytest.raises(SystemExit):
        main([command, "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--device DEVICE" in text and "cuda:N" in text and "default" in text


def _no_cupy(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "cupy", None)  # import cupy → ImportError


@pytest.mark.parametrize("command", ["bench", "run", "compare"])
def test_no_cuda_device_fails_at_once_in_one_line(command, engine, tmp_path, monkeypatch,
                                                  capsys):
    _no_cupy(monkeypatch)
    onnx_path, bin_path = engine
    saved = tmp_path / "built.bin"
    argv = {"bench": ["bench", f"--onnx={onnx_path}", f"--saveEngine={saved}"],
            "run": ["run", f"--loadEngine={bin_path}"],
            "compare": ["compare", str(onnx_path)]}[command]
    started = time.perf_counter()
    assert main([*argv, "--device=cuda"]) == 1
    assert time.perf_counter() - started < 5  # nothing was built or loaded
    out, err = capsys.readouterr()
    assert err == (f"pydla {command}: error: --device=cuda: no CUDA device is available here "
                   "(CuPy is not installed (pip install 'pydla[cuda]')); run on "
                   "--device=cpu\n")
    assert not saved.exists() and "Traceback" not in out


def _fake_cupy(monkeypatch, count: int | Exception) -> None:
    def get_count() -> int:
        if isinstance(count, Exception):
            raise count
        return count

    runtime = types.SimpleNamespace(getDeviceCount=get_count)
    monkeypatch.setitem(sys.modules, "cupy", types.SimpleNamespace(
        cuda=types.SimpleNamespace(runtime=runtime)))
    monkeypatch.setitem(sys.modules, "cuda", types.ModuleType("cuda"))
    monkeypatch.setitem(sys.modules, "cuda.bindings", types.ModuleType("cuda.bindings"))


def test_a_driver_without_a_device_is_named(monkeypatch):
    _fake_cupy(monkeypatch, RuntimeError("cudaErrorInsufficientDriver: CUDA driver version "
                                         "is insufficient"))
    args = argparse.Namespace(device="cuda:0", target="cpu")
    with pytest.raises(DeviceError, match=r"--device=cuda:0: no CUDA device is available here "
                       r"\(the CUDA driver is not usable: cudaErrorInsufficientDriver"):
        resolve_device(args)
    _fake_cupy(monkeypatch, 0)
    with pytest.raises(DeviceError, match="the CUDA driver shows no GPU"):
        resolve_device(args)


def test_a_gpu_run_builds_for_the_gpu_and_counts_gpus(monkeypatch):
    _fake_cupy(monkeypatch, 2)
    args = argparse.Namespace(device="1", target="cpu")
    assert resolve_device(args) == Device("cuda", 1)
    assert args.target == "cuda"  # --onnx builds are tuned for the GPU they run on
    with pytest.raises(DeviceError, match=r"this machine has 2 CUDA GPU\(s\), cuda:0 to "
                                          r"cuda:1"):
        resolve_device(argparse.Namespace(device="cuda:2", target="cpu"))
    cpu = argparse.Namespace(device="cpu", target="cpu")
    assert resolve_device(cpu) == Device("cpu") and cpu.target == "cpu"


def test_layerwise_is_refused_on_the_gpu(engine, monkeypatch, capsys):
    _fake_cupy(monkeypatch, 1)
    assert main(["compare", str(engine[0]), "--device=cuda", "--layerwise"]) == 1
    err = capsys.readouterr().err
    assert "--layerwise reads every layer's output from the CPU device's arena" in err


def test_layers_without_a_kernel_are_all_named(engine):
    program = read_loadable(engine[1].read_bytes())
    ops = {lay.op for lay in program.layers}
    check_kernels(program, ops, Device("cuda"))  # every op covered: nothing raised
    convs = [lay.name for lay in program.layers if lay.op == "Conv"]
    assert len(convs) == 3
    with pytest.raises(DeviceError) as e:
        check_kernels(program, ops - {"Conv"}, Device("cuda", 1))
    text = str(e.value)
    assert text.startswith("cuda:1: 3 layer(s) have no CUDA kernel: ")
    assert ", ".join(f"{n!r} (Conv)" for n in convs) in text and "--device=cpu" in text


def _statistics(names: list[str], spans: list[tuple[int, int]]) -> np.ndarray:
    """A statistics buffer as the GPU's profiled graph writes it."""
    rec = Recorder(names)
    for i, (start, end) in enumerate(spans):
        rec.layer(i, start, end)
    rec.start_ns, rec.end_ns = spans[0][0] - 500, spans[-1][1] + 500
    buf = np.zeros(buffer_size(len(names)), np.uint8)
    rec.write(buf, 0)
    return buf


def test_gpu_profile_json_from_task_statistics():
    names = ["conv1", "relu1", "gemm"]
    # Two queries: layer times (ns) 1000/250/4000, then 3000/250/2000.
    runs = [[(10_000, 11_000), (11_100, 11_350), (11_400, 15_400)],
            [(50_000, 53_000), (53_100, 53_350), (53_400, 55_400)]]
    traces = []
    for k, spans in enumerate(runs):
        layer_ns = layer_times_ns(decode_task_statistics(_statistics(names, spans)), 3)
        traces.append(InferenceTrace(0, k * 100_000, k * 100_000 + 10, k * 100_000 + 9_000,
                                     k * 100_000 + 9_100, layer_ns, host_enqueue_ns=7_000))
    profile = layer_profile(traces, names)
    assert profile[0] == {"count": 2}
    assert [e["name"] for e in profile[1:]] == names
    assert [e["averageMs"] for e in profile[1:]] == pytest.approx([0.002, 0.00025, 0.003])
    assert [e["timeMs"] for e in profile[1:]] == pytest.approx([0.004, 0.0005, 0.006])
    assert [e["medianMs"] for e in profile[1:]] == pytest.approx([0.002, 0.00025, 0.003])
    assert sum(e["percentage"] for e in profile[1:]) == pytest.approx(100.0)
    assert all(set(e) == {"name", "timeMs", "averageMs", "medianMs", "percentage"}
               for e in profile[1:])
    assert profile_lines(profile, traces)[-1].split()[-1] == "Total"
    assert traces[0].enqueue_ns == 7_000  # measured apart on the GPU, not from layer times


def test_statistics_of_another_module_are_refused():
    stats = decode_task_statistics(_statistics(["a", "b"], [(1000, 2000), (3000, 4000)]))
    with pytest.raises(PydlaError, match="cover 2 of 2 layers; the module has 3"):
        layer_times_ns(stats, 3)
    backwards = decode_task_statistics(_statistics(["a", "b"], [(1000, 2000), (4000, 3000)]))
    with pytest.raises(PydlaError, match="layer 'b' ends before it starts"):
        layer_times_ns(backwards, 2)


def test_gpu_summary_uses_trtexec_gpu_names():
    traces = [InferenceTrace(0, i * 1000, i * 1000 + 10, i * 1000 + 110, i * 1000 + 120,
                             np.zeros(2, np.int64), host_enqueue_ns=500) for i in range(20)]
    lines, warnings, stats = summary_lines(BenchResult(timed=traces), [90], gpu=True)
    assert any(x.startswith("GPU Compute Time: ") for x in lines)
    assert "Total GPU Compute Time: 2e-06 s" in lines
    assert stats["GPU Compute Time"].median == pytest.approx(0.0001)
    assert stats["Enqueue Time"].median == pytest.approx(0.0005)
    assert any("bound by Enqueue Time rather than GPU Compute" in w for w in warnings)
    cpu_lines, _, _ = summary_lines(BenchResult(timed=traces), [90])
    assert any(x.startswith("Compute Time: ") for x in cpu_lines)


def test_the_cpu_device_loads_on_the_cpu_backend(engine):
    module = device_arg.load_module(engine[1].read_bytes(), Device("cpu"))
    assert type(module.bound).__module__.startswith("pydla.backends.cpu")
