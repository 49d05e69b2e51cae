"""``pydla compare``: Polygraphy's statistics and pass rule; --layerwise names the first
divergent layer and its fused ONNX nodes."""

import re

import numpy as np
import pytest

from pydla.loadable import read_loadable
from pydla.tools.cli import main
from pydla.tools.errorstats import Tolerance, compare_arrays, parse_per_name
from pydla.tools.flags import FlagError
from pydla.tools.layerwise import reference_names
from tests.tools.logtext import unstamped
from tests.tools.tiny import conv_chain, perturb_weight, save_model


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    return save_model(conv_chain(), tmp_path_factory.mktemp("compare"))


def test_outputs_match(engine, capsys):
    onnx_path, bin_path = engine
    assert main(["compare", str(onnx_path), f"--loadEngine={bin_path}", "--atol=1e-4"]) == 0
    out = capsys.readouterr().out
    assert "Output y (1, 2, 8, 8) float32" in out
    for word in ("Absolute Difference | max=", "Relative Difference | max=", "p90=", "p95=",
                 "p99=", "median=", "Cosine Similarity | 1.0000", "Minimum Required Tolerance",
                 "PASSED | all 1 outputs match"):
        assert word in out


def test_fails_and_names_the_tolerance_that_would_pass(engine, capsys):
    onnx_path, _ = engine
    argv = ["compare", str(onnx_path), "--autocast=fp16", "--atol=1e-7", "--rtol=1e-7"]
    assert main(argv) == 1
    out = capsys.readouterr().out
    assert "FAILED | 1 of 1 outputs differ" in out
    needed = float(re.search(r"\[abs=([\d.e+-]+)\]", out).group(1))
    # atol alone (rtol 0) must pass at the printed minimum (printed to 4 digits).
    assert main(["compare", str(onnx_path), "--autocast=fp16", f"--atol={needed * 1.001}",
                 "--rtol=0"]) == 0
    capsys.readouterr()
    # Per-output values override the default, as in Polygraphy.
    assert main(["compare", str(onnx_path), "--autocast=fp16", "--atol=1e-7,y:1",
                 "--rtol=1e-7"]) == 0
    capsys.readouterr()


def test_error_stat_rules():
    want = np.array([1.0, 2.0, 0.0, 100.0])
    got = np.array([1.0, 2.5, 0.001, 100.2])
    # elemwise: an element fails only when both abs > atol and rel > rtol.
    c = compare_arrays(got, want, Tolerance(0.1, 0.01, "elemwise"))
    assert not c.passed and c.mismatches == 1  # 2.5 vs 2: abs .5, rel .25
    assert c.abs.max == pytest.approx(0.5) and c.abs.argmax == 1
    assert c.rel.max == np.inf  # 0.001 against a zero reference
    assert c.min_atol == pytest.approx(0.5) and c.min_rtol == pytest.approx(0.25)
    assert compare_arrays(got, want, Tolerance(0.5, 0.01, "elemwise")).passed
    assert compare_arrays(got, want, Tolerance(0.1, 0.25, "elemwise")).passed
    # max/mean/median compare that statistic of each error against atol/rtol.
    mean_abs = (0.5 + 0.001 + 0.2) / 4
    assert compare_arrays(got, want, Tolerance(mean_abs * 1.01, 0, "mean")).passed
    assert not compare_arrays(got, want, Tolerance(mean_abs * 0.99, 0, "mean")).passed
    assert compare_arrays(got, want, Tolerance(0.11, 0, "median")).passed  # (.001 + .2) / 2
    assert not compare_arrays(got, want, Tolerance(0.09, 0, "median")).passed
    assert not compare_arrays(got, want, Tolerance(0.4, 0, "max")).passed
    same = compare_arrays(want, want, Tolerance(0, 0, "elemwise"))
    assert same.passed and same.cosine == pytest.approx(1.0)
    bad = compare_arrays(np.zeros(3), np.zeros(4), Tolerance(1, 1, "elemwise"))
    assert not bad.passed and "shape" in bad.reason


def test_per_name_flags():
    p = parse_per_name("1e-3,out0:1e-2", "--atol", "1e-5", True)
    assert (p.get("out0"), p.get("other")) == ("1e-2", "1e-3")
    assert parse_per_name("a:max", "--check-error-stat", "elemwise", False).get("a") == "max"
    with pytest.raises(FlagError):
        parse_per_name("x:abc", "--atol", "1e-5", True)
    with pytest.raises(FlagError):
        parse_per_name("p99", "--check-error-stat", "elemwise", False)


def test_layerwise_passes_on_a_faithful_engine(engine, capsys):
    onnx_path, bin_path = engine
    assert main(["compare", str(onnx_path), f"--loadEngine={bin_path}", "--layerwise",
                 "--atol=1e-4", "--rtol=1e-4"]) == 0
    out = unstamped(capsys.readouterr().out)
    assert "=== Layerwise: 3 layer outputs of 3 layers compared ===" in out
    verdicts = [line for line in out.splitlines() if "PASSED |" in line or "FAILED |" in line
                and not line.startswith("[I]     ")]
    assert verdicts[-1] == ("[I] PASSED | all 1 outputs match; all 3 layer outputs "
                            "within layerwise tolerance")


def test_layerwise_names_the_perturbed_layer(engine, tmp_path, capsys):
    onnx_path, bin_path = engine
    bad = tmp_path / "perturbed.bin"
    bad.write_bytes(perturb_weight(bin_path.read_bytes(), "conv2"))
    rc = main(["compare", str(onnx_path), f"--loadEngine={bad}", "--layerwise", "--atol=1e-4",
               "--rtol=1e-4"])
    out = unstamped(capsys.readouterr().out)
    assert rc == 1
    assert "First divergent layer: #1 'conv2' (Conv, fp32" in out
    assert "fused ONNX nodes: conv2, bn2, relu2" in out
    assert "its inputs (x1) match onnxruntime: the error starts in this layer" in out
    rows = [line for line in out.splitlines() if "<- FAILED" in line]
    assert rows[0].split()[2] == "conv2"  # later layers diverge too, but after it
    assert out.splitlines()[-1].startswith("[E] FAILED | 1 of 1 outputs differ")
    assert out.splitlines()[-1].endswith("; first divergent layer #1 'conv2'")


def test_layerwise_fp16_uses_per_precision_tolerances(engine, capsys):
    """An fp16 engine within fp16's accuracy: every layer passes at the fp16 default (the fp32
    Cast back carries fp16's tolerance), one verdict line, and the exit status agrees."""
    onnx_path, _ = engine
    argv = ["compare", str(onnx_path), "--autocast=fp16", "--layerwise"]
    assert main([*argv, "--atol=1e-2", "--rtol=1e-2"]) == 0
    out = unstamped(capsys.readouterr().out)
    assert "<- FAILED" not in out and " fp16 " in out and "0.02/0.02" in out
    verdicts = [line for line in out.splitlines() if line.startswith(("[I] PASSED |",
                                                                       "[E] FAILED |"))]
    assert verdicts == [out.splitlines()[-1]] and "PASSED | all 1 outputs match; all" in out
    # Given layerwise tolerances are used as given: far too tight, the first layer fails.
    assert main([*argv, "--atol=1e-2", "--rtol=1e-2", "--layerwise-atol=1e-7",
                 "--layerwise-rtol=1e-7"]) == 1
    last = unstamped(capsys.readouterr().out).splitlines()[-1]
    assert last.startswith("[E] FAILED | all 1 outputs match; first divergent layer")


def test_folded_layers_compare_against_the_group_output(engine):
    """conv2 absorbed bn2 and relu2; conv1's engine tensor stands for relu1's x1, etc."""
    onnx_path, bin_path = engine
    import onnx

    prog = read_loadable(bin_path.read_bytes())
    names = reference_names(prog, onnx.load(onnx_path))
    assert [names[lay.outputs[0]] for lay in prog.layers] == ["x1", "x2", "y"]
