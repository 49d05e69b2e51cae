"""--exportLayerInfo with --profilingVerbosity=detailed and --exportProfile, read as NVIDIA's
TREx reads them (tests/tools/trex_reader.py ports its parser: no wheel exists)."""

import json
import os
import sys
import types

import pytest

from pydla.dtypes import DType
from pydla.tools.cli import main
from pydla.tools.trex import format_string
from tests.tools import trex_reader
from tests.tools.tiny import conv_chain, save_model


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """One bench run of the tiny conv chain writing both files, as trtexec's TREx recipe."""
    d = tmp_path_factory.mktemp("trex")
    onnx_path, _ = save_model(conv_chain(), d)
    graph, profile = d / "graph.json", d / "profile.json"
    assert main(["bench", f"--onnx={onnx_path}", "--profilingVerbosity=detailed",
                 f"--exportLayerInfo={graph}", f"--exportProfile={profile}",
                 "--iterations=5", "--warmUp=0", "--duration=0"]) == 0
    return graph, profile


def test_trex_loads_the_graph_and_profile(exported):
    graph, profile = exported
    rows = trex_reader.engine_plan(str(graph), str(profile))
    assert [r["name"] for r in rows] == ["conv1", "conv2", "conv3"]
    # joined by position: the profile's record for each layer is that layer's own
    assert [r["profile_name"] for r in rows] == ["conv1", "conv2", "conv3"]
    assert all(r["latency.avg_time"] > 0 for r in rows)
    assert sum(r["latency.pct_time"] for r in rows) == pytest.approx(100.0)
    for r in rows:
        assert r["type"] == "Convolution" and r["precision"] == "FP32"
        for t in r["inputs"] + r["outputs"]:
            assert t["format"] != "Unknown format" and t["size_bytes"] > 0, t
    # conv1: 4x3x3x3 float weights and 4 folded BatchNorm biases, as TREx counts bytes
    assert rows[0]["weights_size"] == 4 * 3 * 3 * 3 * 4 and rows[0]["bias_size"] == 4 * 4
    assert rows[0]["inputs"][0] == {"name": "x", "shape": [1, 3, 8, 8], "format": "FP32 NCHW",
                                    "precision": "FP32", "size_bytes": 3 * 8 * 8 * 4}
    assert rows[0]["metadata"] == "[ONNX Layer: conv1]+[ONNX Layer: bn1]+[ONNX Layer: relu1]"


@pytest.mark.skipif(not os.environ.get("TREX_PATH"), reason="TREX_PATH (a TensorRT checkout's "
                    "tools/experimental/trt-engine-explorer) not set: TREx has no wheel")
def test_trex_itself_loads_the_files(exported, monkeypatch):
    """With TREx's sources at hand: its own EnginePlan over both files (pandas needed)."""
    pytest.importorskip("pandas")
    # trex/__init__ imports the plotting stack (plotly, graphviz…); the parser needs none of it
    package = types.ModuleType("trex")
    package.__path__ = [os.path.join(os.environ["TREX_PATH"], "trex")]
    monkeypatch.setitem(sys.modules, "trex", package)
    from trex.engine_plan import EnginePlan

    graph, profile = exported
    plan = EnginePlan(str(graph), str(profile))
    assert list(plan.df["Name"]) == ["conv1", "conv2", "conv3"]
    assert list(plan.df["type"]) == ["Convolution"] * 3
    assert (plan.df["latency.avg_time"] > 0).all() and plan.total_weights_size > 0


def test_detailed_layers_carry_tensorrt_keys(exported):
    graph, _ = exported
    data = json.loads(graph.read_text())
    assert data["Bindings"] == ["x", "y"]
    conv1 = data["Layers"][0]
    assert conv1["ParameterType"] == "Convolution" and conv1["LayerType"] == "Conv"
    assert conv1["Kernel"] == [3, 3] and conv1["OutMaps"] == 4 and conv1["HasReLU"] == 1
    assert conv1["PrePadding"] == [1, 1] and conv1["TacticName"]


def test_layer_names_only_is_refused_by_trex_as_trtexec_s_is(tmp_path):
    onnx_path, _ = save_model(conv_chain(), tmp_path)
    graph = tmp_path / "names.json"
    assert main(["build", f"--onnx={onnx_path}", f"--saveEngine={tmp_path / 'e.bin'}",
                 "--profilingVerbosity=layer_names_only", f"--exportLayerInfo={graph}"]) == 0
    assert json.loads(graph.read_text())["Layers"] == ["conv1", "conv2", "conv3"]
    with pytest.raises(ValueError, match="detailed ProfilingVerbosity"):
        trex_reader.read_graph_file(str(graph))


@pytest.mark.parametrize("dtype", list(DType))
@pytest.mark.parametrize("layout", ["chw", "hwc", "hwc8", "chw16", "chw32", "nchw16c"])
def test_every_format_string_is_one_trex_knows(dtype, layout):
    fmt = format_string(dtype, layout)
    short = trex_reader.REGION_FORMATS.get(fmt)
    assert short is not None and short != "Unknown format", fmt
    t = trex_reader.activation({"Name": "t", "Dimensions": [3], "Format/Datatype": fmt})
    # TREx's size table has no entry for "BF16" (TensorRT's linear bf16 string) nor "Bool":
    # it counts those tensors as 0 bytes, as it does for TensorRT's own engines.
    if fmt not in ("Row major linear BFloat16 format", "Row major linear BOOL", "Bool"):
        assert t["size_bytes"] == 3 * dtype.itemsize, (fmt, t)
