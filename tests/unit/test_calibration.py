"""INT8 calibration pieces: TensorRT's calibrators, its cache format, calibration data
checks and the per-layer precision policy (no model files, no builds)."""

from __future__ import annotations

import math
import struct
from pathlib import Path

import numpy as np
import pytest

from pydla.dtypes import DType
from pydla.errors import BuildError, CalibrationError
from pydla.ir import Graph, Node, Value
from pydla.quantization import cache as trt_cache
from pydla.quantization.calibrators import (
    accumulate_histogram,
    entropy_amax,
    kl_divergences,
    percentile_amax,
)
from pydla.quantization.data import InputSpec, npz_source, script_source
from pydla.quantization.insert_qdq import quantize_weights
from pydla.quantization.policy import choose_precisions


def reference_divergences(hist: np.ndarray, start: int, levels: int) -> list[float]:
    """NVIDIA's loop (pytorch-quantization's _compute_amax_entropy), written plainly."""
    bins = hist.astype(np.float64).copy()
    bins[0] = bins[1]
    out = []
    for i in range(start, len(bins) + 1):
        space = np.linspace(0, i, num=levels + 1)
        level = np.digitize(range(i), space) - 1
        level[bins[:i] == 0] = -1
        sums = np.zeros(levels)
        used = np.zeros(levels)
        for j, k in enumerate(level):
            if k != -1:
                sums[k] += bins[j]
                used[k] += 1
        q = np.array([sums[k] / used[k] if k != -1 else 0.0 for k in level])
        p = bins[:i].copy()
        p[-1] += bins[i:].sum()
        p, q = p / p.sum(), q / q.sum()
        kl = 0.0
        for pj, qj in zip(p, q):
            if pj > 0:
                kl = math.inf if qj == 0 else kl + pj * math.log(pj / qj)
                if kl == math.inf:
                    break
        out.append(kl)
    return out


def test_kl_divergences_match_nvidias_loop() -> None:
    rng = np.random.default_rng(1)
    hist = np.histogram(np.abs(rng.standard_normal(20000)), bins=96)[0]
    hist[40] = 0  # an empty bin inside the range: Q must keep it empty
    got = kl_divergences(hist.astype(np.int64), 16, 16)
    want = reference_divergences(hist, 16, 16)
    np.testing.assert_allclose(got, want, rtol=1e-10)
    # 41 bins: the outliers go to bin 40, which is empty, so Q has no mass there.
    assert math.isinf(got[41 - 16]) and np.isfinite(got[:41 - 16]).all()


def test_entropy_clips_a_long_tail_and_keeps_a_uniform_range() -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal(200_000).astype(np.float32)
    x[:5] = 40.0  # five outliers stretch the range 10x
    amax = float(np.abs(x).max())
    hist = np.zeros(2048, np.int64)
    accumulate_histogram(x, amax, hist)
    assert hist.sum() == x.size
    threshold = entropy_amax(hist, amax)
    assert 2.5 < threshold < 8.0, threshold
    u = rng.uniform(-1, 1, 100_000).astype(np.float32)
    hist = np.zeros(2048, np.int64)
    accumulate_histogram(u, 1.0, hist)
    assert entropy_amax(hist, 1.0) > 0.95


def test_percentile_threshold_is_the_bin_where_the_cdf_gets_there() -> None:
    hist = np.zeros(2048, np.int64)
    hist[:1000] = 1
    hist[2047] = 1  # 1 / 1001 of the values above the 99.9th percentile
    assert percentile_amax(hist, 2048.0, 99.9) == 1000.0
    assert percentile_amax(hist, 2048.0, 100.0) == 2048.0


TRT_CACHE = """TRT-8601-EntropyCalibration2
input: 3c010a14
conv1_output: 3d8b3c1f
(Unnamed Layer* 3) [Activation]_output: 3e12bcd2
"""


def test_a_tensorrt_cache_is_read() -> None:
    c = trt_cache.parse_cache(TRT_CACHE)
    assert (c.version, c.algorithm) == ("8601", "EntropyCalibration2")
    assert list(c.scales) == ["input", "conv1_output", "(Unnamed Layer* 3) [Activation]_output"]
    assert c.scales["input"] == pytest.approx(1 / 127, rel=1e-3)  # 0.0078759, as written
    assert c.ranges()["conv1_output"] == pytest.approx(
        127 * struct.unpack(">f", bytes.fromhex("3d8b3c1f"))[0])


def test_the_cache_round_trips_in_tensorrts_text(tmp_path: Path) -> None:
    path = tmp_path / "calib.cache"
    trt_cache.write_cache(str(path), "MinMaxCalibration", {"x": 1 / 127, "y:z": 0.5})
    assert path.read_text() == "TRT-100300-MinMaxCalibration\nx: 3c010204\ny:z: 3f000000\n"
    back = trt_cache.read_cache(str(path))
    assert back.scales == {"x": np.float32(1 / 127), "y:z": 0.5}


@pytest.mark.parametrize("text, line", [
    ("", "is empty"),
    ("TRT-EntropyCalibration2\nx: 3c010a14\n", "line 1"),
    ("TRT-8601-Calibration9\n", "unknown calibration algorithm"),
    ("TRT-8601-EntropyCalibration2\nx: 3c010a14\ny: 3c01zz14\n", "line 3"),
    ("TRT-8601-EntropyCalibration2\nx 3c010a14\n", "line 2"),
    ("TRT-8601-EntropyCalibration2\nx: bf800000\n", "line 2: tensor 'x' has the scale -1.0"),
    ("TRT-8601-EntropyCalibration2\nx: 3c010a14\nx: 3c010a14\n", "line 3: tensor 'x' appears"),
])
def test_a_corrupt_cache_names_its_line(text: str, line: str) -> None:
    with pytest.raises(CalibrationError, match=line.replace("(", r"\(").replace(")", r"\)")):
        trt_cache.parse_cache(text, "c.cache")


def test_a_failed_write_leaves_the_old_cache_and_no_temporary(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch
                                                             ) -> None:
    path = tmp_path / "calib.cache"
    path.write_text(TRT_CACHE)

    def fail(src: str, dst: str) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(trt_cache.os, "replace", fail)
    with pytest.raises(OSError, match="disk full"):
        trt_cache.write_cache(str(path), "EntropyCalibration2", {"x": 0.1})
    assert path.read_text() == TRT_CACHE
    assert [p.name for p in tmp_path.iterdir()] == ["calib.cache"]


INPUTS = [InputSpec("x", (1, 3, 4, 4), DType.FLOAT32)]


def test_npz_samples_by_first_axis_or_split_along_the_batch(tmp_path: Path) -> None:
    a = np.arange(2 * 3 * 16, dtype=np.float32).reshape(2, 1, 3, 4, 4)
    np.savez(tmp_path / "a.npz", x=a)
    np.savez(tmp_path / "b.npz", x=a[:, 0].astype(np.float64))  # (2, 3, 4, 4), float64
    src = npz_source(str(tmp_path), INPUTS)
    feeds = list(src)
    assert src.count == 4 and len(feeds) == 4
    assert feeds[3]["x"].dtype == np.float32 and feeds[3]["x"].shape == (1, 3, 4, 4)
    np.testing.assert_array_equal(feeds[3]["x"], a[1])


@pytest.mark.parametrize("arrays, message", [
    ({"y": np.zeros((2, 1, 3, 4, 4), np.float32)}, "array 'y' is not a network input"),
    ({"x": np.zeros((2, 1, 3, 5, 4), np.float32)}, r"array 'x' has shape \(2, 1, 3, 5, 4\)"),
    ({"x": np.zeros((0, 1, 3, 4, 4), np.float32)}, "holds no samples"),
    ({}, "has no array for input 'x'"),
])
def test_bad_calibration_files_name_the_tensor(tmp_path: Path, arrays: dict,
                                               message: str) -> None:
    np.savez(tmp_path / "c.npz", **arrays)
    with pytest.raises(CalibrationError, match=message):
        list(npz_source(str(tmp_path / "c.npz"), INPUTS))


def test_integer_data_for_a_float_input_is_refused(tmp_path: Path) -> None:
    np.savez(tmp_path / "c.npz", x=np.zeros((2, 1, 3, 4, 4), np.int32))
    with pytest.raises(CalibrationError, match="input 'x' has dtype int32; the network "
                       "takes float32"):
        list(npz_source(str(tmp_path / "c.npz"), INPUTS))


SCRIPT = """
import numpy as np

def load_data():
    for _ in range(3):
        yield {"x": np.ones((1, 3, 4, 4), np.float32)}

def raises():
    yield {"x": np.ones((1, 3, 4, 4), np.float32)}
    raise RuntimeError("camera unplugged")

def not_a_dict():
    return [np.ones((1, 3, 4, 4))]

def empty():
    return []
"""


@pytest.mark.parametrize("func, message", [
    ("raises", "raised RuntimeError at sample 1: camera unplugged"),
    ("not_a_dict", "sample 0 is a ndarray, not a dict"),
    ("empty", "gave no calibration samples"),
    ("missing", "has no function 'missing'"),
])
def test_data_loader_script_errors_name_the_file(tmp_path: Path, func: str,
                                                 message: str) -> None:
    path = tmp_path / "loader.py"
    path.write_text(SCRIPT)
    with pytest.raises(CalibrationError, match=message) as e:
        list(script_source(f"{path}:{func}", INPUTS))
    assert "loader.py" in str(e.value) and "\n" not in str(e.value)


def test_data_loader_script_default_function(tmp_path: Path) -> None:
    path = tmp_path / "loader.py"
    path.write_text(SCRIPT)
    src = script_source(str(path), INPUTS)
    assert len(list(src)) == 3 and len(list(src)) == 3  # re-iterable: one call per pass


def test_weights_are_per_channel_symmetric_in_127_levels() -> None:
    w = np.array([[[[-2.0, 1.0]]], [[[0.0, 0.0]]], [[[0.5, 0.25]]]], np.float32)
    q, scale = quantize_weights(w, 0)
    np.testing.assert_allclose(scale, [2 / 127, 1.0, 0.5 / 127], rtol=1e-6)
    assert q.dtype == np.int8
    np.testing.assert_array_equal(q.reshape(3, 2), [[-127, 64], [0, 0], [127, 64]])


def _graph() -> Graph:
    g = Graph()
    x = Value("x", (1, 3, 4, 4), DType.FLOAT32)
    w = Value("w", (4, 3, 1, 1), DType.FLOAT32, const=np.ones((4, 3, 1, 1), np.float32))
    c = Value("c", (1, 4, 4, 4), DType.FLOAT32)
    r = Value("r", (1, 4, 4, 4), DType.FLOAT32)
    w2 = Value("w2", (4, 4, 1, 1), DType.FLOAT32, const=np.ones((4, 4, 1, 1), np.float32))
    y = Value("y", (1, 4, 4, 4), DType.FLOAT32)
    g.inputs = [x]
    g.nodes = [Node("Conv", "conv1", [x, w], [c]), Node("Relu", "relu1", [c], [r]),
               Node("Conv", "conv2", [r, w2], [y])]
    g.outputs = [y]
    return g


def test_policy_reasons_and_overrides() -> None:
    d = choose_precisions(_graph(), {"x": 1.0})
    assert (d["conv1"].precision, d["relu1"].precision) == ("int8", "fp32")
    assert d["relu1"].reason == "no int8 kernel for Relu"
    assert d["conv2"].reason == "input 'r' has no calibrated range"
    d = choose_precisions(_graph(), {"x": 1.0, "r": 2.0}, {"*": "fp32", "conv2": "int8"})
    assert d["conv1"].reason == "--layerPrecisions *:fp32" and d["conv2"].precision == "int8"
    with pytest.raises(BuildError, match="'relu1' cannot run int8"):
        choose_precisions(_graph(), {}, {"relu1": "int8"})
    with pytest.raises(BuildError, match="unknown layers"):
        choose_precisions(_graph(), {}, {"conv9": "fp32"})
    with pytest.raises(BuildError, match=r"pattern 'fc\*' matches no layer"):
        choose_precisions(_graph(), {}, {"fc*": "fp32"})
    with pytest.raises(BuildError, match="precision is int8 or fp32"):
        choose_precisions(_graph(), {}, {"conv1": "fp16"})


def test_the_runner_frees_each_tensor_after_its_last_reader() -> None:
    from pydla.quantization.runner import FloatRunner, tensor_amax

    g = _graph()
    runner = FloatRunner(g)
    # x after conv1, c after relu1, r after conv2; y is the output and stays.
    assert [[n.name for n in [*g.inputs, *(o for nd in g.nodes for o in nd.outputs)]
             if id(n) in ids] for ids in runner.release] == [["x"], ["c"], ["r"]]
    x = np.full((1, 3, 4, 4), -1.0, np.float32)
    amax = tensor_amax(runner, [{"x": x}, {"x": -2 * x}], lambda: None)
    assert amax == {"x": 2.0, "c": 6.0, "r": 6.0, "y": 24.0}


def test_heads_stay_float_unless_named() -> None:
    from pydla.quantization.policy import HEAD_REASON

    d = choose_precisions(_graph(), {"x": 1.0, "r": 2.0})
    assert d["conv1"].precision == "int8"
    assert (d["conv2"].precision, d["conv2"].reason) == ("fp32", HEAD_REASON)
    d = choose_precisions(_graph(), {"x": 1.0, "r": 2.0}, {"conv2": "int8"})
    assert d["conv2"].precision == "int8"
    d = choose_precisions(_graph(), {"x": 1.0, "r": 2.0}, {"conv*": "int8"})
    assert d["conv2"].precision == "int8"
    # two heads on one trunk: each output's last weighted layer stays float
    g = _graph()
    w3 = Value("w3", (2, 4, 1, 1), DType.FLOAT32, const=np.ones((2, 4, 1, 1), np.float32))
    y2 = Value("y2", (1, 2, 4, 4), DType.FLOAT32)
    g.nodes.append(Node("Conv", "conv3", [g.nodes[1].outputs[0], w3], [y2]))
    g.outputs.append(y2)
    d = choose_precisions(g, {"x": 1.0, "r": 2.0})
    assert [d[n].precision for n in ("conv1", "conv2", "conv3")] == ["int8", "fp32", "fp32"]
