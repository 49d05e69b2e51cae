"""trtexec's --best and --noTF32, and its log line format ([MM/DD/YYYY-HH:MM:SS] [I] ...)."""

import argparse
import logging
import re

import numpy as np
import pytest

from pydla.dtypes import DType
from pydla.loadable import read_loadable
from pydla.tools.buildflags import add_build_flags, build_options
from pydla.tools.cli import main
from pydla.tools.flags import FlagError
from pydla.tools.logs import LOG, TrtexecFormatter
from tests.tools.logtext import unstamped
from tests.tools.tiny import conv_chain, save_model


def _parse(argv):
    p = argparse.ArgumentParser()
    add_build_flags(p)
    return p.parse_args(argv)


def test_best_without_calibration_allows_fp16_and_bf16_and_says_int8_is_left_out(caplog):
    with caplog.at_level(logging.WARNING, logger="pydla"):
        options = build_options(_parse(["--best"]))
    assert options.allow == (DType.FLOAT16, DType.BFLOAT16) and options.int8 is None
    assert "INT8 is left out rather than run with placeholder scales" in caplog.text


def test_best_with_calibration_is_int8(tmp_path):
    calib = tmp_path / "calib.npz"
    np.savez(calib, x=np.zeros((2, 1, 3, 8, 8), np.float32))
    options = build_options(_parse(["--best", f"--calibData={calib}"]))
    assert options.int8 is not None and options.int8.calib_data == str(calib)
    assert options.allow == ()


@pytest.mark.parametrize("other", ["--stronglyTyped", "--autocast=fp16"])
def test_best_refuses_flags_that_fix_the_precisions(other):
    with pytest.raises(FlagError, match="--best lets the builder choose"):
        build_options(_parse(["--best", other]))


def test_best_build_records_both_reduced_types_and_warns(tmp_path, capsys):
    onnx_path, _ = save_model(conv_chain(), tmp_path)
    engine = tmp_path / "best.bin"
    assert main(["build", f"--onnx={onnx_path}", f"--saveEngine={engine}", "--best",
                 "--noTF32"]) == 0
    out = unstamped(capsys.readouterr().out)
    assert "[W] --best: no calibration data" in out
    build = read_loadable(engine.read_bytes()).build
    assert build["precision"]["allowed"] == ["fp16", "bf16"]
    assert build["no_tf32"] is True


def test_no_tf32_is_recorded_only_when_given(tmp_path):
    from pydla.builder import build

    assert build_options(_parse(["--noTF32"])).no_tf32
    plain = read_loadable(build(conv_chain(), build_options(_parse([])))).build
    assert "no_tf32" not in plain


def test_log_lines_carry_trtexec_s_stamp_and_severity(tmp_path, capsys):
    onnx_path, _ = save_model(conv_chain(), tmp_path)
    argv = ["build", f"--onnx={onnx_path}", f"--saveEngine={tmp_path / 'e.bin'}"]
    assert main(argv) == 0
    quiet = capsys.readouterr().out
    assert re.match(r"\[\d\d/\d\d/\d{4}-\d\d:\d\d:\d\d\] \[I\] built ", quiet)
    assert "[V]" not in unstamped(quiet)
    assert main([*argv, "--verbose", "--dumpLayerInfo"]) == 0
    out = unstamped(capsys.readouterr().out)  # every line stamped, the layer table too
    assert "[V] fuse_epilogue" in out and "[I] Layer conv1 (Conv + Relu" in out
    # the handler lives for the command only: a program calling main() keeps its logging
    assert all(isinstance(h, logging.NullHandler) for h in LOG.handlers)


def test_formatter_stamps_every_line_of_a_message():
    record = logging.LogRecord("pydla", logging.ERROR, __file__, 1, "a\nb", None, None)
    lines = TrtexecFormatter().format(record).splitlines()
    assert [line.split("] ", 1)[1] for line in lines] == ["[E] a", "[E] b"]
