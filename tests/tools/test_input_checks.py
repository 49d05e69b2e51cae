"""Exact input checks on every path: an NHWC (1,224,224,3) array for an NCHW (1,3,224,224)
input has the same element count and must still be refused, with one line naming the tensor,
the expected and the given shape; so must an array of the wrong kind of dtype."""

from __future__ import annotations

import re

import numpy as np
import pytest
from onnx import helper

from pydla import api, onnx_backend
from pydla.api import pack_tensor
from pydla.builder import build
from pydla.engine import LoadedModule
from pydla.errors import PydlaError
from pydla.formats import FormatError
from pydla.tools.cli import main
from pydla.tools.profiling import StagedRunner
from tests.oracle import make_model

NCHW = (1, 3, 224, 224)
NHWC = (1, 224, 224, 3)
RNG = np.random.default_rng(3)
SHAPE_LINE = "input 'x': expected shape (1, 3, 224, 224) float32, given (1, 224, 224, 3) float32"
DTYPE_LINE = "input 'x': expected dtype float32 (1, 3, 224, 224), given int64"


@pytest.fixture(scope="module")
def model():
    return make_model([helper.make_node("Relu", ["x"], ["y"], name="relu")],
                      {"x": (np.float32, list(NCHW))}, ["y"])


@pytest.fixture(scope="module")
def engine(model) -> bytes:
    return build(model)


def _bad() -> list[tuple[np.ndarray, str]]:
    return [(RNG.standard_normal(NHWC).astype(np.float32), SHAPE_LINE),
            (np.zeros(NCHW, np.int64), DTYPE_LINE)]


def test_loaded_module_and_staged_runner(engine):
    module = LoadedModule(engine)
    runner = StagedRunner(LoadedModule(engine))
    for x, line in _bad():
        with pytest.raises(PydlaError, match="^" + re.escape(line)):
            module.run([x])
        with pytest.raises(PydlaError, match="^" + re.escape(line)):
            runner.set_inputs([x])
    good = RNG.standard_normal(NCHW).astype(np.float16)  # float precision converts
    np.testing.assert_array_equal(module.run([good])[0], np.maximum(good, 0).astype(np.float32))


def test_api(engine):
    with api.Device() as dev:
        m = dev.load(engine)
        for x, line in _bad():
            with pytest.raises(PydlaError, match="^" + re.escape(line)):
                m.run([x])
            with pytest.raises(PydlaError, match="^" + re.escape(line)):
                m.submit({"x": x})
        with pytest.raises(FormatError, match=r"expected shape n,c,h,w=\(1, 3, 224, 224\)"):
            pack_tensor(_bad()[0][0], m.input_descriptors[0])


def test_onnx_backend(model):
    rep = onnx_backend.prepare(model)
    for x, line in _bad():
        with pytest.raises(PydlaError, match="^" + re.escape(line)):
            rep.run([x])
    with pytest.raises(PydlaError, match="2 inputs given"):
        rep.run([np.zeros(NCHW, np.float32)] * 2)


@pytest.mark.parametrize("command", ["run", "bench", "compare"])
def test_cli_load_inputs(tmp_path, capsys, model, engine, command):
    import onnx

    (tmp_path / "m.bin").write_bytes(engine)
    onnx.save(model, tmp_path / "m.onnx")
    argv = {"run": ["run"], "bench": ["bench", "--iterations=1", "--duration=0", "--warmUp=0"],
            "compare": ["compare", str(tmp_path / "m.onnx")]}[command]
    for i, (x, line) in enumerate(_bad()):
        np.savez(tmp_path / f"in{i}.npz", x=x)
        rc = main(argv + [f"--loadEngine={tmp_path / 'm.bin'}",
                          f"--loadInputs={tmp_path / f'in{i}.npz'}"])
        err = capsys.readouterr().err.strip()
        assert rc == 1 and err == f"pydla {command}: error: {line}"


def test_cli_raw_file_must_hold_exactly_the_tensor(tmp_path, capsys, engine):
    (tmp_path / "m.bin").write_bytes(engine)
    raw = tmp_path / "x.bin"
    np.zeros(NCHW, np.float16).tofile(raw)  # the right element count, half the bytes
    rc = main(["run", f"--loadEngine={tmp_path / 'm.bin'}", f"--loadInputs=x:{raw}"])
    err = capsys.readouterr().err.strip()
    assert rc == 1 and err == (f"pydla run: error: --loadInputs x:{raw}: 301,056 bytes, input "
                               "'x' (1, 3, 224, 224) float32 takes 602,112")
    np.zeros(NCHW, np.float32).tofile(raw)
    assert main(["run", f"--loadEngine={tmp_path / 'm.bin'}", f"--loadInputs=x:{raw}"]) == 0
