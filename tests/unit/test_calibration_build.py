"""``pydla build --int8`` end to end on a small synthetic CNN: calibration against held-out
inputs, the TensorRT cache written and read back (and a hand-written one), the layer info's
reasons, the command line and its errors."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper

from pydla.builder import BuildOptions, build
from pydla.engine import LoadedModule
from pydla.errors import CalibrationError
from pydla.loadable import read_loadable
from pydla.quantization import Int8Options
from pydla.tools.cli import main
from pydla.tools.layerinfo import layer_info
from tests.oracle import make_model, run_ort

SHAPE = (1, 3, 16, 16)


def small_cnn() -> onnx.ModelProto:
    """conv+bn+relu → depthwise+relu → 1x1 → residual Add+relu → strided conv+relu → GAP →
    Gemm: the layer kinds of a mobile classifier."""
    rng = np.random.default_rng(0)
    w: dict[str, np.ndarray] = {}

    def conv(name: str, x: str, y: str, cin: int, cout: int, k: int, stride: int = 1,
             group: int = 1) -> onnx.NodeProto:
        fan_in = cin // group * k * k
        w[f"{name}_w"] = (rng.standard_normal((cout, cin // group, k, k))
                          * (2.0 / fan_in) ** 0.5).astype(np.float32)
        w[f"{name}_b"] = (rng.standard_normal(cout) * 0.1).astype(np.float32)
        return helper.make_node("Conv", [x, f"{name}_w", f"{name}_b"], [y], pads=[k // 2] * 4,
                                strides=[stride] * 2, group=group, name=name)

    w["bn_s"] = rng.uniform(0.5, 1.5, 16).astype(np.float32)
    w["bn_b"] = (rng.standard_normal(16) * 0.1).astype(np.float32)
    w["bn_m"] = (rng.standard_normal(16) * 0.1).astype(np.float32)
    w["bn_v"] = rng.uniform(0.5, 1.5, 16).astype(np.float32)
    w["fc_w"] = (rng.standard_normal((10, 32)) * 0.3).astype(np.float32)
    w["fc_b"] = (rng.standard_normal(10) * 0.1).astype(np.float32)
    nodes = [
        conv("conv1", "x", "c1", 3, 16, 3),
        helper.make_node("BatchNormalization", ["c1", "bn_s", "bn_b", "bn_m", "bn_v"], ["n1"],
                         name="bn1"),
        helper.make_node("Relu", ["n1"], ["r1"], name="relu1"),
        conv("dw2", "r1", "c2", 16, 16, 3, group=16),
        helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
        conv("pw2", "r2", "c3", 16, 16, 1),
        helper.make_node("Add", ["c3", "r1"], ["a3"], name="add3"),
        helper.make_node("Relu", ["a3"], ["r3"], name="relu3"),
        conv("conv4", "r3", "c4", 16, 32, 3, stride=2),
        helper.make_node("Relu", ["c4"], ["r4"], name="relu4"),
        helper.make_node("GlobalAveragePool", ["r4"], ["g"], name="gap"),
        helper.make_node("Flatten", ["g"], ["f"], name="flat"),
        helper.make_node("Gemm", ["f", "fc_w", "fc_b"], ["y"], transB=1, name="fc"),
    ]
    return make_model(nodes, {"x": (np.float32, SHAPE)}, ["y"], w)


def samples(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, *SHAPE)).astype(np.float32)


def cosines(engine: bytes, inputs: np.ndarray) -> np.ndarray:
    """Cosine of the engine's output against onnxruntime running the float model (the
    fp32 reference; a float pydla engine would first compile its fast kernels)."""
    module = LoadedModule(engine)
    out = []
    for x in inputs:
        u, v = run_ort(small_cnn(), {"x": x})[0].ravel(), module.run({"x": x})[0].ravel()
        out.append(float(u @ v / np.linalg.norm(u) / np.linalg.norm(v)))
    return np.array(out)


FAST = {"autotune": False}  # kernels by priority: the test is about numbers, not speed


@pytest.fixture(scope="module")
def calibrated(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, bytes]:
    folder = tmp_path_factory.mktemp("int8")
    np.savez(folder / "calib.npz", x=samples(24, 1))
    int8 = build(small_cnn(), BuildOptions(**FAST, int8=Int8Options(
        calib_data=str(folder / "calib.npz"), cache=str(folder / "calib.cache"),
        progress=False)))
    return folder, int8


def test_int8_agrees_with_fp32_on_held_out_inputs(calibrated: tuple[Path, bytes]) -> None:
    _, int8 = calibrated
    cos = cosines(int8, samples(8, 2))
    assert cos.min() >= 0.99, cos
    info = layer_info(read_loadable(int8))
    quantized = [lay for lay in info["layers"] if lay["type"] in ("QConv", "QGemm")]
    assert {n for lay in quantized for n in lay["fused_from"]} >= {"conv1", "dw2", "pw2",
                                                                   "conv4"}
    reasons = {lay["name"]: lay.get("precision_reason", "") for lay in info["layers"]}
    # the classifier's last Gemm is a head: float unless named (policy.HEAD_REASON)
    assert any(r.startswith("fp32: a head:") for r in reasons.values()), reasons
    assert any(r.startswith("int8: input 'x' calibrated to +-") for r in reasons.values())
    assert any(r == "fp32: no int8 kernel for GlobalAveragePool" for r in reasons.values())


def test_the_cache_is_tensorrts_and_reading_it_skips_calibration(
        calibrated: tuple[Path, bytes]) -> None:
    folder, int8 = calibrated
    lines = (folder / "calib.cache").read_text().splitlines()
    assert lines[0] == "TRT-100300-EntropyCalibration2"
    entries = dict(line.split(": ") for line in lines[1:])
    # Every tensor of the model as imported, as TensorRT lists them (c1 is folded away later).
    assert {"x", "c1", "n1", "r1", "r2", "r3", "f", "y"} <= set(entries)
    assert all(len(v) == 8 and int(v, 16) for v in entries.values())
    # No calibration data: the cache alone gives the same engine.
    again = build(small_cnn(), BuildOptions(**FAST, int8=Int8Options(
        cache=str(folder / "calib.cache"), progress=False)))
    assert again == int8


def test_a_hand_written_tensorrt_cache_is_read(tmp_path: Path) -> None:
    # Ranges as trtexec would write them (TensorRT 8.6 header), plus a tensor pydla lacks.
    scales = {"x": 4.0, "r1": 6.0, "r2": 6.0, "r3": 8.0, "f": 4.0, "(Unnamed Layer* 9)": 1.0}
    text = "TRT-8601-EntropyCalibration2\n" + "".join(
        f"{k}: {np.array(v / 127, '>f4').tobytes().hex()}\n" for k, v in scales.items())
    (tmp_path / "trt.cache").write_text(text)
    data = build(small_cnn(), BuildOptions(**FAST, int8=Int8Options(
        cache=str(tmp_path / "trt.cache"), progress=False)))
    recorded = read_loadable(data).build["int8"]
    assert recorded["scales"]["r3"] == pytest.approx(8.0 / 127)
    assert recorded["layers"]["conv4"] == ["int8", "input 'r3' calibrated to +-8"]
    assert (tmp_path / "trt.cache").read_text() == text  # read, not rewritten
    cos = cosines(data, samples(4, 3))
    assert cos.min() > 0.95, cos


def test_layer_precisions_keep_a_layer_float(tmp_path: Path) -> None:
    np.savez(tmp_path / "c.npz", x=samples(4, 1))
    data = build(small_cnn(), BuildOptions(**FAST, layer_precisions={"conv*": "fp32"},
                                           int8=Int8Options(calib_data=str(tmp_path / "c.npz"),
                                                            algorithm="minmax",
                                                            progress=False)))
    layers = read_loadable(data).build["int8"]["layers"]
    assert layers["conv1"] == ["fp32", "--layerPrecisions conv*:fp32"]
    assert layers["conv4"][0] == "fp32" and layers["dw2"][0] == "int8"


def test_command_line_and_its_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                     ) -> None:
    onnx.save(small_cnn(), tmp_path / "m.onnx")
    np.savez(tmp_path / "c.npz", x=samples(4, 1))
    argv = ["build", "--onnx", str(tmp_path / "m.onnx"), "--saveEngine",
            str(tmp_path / "m.bin"), "--builderOptimizationLevel=2"]
    assert main([*argv, "--int8", f"--calibData={tmp_path / 'c.npz'}", "--calibAlgo=percentile",
                 f"--calib={tmp_path / 'c.cache'}", "--dumpLayerInfo",
                 f"--exportLayerInfo={tmp_path / 'l.json'}"]) == 0
    out = capsys.readouterr().out
    assert "--int8 int8: input 'x' calibrated" in out
    assert (tmp_path / "c.cache").read_text().startswith("TRT-100300-LegacyCalibration\n")
    exported = json.loads((tmp_path / "l.json").read_text())
    assert any("precision_reason" in lay for lay in exported["layers"])
    assert main([*argv, "--calibData=c.npz"]) == 1
    assert "--calibData calibrates for INT8: add --int8" in capsys.readouterr().err
    assert main([*argv, "--int8"]) == 1
    assert "--int8 needs calibration data" in capsys.readouterr().err
    np.savez(tmp_path / "bad.npz", image=samples(2, 1))
    assert main([*argv, "--int8", f"--calibData={tmp_path / 'bad.npz'}"]) == 1
    err = capsys.readouterr().err
    assert "array 'image' is not a network input (inputs: x)" in err
    assert len(err.strip().splitlines()) == 1


def test_an_explicit_cache_with_another_algorithm_needs_data(tmp_path: Path) -> None:
    (tmp_path / "c.cache").write_text("TRT-8601-MinMaxCalibration\nx: 3c010a14\n")
    with pytest.raises(CalibrationError, match="--int8 needs calibration data"):
        build(small_cnn(), BuildOptions(**FAST, int8=Int8Options(
            cache=str(tmp_path / "c.cache"), progress=False)))
