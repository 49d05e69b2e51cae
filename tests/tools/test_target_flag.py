"""``--target=cpu|cuda`` (shared by build, bench, compare and inspect)."""

import argparse

import numpy as np
import onnx
from onnx import helper

from pydla.engine import LoadedModule
from pydla.loadable import read_loadable
from pydla.tools.buildflags import add_build_flags, build_options
from pydla.tools.cli import main
from tests.oracle import make_model


def _parse(argv):
    p = argparse.ArgumentParser()
    add_build_flags(p)
    return p.parse_args(argv)


def test_target_defaults_to_cpu_and_takes_cuda():
    assert build_options(_parse([])).target == "cpu"
    assert build_options(_parse(["--target=cuda"])).target == "cuda"


def test_build_for_cuda_records_the_backend_and_still_runs_on_the_cpu(tmp_path, capsys):
    model = make_model([helper.make_node("Relu", ["x"], ["y"], name="relu")],
                       {"x": (np.float32, [2, 3])}, ["y"])
    onnx.save(model, tmp_path / "m.onnx")
    out = tmp_path / "m.bin"
    rc = main(["build", f"--onnx={tmp_path / 'm.onnx'}", "--target=cuda",
               f"--saveEngine={out}"])
    assert rc == 0, capsys.readouterr().err
    data = out.read_bytes()
    assert read_loadable(data).target["backend"] == "cuda"
    x = np.array([[-1, 2, -3], [4, -5, 6]], np.float32)
    assert LoadedModule(data).run([x])[0].tolist() == np.maximum(x, 0).tolist()
