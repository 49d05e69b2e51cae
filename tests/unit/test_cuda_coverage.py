"""The CUDA backend's op coverage, known without a GPU: ``CUDA_OPS`` against the kernel
sources (parsed, not imported: no CuPy here), every CPU op either there or given a reason,
and ``pydla check --target=cuda`` on small models (types, gaps, JSON, --strict)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from pydla.backends.cuda.coverage import (
    CPU_ONLY,
    CUDA_OPS,
    check_cuda_model,
    registered_ops,
)
from pydla.tools.cli import main


def _cpu_ops() -> set[str]:
    import pydla.backends.cpu.kernels  # noqa: F401  (registers every CPU kernel)
    from pydla.backends.cpu.registry import KERNELS

    return set(KERNELS)


def test_every_cpu_op_has_a_cuda_kernel_or_a_written_reason() -> None:
    cpu = _cpu_ops()
    missing = sorted(cpu - CUDA_OPS - set(CPU_ONLY))
    assert not missing, f"CPU ops with neither a CUDA kernel nor a CPU_ONLY reason: {missing}"
    assert not set(CPU_ONLY) & CUDA_OPS, "an op both has a CUDA kernel and a reason not to"
    stale = sorted(set(CPU_ONLY) - cpu)
    assert not stale, f"CPU_ONLY names ops the CPU backend does not run: {stale}"
    assert all(len(why) > 10 for why in CPU_ONLY.values())


def test_cuda_ops_are_what_the_kernel_sources_register() -> None:
    found = registered_ops()
    assert set(found) == CUDA_OPS, (
        f"registered but not in CUDA_OPS: {sorted(set(found) - CUDA_OPS)}; "
        f"in CUDA_OPS but not registered: {sorted(CUDA_OPS - set(found))}")
    assert found["Conv"] == "conv.py" and found["ReduceLogSumExp"] == "reduce.py"


def test_the_source_parser_sees_every_form_of_registration(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text(
        "from pydla.ops import POINTWISE\n"
        "_TABLE = {'Foo': (f'{1}',), 'Bar': ()}\n"
        "@kernel('One', 'Two')\ndef f(): pass\n"
        "@kernel(*_TABLE, 'Baz')\ndef g(): pass\n"
        "kernel(*sorted(op for op in POINTWISE if op != 'Relu'))(f)\n")
    found = registered_ops(tmp_path)
    from pydla.ops import POINTWISE

    assert set(found) == {"One", "Two", "Foo", "Bar", "Baz"} | (POINTWISE - {"Relu"})
    (tmp_path / "b.py").write_text("@kernel('One')\ndef h(): pass\n")
    with pytest.raises(ValueError, match="One registered in a.py and b.py"):
        registered_ops(tmp_path)


def _model(nodes: list, inputs: list, outputs: list, inits: list | None = None,
           opset: int = 18) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, inits or [])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _vi(name: str, dtype: int, shape: list[int] | None) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, dtype, shape)


def _mixed() -> onnx.ModelProto:
    """A float conv (runs), an int64 ReduceSum (types: the reductions are float-only), a
    CumSum (no kernel), a float Gather with int64 run-time indices (runs)."""
    w = numpy_helper.from_array(np.ones((4, 2, 3, 3), np.float32), "w")
    axis = numpy_helper.from_array(np.array(3, np.int64), "axis")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("CumSum", ["c", "axis"], ["p"], name="cumsum"),
             helper.make_node("ReduceSum", ["ids"], ["g"], name="sum_int"),
             helper.make_node("Gather", ["p", "idx"], ["gf"], name="gather_float", axis=1)]
    return _model(nodes, [_vi("x", TensorProto.FLOAT, [1, 2, 8, 8]),
                          _vi("ids", TensorProto.INT64, [10]),
                          _vi("idx", TensorProto.INT64, [3])],
                  [_vi("p", TensorProto.FLOAT, None), _vi("g", TensorProto.INT64, None),
                   _vi("gf", TensorProto.FLOAT, None)], [w, axis])


def test_check_names_each_gap_with_its_reason() -> None:
    report = check_cuda_model(_mixed())
    by_name = {v.name: v for v in report.layers}
    assert by_name["conv"].supported and by_name["conv"].device == "GPU"
    assert by_name["gather_float"].supported
    cumsum = by_name["cumsum"]
    assert not cumsum.supported and cumsum.device == "none" and cumsum.refusal is not None
    assert cumsum.refusal.rule == "cuda.kernel"
    assert "no CUDA kernel for CumSum" in cumsum.refusal.reason
    reduce = by_name["sum_int"]
    assert not reduce.supported and reduce.refusal is not None
    assert reduce.refusal.rule == "cuda.types" and "int64" in reduce.refusal.reason
    assert report.gaps() == {"CumSum": 1, "ReduceSum": 1}
    conv_flops = 2 * 4 * 8 * 8 * 2 * 3 * 3
    total = sum(v.flops for v in report.layers)
    assert report.flops_fraction == pytest.approx(
        (conv_flops + by_name["gather_float"].flops) / total)
    assert report.summary().startswith("2 of 4 layers, ")
    assert report.summary().endswith("% of the FLOPs, have a CUDA kernel")


def test_integer_and_bool_tensors_by_op() -> None:
    """Moves, selections, comparisons, casts and integer arithmetic take integer and bool
    tensors; float-only kernels (Pow, the reductions) refuse them; float64 is stored only
    where a reshape is a memcpy."""
    one = numpy_helper.from_array(np.array([1], np.int64), "one")
    shape4 = numpy_helper.from_array(np.array([1, 1, 2, 5], np.int64), "shape4")
    shape2 = numpy_helper.from_array(np.array([2, 5], np.int64), "shape2")
    pads = numpy_helper.from_array(np.array([1, 0, 2, 1, 0, 2, 0, 0], np.int64), "pads")
    node = helper.make_node
    nodes = [node("Cast", ["x"], ["xi"], name="cast", to=TensorProto.INT64),
             node("Add", ["xi", "one"], ["s"], name="add_int"),
             node("Pow", ["s", "one"], ["pw"], name="pow_int"),
             node("Less", ["s", "one"], ["lt"], name="less_int"),
             node("Where", ["lt", "s", "one"], ["w"], name="where_int"),
             node("Reshape", ["w", "shape4"], ["r4"], name="reshape_int4"),
             node("Pad", ["r4", "pads"], ["pd"], name="pad_int", mode="edge"),
             node("ArgMax", ["pd"], ["am"], name="argmax_int", axis=3),
             node("Cast", ["x"], ["xd"], name="cast_f64", to=TensorProto.DOUBLE),
             node("Reshape", ["xd", "shape2"], ["d2"], name="reshape_f64_2"),
             node("Reshape", ["xd", "shape4"], ["d4"], name="reshape_f64_4")]
    outs = ["pw", "am", "d2", "d4"]
    model = _model(nodes, [_vi("x", TensorProto.FLOAT, [10])],
                   [_vi(o, 0, None) for o in outs], [one, shape4, shape2, pads])
    verdicts = {v.name: v for v in check_cuda_model(model).layers}
    refused = {name: v.refusal for name, v in verdicts.items() if not v.supported}
    assert set(refused) == {"pow_int", "cast_f64", "reshape_f64_4"}, refused
    assert all(r is not None and r.rule == "cuda.types" for r in refused.values())
    assert "integer arithmetic covers" in refused["pow_int"].reason
    assert "float64" in refused["reshape_f64_4"].reason


def test_cli_json_schema_and_strict(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    path = tmp_path / "m.onnx"
    onnx.save(_mixed(), path)
    out = tmp_path / "r.json"
    assert main(["check", "--target=cuda", str(path), "--json", str(out)]) == 0
    assert main(["check", "--target=cuda", str(path), "--strict"]) == 1
    assert main(["check", "--target=cuda", str(path), "--int8"]) != 0  # a DLA option
    text = capsys.readouterr().out
    assert "Layer cumsum (CumSum): none: no CUDA kernel for CumSum" in text
    assert "have a CUDA kernel" in text
    data = json.loads(out.read_text())
    assert data["target"] == "cuda" and data["total_layers"] == 4
    assert data["supported_layers"] == 2
    layer = data["layers"][0]
    # the DLA check's per-layer schema (docs/dla.md), device "GPU"/"none"
    assert set(layer) == {"name", "op", "supported", "device", "reason", "rule", "layer_type",
                          "onnx_nodes", "flops", "segment"}
    assert {v["device"] for v in data["layers"]} == {"GPU", "none"}


def test_cli_strict_passes_a_model_the_gpu_runs(tmp_path: Path) -> None:
    nodes = [helper.make_node("Relu", ["x"], ["y"]),
             helper.make_node("GlobalAveragePool", ["y"], ["z"])]
    path = tmp_path / "ok.onnx"
    onnx.save(_model(nodes, [_vi("x", TensorProto.FLOAT16, [1, 3, 4, 4])],
                     [_vi("z", TensorProto.FLOAT16, None)]), path)
    assert main(["check", "--target=cuda", str(path), "--strict"]) == 0


def test_as_built_checks_fused_programs(tmp_path: Path) -> None:
    """The builder fuses Relu, Less, Not and Where into the Conv's epilogue: bool steps
    run on the GPU, node by node and as built. An int64 chain fused into one program is
    refused as built by its Pow step (float-only), where the node check names the Pow."""
    w = numpy_helper.from_array(np.ones((2, 2, 1, 1), np.float32), "w")
    zero = numpy_helper.from_array(np.zeros((), np.float32), "zero")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv"),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("Less", ["r", "zero"], ["neg"], name="less"),
             helper.make_node("Not", ["neg"], ["pos"], name="not"),
             helper.make_node("Where", ["pos", "r", "zero"], ["y"], name="where")]
    x = _vi("x", TensorProto.FLOAT, [1, 2, 4, 4])
    model = _model(nodes, [x], [_vi("y", TensorProto.FLOAT, None)], [w, zero])
    assert check_cuda_model(model).gaps() == {}
    built = check_cuda_model(model, built=True).layers
    assert all(v.supported for v in built) and len(built) < len(nodes), built
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    assert main(["check", "--target=cuda", str(path), "--as-built", "--strict"]) == 0

    two = numpy_helper.from_array(np.array([2], np.int64), "two")
    chain = [helper.make_node("Add", ["i", "two"], ["a"], name="add"),
             helper.make_node("Pow", ["a", "two"], ["p"], name="pow"),
             helper.make_node("Mul", ["p", "two"], ["z"], name="mul")]
    ints = _model(chain, [_vi("i", TensorProto.INT64, [3, 4])],
                  [_vi("z", TensorProto.INT64, None)], [two])
    assert check_cuda_model(ints).gaps() == {"Pow": 1}
    [fused] = check_cuda_model(ints, built=True).layers
    assert fused.op == "Pointwise" and fused.refusal is not None
    assert fused.refusal.rule == "cuda.types"
    assert "step 1 (Pow) of the fused program computes int64" in fused.refusal.reason
    onnx.save(ints, path)
    assert main(["check", "--target=cuda", str(path), "--as-built", "--strict"]) == 1


def test_epilogue_extras_and_scatter_types() -> None:
    """A bool mask fused into a MatMul's epilogue (an extra input the typed epilogue code
    reads) runs as built; a scatter combines 2-, 4- and 8-byte numbers, not bytes."""
    w = numpy_helper.from_array(np.ones((8, 6), np.float32), "w")
    fill = numpy_helper.from_array(np.array(-1.0, np.float32), "fill")
    nodes = [helper.make_node("MatMul", ["a", "w"], ["m"], name="mm"),
             helper.make_node("Where", ["mask", "m", "fill"], ["y"], name="where")]
    model = _model(nodes, [_vi("a", TensorProto.FLOAT, [2, 5, 8]),
                           _vi("mask", TensorProto.BOOL, [1, 5, 6])],
                   [_vi("y", TensorProto.FLOAT, None)], [w, fill])
    built = check_cuda_model(model, built=True).layers
    assert len(built) == 1 and built[0].op == "MatMul" and built[0].supported, built

    idx = numpy_helper.from_array(np.array([[1, 0]], np.int64), "idx")
    for dtype, reduction, runs in ((TensorProto.UINT8, "add", False),
                                   (TensorProto.UINT8, "none", True),
                                   (TensorProto.INT32, "max", True)):
        node = helper.make_node("ScatterElements", ["x", "idx", "u"], ["s"], name="scatter",
                                axis=1, reduction=reduction)
        m = _model([node], [_vi("x", dtype, [1, 3]), _vi("u", dtype, [1, 2])],
                   [_vi("s", dtype, None)], [idx])
        [v] = check_cuda_model(m).layers
        assert v.supported is runs, (dtype, reduction, v.refusal)
        if not runs:
            assert v.refusal is not None and v.refusal.rule == "cuda.types"
            assert "2-, 4- and 8-byte" in v.refusal.reason


def test_1d_convolutions_run_and_3d_ones_are_named() -> None:
    """Conv and ConvTranspose of rank 3 run (as height-1 2-D ones), and 3-D Conv (its
    direct kernel, conv3d.py); a 3-D ConvTranspose is refused."""
    w1 = numpy_helper.from_array(np.ones((4, 3, 3), np.float32), "w1")
    w3 = numpy_helper.from_array(np.ones((4, 3, 1, 1, 1), np.float32), "w3")
    wt = numpy_helper.from_array(np.ones((3, 2, 4), np.float32), "wt")
    wt3 = numpy_helper.from_array(np.ones((3, 2, 1, 1, 1), np.float32), "wt3")
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"], name="conv1d", pads=[1, 1]),
             helper.make_node("ConvTranspose", ["x", "wt"], ["t"], name="deconv1d",
                              strides=[2]),
             helper.make_node("Conv", ["v", "w3"], ["b"], name="conv3d"),
             helper.make_node("ConvTranspose", ["v", "wt3"], ["t3"], name="deconv3d")]
    model = _model(nodes, [_vi("x", TensorProto.FLOAT, [1, 3, 9]),
                           _vi("v", TensorProto.FLOAT, [1, 3, 2, 4, 4])],
                   [_vi(o, TensorProto.FLOAT, None) for o in ("a", "t", "b", "t3")],
                   [w1, wt, w3, wt3])
    by_name = {v.name: v for v in check_cuda_model(model).layers}
    assert by_name["conv1d"].supported and by_name["deconv1d"].supported
    assert by_name["conv3d"].supported
    refusal = by_name["deconv3d"].refusal
    assert refusal is not None and refusal.rule == "cuda.shape"
    assert "3-D ConvTranspose" in refusal.reason
