"""``pydla partition --dla``: parts in execution order, tensor names kept; running the parts
in order with onnxruntime reproduces the model's outputs (fp32, max rel diff 1e-5)."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest

from pydla.dla.partition import partition_model, run_parts
from pydla.tools.cli import main
from tests.models.families import FAMILIES

ort = pytest.importorskip("onnxruntime")


def _session(path: str):  # noqa: ANN202
    return ort.InferenceSession(path, providers=["CPUExecutionProvider"])


@pytest.mark.parametrize("family", ["dbnet", "mobilenetv3", "yolox", "yolov8", "svtr", "crnn"])
def test_parts_stitched_equal_the_model(tmp_path, family):
    model, feeds = FAMILIES[family]()
    manifest, report = partition_model(model, tmp_path)
    devices = [p["device"] for p in manifest["parts"]]
    assert devices.count("dla") == len(report.segments)
    assert all(a != b for a, b in zip(devices, devices[1:]))  # runs alternate
    for part in manifest["parts"]:
        onnx.checker.check_model(str(tmp_path / part["file"]))
    want = _session(model.SerializeToString()).run(None, feeds)
    got = run_parts(manifest, tmp_path, feeds, _session)
    assert list(got) == [o.name for o in model.graph.output]
    for w, g in zip(want, got.values()):
        scale = max(float(np.abs(w).max()), 1e-30)
        assert float(np.abs(g - w).max()) / scale <= 1e-5


def test_fully_dla_model_is_one_part(tmp_path):
    from tests.models.families import resnet50

    model, _ = resnet50(size=64, layers=(1, 1))
    manifest, report = partition_model(model, tmp_path)
    assert [p["device"] for p in manifest["parts"]] == ["dla"]
    assert report.supported_layers == len(report.layers)


def test_cli_writes_manifest(tmp_path, capsys):
    model, _ = FAMILIES["dbnet"]()
    onnx.save(model, tmp_path / "m.onnx")
    out = tmp_path / "parts"
    assert main(["partition", "--dla", str(tmp_path / "m.onnx"), "--output-dir", str(out)]) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert set(manifest) == {"inputs", "outputs", "parts"}
    assert all(set(p) == {"file", "device", "inputs", "outputs"} for p in manifest["parts"])
    assert "DLA subgraphs" in capsys.readouterr().out


def test_unnamed_nodes_are_named_and_placed(tmp_path):
    model, feeds = FAMILIES["mobilenetv3"]()
    for node in model.graph.node:
        node.name = ""
    manifest, report = partition_model(model, tmp_path)
    assert report.supported_layers < len(report.layers)
    assert {p["device"] for p in manifest["parts"]} == {"dla", "gpu"}
    want = _session(model.SerializeToString()).run(None, feeds)
    got = list(run_parts(manifest, tmp_path, feeds, _session).values())
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-6)
