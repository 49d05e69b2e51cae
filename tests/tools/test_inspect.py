"""``pydla inspect``: ONNX models (I/O, ops, build decisions, unsupported ops) and loadables."""

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from pydla.tools.cli import main
from tests.oracle import make_model
from tests.tools.logtext import unstamped
from tests.tools.tiny import conv_chain, save_model


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    return save_model(conv_chain(), tmp_path_factory.mktemp("inspect"))


def test_onnx_text(engine, capsys):
    onnx_path, _ = engine
    assert main(["inspect", str(onnx_path), "--verbose"]) == 0
    out = unstamped(capsys.readouterr().out)
    for line in ("Input  x: (1, 3, 8, 8) float32", "Output y: (1, 2, 8, 8) float32",
                 "Ops: Conv x3, BatchNormalization x2, Relu x2", "Build: 7 ONNX nodes -> 3 layers",
                 "fold_batchnorm: 2", "fuse_epilogue: 2"):
        assert line in out
    # --verbose adds the pass log itself (its wording belongs to the passes).
    assert any(x.startswith("[I]   [V] fold_batchnorm:") and "'bn1'" in x
               for x in out.splitlines())


def test_onnx_json_reports_folding_and_dynamic_inputs(tmp_path, capsys):
    # The Reshape's target shape is computed from Shape → Gather → Concat: all folded at
    # build time, so only Relu and Reshape remain as layers.
    model = make_model(
        [helper.make_node("Relu", ["x"], ["r"], name="relu"),
         helper.make_node("Shape", ["r"], ["s"], name="shape"),
         helper.make_node("Gather", ["s", "i0"], ["n"], axis=0, name="gather"),
         helper.make_node("Concat", ["n", "minus1"], ["t"], axis=0, name="concat"),
         helper.make_node("Reshape", ["r", "t"], ["y"], name="reshape")],
        {"x": (np.float32, ["N", 3, 4])}, ["y"],
        {"i0": np.array([0], np.int64), "minus1": np.array([-1], np.int64)})
    onnx.save(model, tmp_path / "m.onnx")
    assert main(["inspect", str(tmp_path / "m.onnx"), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["kind"] == "onnx" and info["opset"] == 17
    assert info["inputs"] == [{"name": "x", "shape": ["N", 3, 4], "dtype": "float32"}]
    assert info["ops"] == {"Relu": 1, "Shape": 1, "Gather": 1, "Concat": 1, "Reshape": 1}
    assert info["unsupported"] == []
    b = info["build"]
    assert b["ok"] and b["fixed_dynamic_inputs"] == {"x": [1, 3, 4]}
    assert b["folded_nodes"] == {"Shape": ["shape"], "Gather": ["gather"],
                                 "Concat": ["concat"]}
    assert main(["inspect", str(tmp_path / "m.onnx"), "--shapes=x:2x3x4", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["build"]["fixed_dynamic_inputs"] == {}


def test_onnx_unsupported_ops_and_why(tmp_path, capsys):
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["a"], name="r"),
         helper.make_node("NoSuchOp", ["a"], ["b"], name="nosuch"),
         helper.make_node("Foo", ["b"], ["y"], name="foo", domain="my.ops")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("my.ops", 1)])
    onnx.save(model, tmp_path / "bad.onnx")
    assert main(["inspect", str(tmp_path / "bad.onnx")]) == 1
    out = capsys.readouterr().out
    assert "Unsupported: NoSuchOp (no importer for NoSuchOp) at nosuch" in out
    assert "Unsupported: Foo (custom domain 'my.ops'" in out
    assert "Build fails: node 'nosuch' (NoSuchOp)" in out


def test_loadable_text_and_json(engine, capsys):
    _, bin_path = engine
    assert main(["inspect", str(bin_path)]) == 0
    out = capsys.readouterr().out
    assert "Loadable: format 1.2, producer pydla" in out
    assert "Input  x: (1, 3, 8, 8) float32; buffer float32:chw, 768 bytes" in out
    assert "Layers: 3; precisions fp32 x3; tactics " in out  # tactics: whichever timed fastest
    assert "[from conv2, bn2, relu2]" in out and "Memory: activations" in out
    assert main(["inspect", str(bin_path), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["kind"] == "loadable" and info["precisions"] == {"fp32": 3}
    assert sum(info["tactics"].values()) == 3
    assert [lay["fused_from"] for lay in info["layers"]] == [
        ["conv1", "bn1", "relu1"], ["conv2", "bn2", "relu2"], ["conv3"]]
    assert info["inputs"][0]["descriptor"]["size"] == 768
    assert set(info["memory"]) >= {"activation_bytes", "weight_bytes"}
