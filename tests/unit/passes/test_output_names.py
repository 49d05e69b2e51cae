"""Names are the interface: graph inputs and outputs keep their ONNX names whatever the
passes remove or fuse (issue 27). Each model's outputs come from a layer a pass removes
(Identity, Mul by 1, Reshape/Cast to the same type and shape), an output is also an input,
or two outputs are the same tensor; every pass alone, and the whole pass manager, must keep
every output under its name and value."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto

from pydla.builder import BuildOptions, build
from pydla.engine import LoadedModule
from pydla.ir import Graph
from pydla.passes import PassContext, PassManager, default_passes
from tests.oracle import assert_close, run_ort
from tests.unit.passes.helpers import apply, feeds_for, imported, model, node, run_graph

SHAPE = [2, 3, 4]
ONE = {"one": np.ones((), np.float32)}


def _models() -> dict[str, onnx.ModelProto]:
    relu = node("Relu", ["x"], "r")
    return {
        "identity": model([relu, node("Identity", ["r"], "y")], {"x": SHAPE}, ["y"]),
        "mul_by_one": model([relu, node("Mul", ["r", "one"], "y")], {"x": SHAPE}, ["y"], ONE),
        "reshape_to_same": model([relu, node("Reshape", ["r", "s"], "y")], {"x": SHAPE},
                                 ["y"], {"s": np.array(SHAPE, np.int64)}),
        "cast_to_same": model([relu, node("Cast", ["r"], "y", to=TensorProto.FLOAT)],
                              {"x": SHAPE}, ["y"]),
        # paddle2onnx's scale(1) after softmax: both tensors are outputs (SLANet's case).
        "softmax_then_scale": model([node("Softmax", ["x"], "softmax_0.tmp_0", axis=-1),
                                     node("Identity", ["softmax_0.tmp_0"], "scale_0.tmp_1")],
                                    {"x": SHAPE}, ["scale_0.tmp_1", "softmax_0.tmp_0"]),
        "identity_of_input": model([node("Identity", ["x"], "y")], {"x": SHAPE}, ["y"]),
        "output_is_input": _also_output_input(model([relu], {"x": SHAPE}, ["r"])),
        "two_outputs_one_tensor": model([relu, node("Identity", ["r"], "y1"),
                                         node("Identity", ["r"], "y2")],
                                        {"x": SHAPE}, ["y1", "y2"]),
        "chain_of_noops": model([relu, node("Identity", ["r"], "a"),
                                 node("Mul", ["a", "one"], "b"),
                                 node("Reshape", ["b", "s"], "c"),
                                 node("Cast", ["c"], "y", to=TensorProto.FLOAT)],
                                {"x": SHAPE}, ["y", "a"],
                                {**ONE, "s": np.array(SHAPE, np.int64)}),
    }


def _also_output_input(m: onnx.ModelProto) -> onnx.ModelProto:
    """The graph input ``x`` is also the second graph output (ONNX allows it)."""
    m.graph.output.append(m.graph.input[0])
    onnx.checker.check_model(m)
    return m


MODELS = _models()
PASSES = [p.name for p in default_passes()]


def _check(m: onnx.ModelProto, g: Graph) -> None:
    names = [o.name for o in m.graph.output]
    assert [v.name for v in g.outputs] == names
    assert len({id(v) for v in g.outputs}) == len(names), "each output is its own tensor"
    feeds = feeds_for(m)
    assert_close(run_graph(g, feeds), run_ort(m, feeds), 1e-5, 1e-6, names)


@pytest.mark.parametrize("case", sorted(MODELS))
def test_import_keeps_output_names(case):
    _check(MODELS[case], imported(MODELS[case]))


@pytest.mark.parametrize("pass_name", PASSES)
@pytest.mark.parametrize("case", sorted(MODELS))
def test_each_pass_keeps_output_names(case, pass_name):
    m = MODELS[case]
    g = imported(m)
    apply(g, *[p for p in default_passes() if p.name == pass_name])
    _check(m, g)


@pytest.mark.parametrize("case", sorted(MODELS))
def test_pass_manager_keeps_output_names(case):
    m = MODELS[case]
    g = imported(m)
    PassManager(default_passes(), verify_each=True).run(g, PassContext())
    _check(m, g)


@pytest.mark.parametrize("case", ["softmax_then_scale", "output_is_input",
                                  "two_outputs_one_tensor", "chain_of_noops"])
def test_loadable_io_descriptors_carry_onnx_names(case):
    """Through the builder, the loadable's tensor descriptors name inputs and outputs as
    the model does, so a program finds each output by its ONNX name."""
    m = MODELS[case]
    module = LoadedModule(build(m, BuildOptions()))
    assert module.input_names == [i.name for i in m.graph.input]
    assert module.output_names == [o.name for o in m.graph.output]
    assert [d.name for d in module.output_descriptors] == module.output_names


def test_removed_identity_renames_its_producer():
    """The no-ops go; the layer that wrote their input now writes an output's name, and one
    no-op stays as the copy into the second output (both outputs are the same tensor)."""
    m = MODELS["chain_of_noops"]
    g = imported(m)
    PassManager(default_passes()).run(g, PassContext())
    relu, copy = g.nodes
    assert relu.op == "Relu" and relu.outputs[0].name == "a"
    assert copy.inputs[0] is relu.outputs[0] and copy.outputs[0].name == "y"


def test_output_that_is_an_input_keeps_a_copy_layer():
    g = imported(MODELS["output_is_input"])
    PassManager(default_passes()).run(g, PassContext())
    x_out = g.outputs[1]
    assert x_out is not g.inputs[0] and x_out.producer is not None
    assert x_out.producer.op == "Identity" and x_out.producer.inputs[0] is g.inputs[0]


def test_passes_keep_value_when_both_aliases_are_outputs():
    x = np.arange(24, dtype=np.float32).reshape(SHAPE) - 12
    m = MODELS["two_outputs_one_tensor"]
    g = imported(m)
    PassManager(default_passes()).run(g, PassContext())
    got = run_graph(g, {"x": x})
    assert np.array_equal(got[0], np.maximum(x, 0)) and np.array_equal(got[1], got[0])
