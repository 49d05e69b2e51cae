"""The SVTR family writes LayerNorm and GELU with primitive ops: the builder must recognise
every one of them and still match onnxruntime."""

from collections import Counter

import pytest

from pydla.builder import BuildOptions, build
from pydla.engine import LoadedModule
from pydla.loadable import LayerInfo, read_loadable
from tests.models.families import svtr
from tests.oracle import model_tolerance_ok, run_ort

DEPTH = 2  # svtr()'s default: two blocks, each with two LayerNorms and one MLP GELU


def op_counts(layers: tuple[LayerInfo, ...]) -> Counter:
    """Ops of the layers and of the pointwise programs and epilogues fused into them."""
    counts: Counter = Counter()
    for lay in layers:
        counts[lay.op] += 1
        programs = [lay.attrs.get("program"), (lay.attrs.get("epilogue") or {}).get("program")]
        for program in filter(None, programs):
            counts.update(step["op"] for step in program)
    return counts


@pytest.fixture(scope="module")
def svtr_model():
    return svtr()


def test_svtr_layernorms_and_gelus_are_recognised(svtr_model):
    model, feeds = svtr_model
    data = build(model, BuildOptions(verify_passes=True))
    counts = op_counts(read_loadable(data).layers)
    assert counts["LayerNormalization"] == 2 * DEPTH
    assert counts["Gelu"] == DEPTH
    assert all(counts[op] == 0 for op in ("Erf", "Sqrt", "Pow", "Sub"))
    assert counts["ReduceMean"] == 1  # only the height pooling of the head remains
    got = LoadedModule(data).run(feeds)
    model_tolerance_ok(got, run_ort(model, feeds))


@pytest.mark.parametrize("disabled,op", [("recognize_layernorm", "LayerNormalization"),
                                         ("recognize_gelu", "Gelu")])
def test_the_passes_are_what_recognise_them(svtr_model, disabled, op):
    model, feeds = svtr_model
    data = build(model, BuildOptions(disabled_passes=[disabled], verify_passes=True))
    assert op_counts(read_loadable(data).layers)[op] == 0
    model_tolerance_ok(LoadedModule(data).run(feeds), run_ort(model, feeds))
