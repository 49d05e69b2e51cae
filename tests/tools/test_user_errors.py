"""docs/tools.md's "User errors" table, run: each command prints exactly the documented line
on stderr (its last line: argparse's usage comes first), with the documented exit status,
and never a traceback."""

from __future__ import annotations

import io
import re
import shlex
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper

from pydla.builder import build
from pydla.tools.cli import main
from tests.oracle import make_model

DOC = Path(__file__).resolve().parents[2] / "docs" / "tools.md"
ROW = re.compile(r"^\| [^|]+ \| `pydla ([^`]+)` \| (\d) \| `(.+)` \|$")


def _rows() -> list[tuple[str, int, str]]:
    text = DOC.read_text(encoding="utf-8")
    section = text.split("\n## User errors\n", 1)[1].split("\n## ", 1)[0]
    rows = [(m.group(1), int(m.group(2)), m.group(3))
            for m in map(ROW.match, section.splitlines()) if m]
    assert len(rows) >= 15, "the table lost its rows (or its format)"
    return rows


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("user_errors")
    model = make_model([helper.make_node("Relu", ["x"], ["y"], name="relu")],
                       {"x": (np.float32, [1, 3, 224, 224])}, ["y"])
    onnx.save(model, d / "m.onnx")
    (d / "m.bin").write_bytes(build(model))
    (d / "empty.bin").write_bytes(b"")
    (d / "dir").mkdir()
    np.savez(d / "nhwc.npz", x=np.zeros((1, 224, 224, 3), np.float32))
    np.savez(d / "int64.npz", x=np.zeros((1, 3, 224, 224), np.int64))
    (d / "garbage.npz").write_bytes(b"not a zip archive")
    np.zeros((1, 3, 224, 224), np.float16).tofile(d / "half.bin")
    return d


@pytest.mark.parametrize("command, status, line", _rows(), ids=lambda v: str(v)[:40])
def test_documented_user_error(folder, monkeypatch, capsys, command, status, line):
    monkeypatch.chdir(folder)
    try:
        rc = main(shlex.split(command))
    except SystemExit as e:  # argparse's own errors
        rc = e.code
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert (rc, err.strip().splitlines()[-1]) == (status, line)


def test_closed_stdout_ends_quietly(folder, monkeypatch, capsys):
    class ClosedPipe(io.StringIO):
        def write(self, text: str) -> int:
            raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.chdir(folder)
    monkeypatch.setattr(sys, "stdout", ClosedPipe())
    assert main(["inspect", "m.bin"]) == 1
    assert capsys.readouterr().err == ""


def test_a_missing_extra_names_the_pip_command(folder, monkeypatch, capsys):
    """compare without onnxruntime (its extra not installed): one line, the pip command."""
    monkeypatch.chdir(folder)
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # import raises ModuleNotFoundError
    assert main(["compare", "m.onnx", "--loadEngine", "m.bin"]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1] == ("pydla compare: error: onnxruntime is not "
                                            "installed; pip install 'pydla[compare]'")
