"""The command line: trtexec's flags for build and run."""

import json
import re

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from pydla.engine import LoadedModule
from pydla.loadable import read_loadable
from pydla.tools.cli import main
from tests.oracle import make_model, run_ort


def fp16_conv_model(path):
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array((rng.standard_normal((20, 3, 3, 3)) * 0.2).astype(np.float16),
                                "w")
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], name="conv"),
         helper.make_node("Relu", ["c"], ["y"], name="relu")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT16, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT16, [1, 20, 8, 8])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return model


def test_nvidia_dla_command_as_written(tmp_path, capsys):
    onnx_path, bin_path = tmp_path / "model_fp16.onnx", tmp_path / "model.bin"
    fp16_conv_model(onnx_path)
    rc = main(["build", f"--onnx={onnx_path}", "--useDLACore=0", "--inputIOFormats=chw16",
               "--outputIOFormats=chw16", "--memPoolSize=dlaSRAM:1", f"--saveEngine={bin_path}",
               "--buildDLAStandalone"])
    assert rc == 0, capsys.readouterr().err
    prog = read_loadable(bin_path.read_bytes())
    assert prog.target["dla_core"] == 0 and prog.target["mem_pools"] == {"dlaSRAM": 1 << 20}
    d_in, d_out = prog.inputs[0].descriptor, prog.outputs[0].descriptor
    assert (d_in.data_format, d_in.data_type, d_in.size) == (3, 2, 1 * 1 * 8 * 8 * 16 * 2)
    assert (d_out.data_format, d_out.data_type, d_out.size) == (3, 2, 1 * 2 * 8 * 8 * 16 * 2)


def test_impossible_format_is_refused(tmp_path, capsys):
    onnx_path = tmp_path / "m.onnx"
    fp16_conv_model(onnx_path)
    rc = main(["build", f"--onnx={onnx_path}", "--inputIOFormats=int8:chw16",
               f"--saveEngine={tmp_path / 'x.bin'}"])
    assert rc == 1
    assert "chw16" in capsys.readouterr().err


def test_build_run_export_and_layer_info(tmp_path, capsys):
    model = make_model([helper.make_node("MatMul", ["x", "w"], ["h"], name="fc"),
                        helper.make_node("Relu", ["h"], ["y"], name="relu")],
                       {"x": (np.float32, ["N", 4])}, ["y"],
                       {"w": np.arange(12, dtype=np.float32).reshape(4, 3) - 5})
    onnx.save(model, tmp_path / "m.onnx")
    rc = main(["build", "--onnx", str(tmp_path / "m.onnx"), "--saveEngine",
               str(tmp_path / "m.bin"), "--shapes=x:2x4", "--verbose",
               f"--exportLayerInfo={tmp_path / 'layers.json'}"])
    assert rc == 0
    out = capsys.readouterr().out
    assert "[V] fuse_epilogue" in out
    info = json.loads((tmp_path / "layers.json").read_text())
    assert info["layers"][0]["fused_from"] == ["fc", "relu"]
    assert info["layers"][0]["inputs"][0] == {"name": "x", "shape": [2, 4], "dtype": "float32",
                                              "format": "chw"}
    assert set(info["memory"]) == {"activation_bytes", "naive_activation_bytes",
                                   "weight_bytes", "workspace_bytes"}
    x = np.random.default_rng(0).standard_normal((2, 4)).astype(np.float32)
    np.savez(tmp_path / "in.npz", x=x)
    rc = main(["run", "--loadEngine", str(tmp_path / "m.bin"), f"--loadInputs={tmp_path}/in.npz",
               f"--exportOutput={tmp_path}/out.npz"])
    assert rc == 0
    with np.load(tmp_path / "out.npz") as z:
        np.testing.assert_allclose(z["y"], run_ort(model, {"x": x})[0], rtol=1e-6)
    x.tofile(tmp_path / "x.bin")
    rc = main(["run", "--loadEngine", str(tmp_path / "m.bin"),
               f"--loadInputs=x:{tmp_path}/x.bin", f"--exportOutput={tmp_path}/out2.npz"])
    assert rc == 0


@pytest.mark.parametrize("argv,message", [
    (["build", "--onnx", "missing.onnx", "--saveEngine", "x.bin"], "missing.onnx"),
    (["build", "--onnx", "{m}", "--saveEngine", "{t}/x.bin"], "dynamic shape"),
    (["build", "--onnx", "{m}", "--saveEngine", "{t}/x.bin", "--shapes=x:2xQ"], "dims"),
    (["build", "--onnx", "{m}", "--saveEngine", "{t}/x.bin", "--shapes=z:2x4"], "not inputs"),
    (["run", "--loadEngine", "{m}"], "is not a loadable"),
])
def test_errors_are_clear(tmp_path, capsys, argv, message):
    model = make_model([helper.make_node("Relu", ["x"], ["h"]),
                        helper.make_node("Sigmoid", ["h"], ["y"])],
                       {"x": (np.float32, ["N", 4])}, ["y"])
    onnx.save(model, tmp_path / "m.onnx")
    argv = [a.format(m=tmp_path / "m.onnx", t=tmp_path) for a in argv]
    assert main(argv) == 1
    assert message in capsys.readouterr().err


def test_workspace_pool_caps_the_shared_scratch(tmp_path, capsys):
    """--memPoolSize=workspace:N caps the bound program's shared scratch (a 3×3
    convolution stages its input there); the error names the size needed. Autotuning is
    off (level 2) so the tactic, and with it the scratch, cannot depend on the machine's
    timings: on a noisy machine the reference kernel, which needs none, can win."""
    rng = np.random.default_rng(0)
    model = make_model([helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])],
                       {"x": (np.float32, [1, 16, 12, 12])}, ["y"],
                       {"w": rng.standard_normal((16, 16, 3, 3)).astype(np.float32)})
    onnx.save(model, tmp_path / "m.onnx")
    argv = ["build", "--onnx", str(tmp_path / "m.onnx"), "--saveEngine", str(tmp_path / "m.bin"),
            "--builderOptimizationLevel=2"]
    assert main([*argv, "--memPoolSize=workspace:1B"]) == 1
    err = capsys.readouterr().err
    assert "workspace" in err and "use at least" in err
    assert main([*argv, "--memPoolSize=workspace:64MiB"]) == 0


def test_engine_file_runs_via_mmap(tmp_path):
    model = make_model([helper.make_node("Relu", ["x"], ["y"])], {"x": (np.float32, [3])}, ["y"])
    onnx.save(model, tmp_path / "m.onnx")
    assert main(["build", "--onnx", str(tmp_path / "m.onnx"), "--saveEngine",
                 str(tmp_path / "m.bin")]) == 0
    m = LoadedModule((tmp_path / "m.bin").read_bytes())
    assert m.run([np.array([-1, 0, 2], np.float32)])[0].tolist() == [0, 0, 2]


def test_the_shapes_hint_works_when_pasted(tmp_path, capsys):
    model = make_model([helper.make_node("Relu", ["x"], ["y"])],
                       {"x": (np.float32, ["N", 3, "H", 5])}, ["y"])
    onnx.save(model, tmp_path / "m.onnx")
    argv = ["build", "--onnx", str(tmp_path / "m.onnx"), "--saveEngine", str(tmp_path / "m.bin")]
    assert main(argv) == 1
    hint = re.search(r"fix it with (--shapes=\S+)", capsys.readouterr().err).group(1)
    assert hint == "--shapes=x:1x3x1x5"
    assert main([*argv, hint]) == 0
