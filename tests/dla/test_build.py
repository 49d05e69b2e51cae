"""trtexec's DLA build semantics: --useDLACore with --buildDLAStandalone (every layer on the
DLA or the build fails naming layer and rule) or --allowGPUFallback (each layer's device
recorded and shown); trtexec's refusals of bad flag combinations, one line each."""

from __future__ import annotations

import json

import onnx
import pytest

from pydla.dla import check_model
from pydla.loadable import read_loadable
from pydla.tools.cli import main
from tests.models.families import FAMILIES, resnet50

CHW16 = ["--inputIOFormats=fp16:chw16", "--outputIOFormats=fp16:chw16"]


@pytest.fixture()
def dbnet(tmp_path):  # noqa: ANN201
    model, _ = FAMILIES["dbnet"]()
    path = tmp_path / "dbnet.onnx"
    onnx.save(model, path)
    return path


def _build(tmp_path, onnx_path, *flags: str) -> int:  # noqa: ANN001
    return main(["build", f"--onnx={onnx_path}", f"--saveEngine={tmp_path / 'm.bin'}",
                 "--builderOptimizationLevel=2", *flags])


def test_standalone_fails_naming_layer_and_rule(tmp_path, dbnet, capsys):
    rc = _build(tmp_path, dbnet, "--useDLACore=0", "--buildDLAStandalone", "--autocast=fp16",
                *CHW16)
    err = capsys.readouterr().err.strip()
    assert rc == 1 and len(err.splitlines()) == 1
    first = next(v for v in check_model(dbnet).layers if not v.supported)
    assert f"layer {first.name!r}" in err and f"[{first.refusal.rule}]" in err


def test_fully_dla_model_builds_standalone(tmp_path, capsys):
    from tests.tools.test_cli import fp16_conv_model

    fp16_conv_model(tmp_path / "c.onnx")  # an FP16 conv + relu: the seed's model
    rc = _build(tmp_path, tmp_path / "c.onnx", "--useDLACore=1", "--buildDLAStandalone",
                *CHW16, f"--exportLayerInfo={tmp_path / 'l.json'}")
    assert rc == 0, capsys.readouterr().err
    dla = read_loadable((tmp_path / "m.bin").read_bytes()).build["dla"]
    assert dla["mode"] == "standalone" and dla["core"] == 1 and dla["subgraphs"] == 1
    assert dla["precision"] == "fp16"
    info = json.loads((tmp_path / "l.json").read_text())
    assert {lay["device"] for lay in info["layers"]} == {"DLA"}


def test_adjusted_model_builds_standalone(tmp_path, dbnet, capsys):
    rc = _build(tmp_path, dbnet, "--useDLACore=0", "--buildDLAStandalone", "--autocast=fp16",
                "--adjustForDLA", "--verbose", *CHW16)
    out = capsys.readouterr()
    assert rc == 0, out.err
    assert out.out.count("adjust_for_dla: ") == 3
    devices = read_loadable((tmp_path / "m.bin").read_bytes()).build["dla"]["devices"]
    assert set(devices.values()) == {"DLA"}


def test_gpu_fallback_records_devices(tmp_path, dbnet, capsys):
    rc = _build(tmp_path, dbnet, "--useDLACore=0", "--allowGPUFallback", "--autocast=fp16",
                "--dumpLayerInfo")
    out = capsys.readouterr().out
    assert rc == 0
    program = read_loadable((tmp_path / "m.bin").read_bytes())
    devices = program.build["dla"]["devices"]
    assert set(devices.values()) == {"DLA", "GPU"}
    for layer in program.layers:  # a layer holding a HardSwish cannot run on the DLA
        if any("HardSwish" in n or "HardSigmoid" in n for n in layer.fused_from):
            assert devices[layer.name] == "GPU"
    assert ", DLA)" in out and ", GPU)" in out and "DLA core 0 (gpu_fallback, fp16)" in out


def test_fp32_model_needs_a_dla_precision(tmp_path, capsys):
    model, _ = resnet50(size=32, layers=(1,))
    onnx.save(model, tmp_path / "r.onnx")
    assert _build(tmp_path, tmp_path / "r.onnx", "--useDLACore=0") == 1
    assert "[general.precision]" in capsys.readouterr().err


@pytest.mark.parametrize("flags, message", [
    (["--useDLACore=2"], "Cannot create DLA engine, 2 not available"),
    (["--useDLACore=-1"], "Cannot create DLA engine, -1 not available"),
    (["--buildDLAStandalone"], "--buildDLAStandalone needs a DLA core"),
    (["--allowGPUFallback"], "--allowGPUFallback needs a DLA core"),
    (["--useDLACore=0", "--buildDLAStandalone", "--allowGPUFallback", *CHW16],
     "GPU fallback (--allowGPUFallback) not allowed for DLA standalone mode"),
    (["--useDLACore=0", "--buildDLAStandalone"],
     "I/O formats for safe DLA capability are restricted to dla_linear, hwc4, chw16, or chw32"),
])
def test_bad_flag_combinations(tmp_path, dbnet, capsys, flags, message):
    assert _build(tmp_path, dbnet, "--autocast=fp16", *flags) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err
    assert not (tmp_path / "m.bin").exists()


def test_inspect_and_report_show_devices(tmp_path, dbnet, capsys):
    from pydla.tools.cmd_report import report_data

    assert _build(tmp_path, dbnet, "--useDLACore=0", "--allowGPUFallback",
                  "--autocast=fp16") == 0
    capsys.readouterr()
    assert main(["inspect", str(tmp_path / "m.bin")]) == 0
    out = capsys.readouterr().out
    assert ", DLA)" in out and ", GPU)" in out and "DLA core 0 (gpu_fallback" in out
    program = read_loadable((tmp_path / "m.bin").read_bytes())
    devices = {lay["name"]: lay["device"] for lay in report_data(program, None)["layers"]}
    assert devices == program.build["dla"]["devices"]
    assert main(["report", str(tmp_path / "m.bin"), f"--output={tmp_path / 'r.html'}"]) == 0
    assert '"device": "DLA"' in (tmp_path / "r.html").read_text()
