"""The Loop layer (a body sub-program run per iteration) against onnxruntime, and its
refusals: shapes a loop cannot keep, a tampered body, a runaway loop."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from pydla.builder import BuildOptions, build
from pydla.dtypes import DType
from pydla.engine import LoadedModule
from pydla.errors import KernelError, LoadableError, ModelImportError, NotConstantError
from pydla.formats import describe
from pydla.loadable import read_loadable
from tests.oracle import check_against_ort, make_model, run_ort
from tests.unit.test_loadable import meta_of, resign

RNG = np.random.default_rng(31)
F, I64, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL
FAST = BuildOptions(autotune=False)


def _vi(name: str, elem: int, shape: list) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, shape)


def _const(name: str, value: np.ndarray) -> onnx.NodeProto:
    return helper.make_node("Constant", [], [name],
                            value=onnx.numpy_helper.from_array(np.asarray(value), name))


def _body(stop: str) -> onnx.GraphProto:
    """y = y·0.5 + x (x read from the outer graph); cond per ``stop``: "limit" stops once
    i ≥ the outer ``limit`` (data), "sum" once sum(y) > 3, "never" hands c_in back."""
    nodes = [_const("half", np.float32(0.5)),
             helper.make_node("Mul", ["y_in", "half"], ["y_half"]),
             helper.make_node("Add", ["y_half", "x"], ["y_out"])]
    if stop == "limit":
        nodes += [_const("one", np.int64(1)), helper.make_node("Add", ["i", "one"], ["i1"]),
                  helper.make_node("Less", ["i1", "limit"], ["c_out"])]
    elif stop == "sum":
        nodes += [_const("three", np.float32(3.0)),
                  helper.make_node("ReduceSum", ["y_out"], ["s"], keepdims=0),
                  helper.make_node("LessOrEqual", ["s", "three"], ["c_out"])]
    else:
        nodes.append(helper.make_node("Identity", ["c_in"], ["c_out"]))
    return helper.make_graph(nodes, "body", [_vi("i", I64, []), _vi("c_in", B, []),
                                             _vi("y_in", F, [2, 3])],
                             [_vi("c_out", B, []), _vi("y_out", F, [2, 3])])


def _model(stop: str, m: str, cond: str, inits: dict, extra_inputs: dict) -> onnx.ModelProto:
    node = helper.make_node("Loop", [m, cond, "y0"], ["y"], body=_body(stop))
    inputs = {"y0": (np.float32, [2, 3]), "x": (np.float32, [2, 3]), **extra_inputs}
    return make_model([node], inputs, ["y"], inits, opset=13)


def _feeds(**more: np.ndarray) -> dict[str, np.ndarray]:
    return {"y0": RNG.standard_normal((2, 3)).astype(np.float32),
            "x": RNG.random((2, 3)).astype(np.float32), **more}


def _ops(data: bytes) -> list[str]:
    return [lay.op for lay in read_loadable(data).layers]


@pytest.mark.parametrize("limit", [0, 1, 4, 9])
def test_a_condition_from_data_exits_early(limit: int) -> None:
    model = _model("limit", "M", "cond", {"M": np.array(7, np.int64), "cond": np.array(True)},
                   {"limit": (np.int64, [])})
    check_against_ort(model, _feeds(limit=np.array(limit, np.int64)), options=FAST)


@pytest.mark.parametrize("trips", [0, 1, 5])
def test_a_trip_count_from_data_alone(trips: int) -> None:
    model = _model("never", "M", "", {}, {"M": (np.int64, [])})
    check_against_ort(model, _feeds(M=np.array(trips, np.int64)), options=FAST)


def test_a_condition_alone_runs_until_the_body_says_stop() -> None:
    model = _model("sum", "", "cond", {}, {"cond": (np.bool_, [])})
    check_against_ort(model, _feeds(cond=np.array(True)), options=FAST)
    check_against_ort(model, _feeds(cond=np.array(False)), options=FAST)


def test_loop_carried_state_over_a_constant_trip_count_too_long_to_unroll() -> None:
    # 2,000 copies of the body pass the unrolling budget: one Loop layer instead
    model = _model("never", "M", "", {"M": np.array(2000, np.int64)}, {})
    data = build(model, FAST)
    assert "Loop" in _ops(data)
    check_against_ort(model, _feeds(), options=FAST)


def test_a_loop_of_constants_too_long_to_unroll_stays_a_layer() -> None:
    # every input constant: fold_constants must leave the layer to the program running it
    node = helper.make_node("Loop", ["M", "", "y0"], ["y"], body=_body("never"))
    add = helper.make_node("Add", ["y", "z"], ["out"])
    model = make_model([node, add], {"z": (np.float32, [2, 3])}, ["out"],
                       {"M": np.array(2000, np.int64), "y0": np.ones((2, 3), np.float32),
                        "x": np.full((2, 3), 0.25, np.float32)}, opset=13)
    check_against_ort(model, {"z": np.ones((2, 3), np.float32)}, options=FAST)


def test_a_scan_output_asks_for_its_runtime_trip_count_as_a_build_time_value() -> None:
    """onnx_backend then builds again with the value fixed, and the loop unrolls."""
    body = _body("never")
    body.output.append(_vi("y_out", F, [2, 3]))
    node = helper.make_node("Loop", ["M", "", "y0"], ["y", "ys"], body=body)
    model = make_model([node], {"M": (np.int64, []), "y0": (np.float32, [2, 3]),
                                "x": (np.float32, [2, 3])}, ["y", "ys"], opset=13)
    with pytest.raises(NotConstantError, match="1 scan outputs") as e:
        build(model, FAST)
    assert e.value.value == "M"
    feeds = _feeds(M=np.array(4, np.int64))
    check_against_ort(model, feeds, options=BuildOptions(
        autotune=False, input_values={"M": feeds["M"]}))


@pytest.mark.parametrize("options", [BuildOptions(autotune=False, allow=(DType.FLOAT16,)),
                                     BuildOptions(autotune=False, autocast=DType.FLOAT16),
                                     BuildOptions(opt_level=0)], ids=["fp16", "autocast", "O0"])
def test_a_loop_keeps_the_networks_types_under_precision_flags(options: BuildOptions) -> None:
    """--fp16/--autocast convert the main graph, never a Loop's carried tensors (its body
    is built in the network's types; the reader would refuse the mismatch)."""
    node = helper.make_node("Loop", ["M", "", "y0"], ["y"], body=_body("never"))
    relu = helper.make_node("Relu", ["y"], ["out"])
    model = make_model([node, relu], {"M": (np.int64, []), "y0": (np.float32, [2, 3]),
                                      "x": (np.float32, [2, 3])}, ["out"], opset=13)
    check_against_ort(model, _feeds(M=np.array(3, np.int64)), rtol=2e-3, atol=2e-3,
                      options=options)


def test_int8_calibration_of_a_loop_is_refused_with_the_reason(tmp_path) -> None:  # noqa: ANN001
    from pydla.errors import BuildError
    from pydla.quantization import Int8Options

    calib = tmp_path / "calib.npz"
    np.savez(calib, **{k: v[None] for k, v in _counter_feeds(4).items()})
    with pytest.raises(BuildError, match="does not run a Loop layer's body"):
        build(_counter_model(), BuildOptions(autotune=False, int8=Int8Options(
            calib_data=str(calib), progress=False)))


def _invariant_model() -> onnx.ModelProto:
    """SLANet's pattern: encoder features carried through the loop as
    Squeeze(Add(Unsqueeze(f), 0)) ahead of the state, and MatMul(features, W) each step."""
    nodes = [_const("axes", np.array([0], np.int64)),
             _const("zeros", np.zeros((1, 2, 3), np.float32)),
             _const("w", RNG.standard_normal((3, 3)).astype(np.float32)),
             _const("half", np.float32(0.5)),
             helper.make_node("Unsqueeze", ["f_in", "axes"], ["f_u"]),
             helper.make_node("Add", ["f_u", "zeros"], ["f_a"]),
             helper.make_node("Squeeze", ["f_a", "axes"], ["f_out"]),
             helper.make_node("MatMul", ["f_in", "w"], ["proj"]),
             helper.make_node("Mul", ["h_in", "half"], ["h_half"]),
             helper.make_node("Add", ["h_half", "proj"], ["h_out"]),
             helper.make_node("Identity", ["k_in"], ["k_out"])]
    body = helper.make_graph(nodes, "body", [_vi("i", I64, []), _vi("k_in", B, []),
                                             _vi("f_in", F, [2, 3]), _vi("h_in", F, [2, 3])],
                             [_vi("k_out", B, []), _vi("f_out", F, [2, 3]),
                              _vi("h_out", F, [2, 3])])
    node = helper.make_node("Loop", ["M", "", "f0", "h0"], ["f", "h"], body=body)
    return make_model([node], {"M": (np.int64, []), "f0": (np.float32, [2, 3]),
                               "h0": (np.float32, [2, 3])}, ["f", "h"], opset=13)


def test_invariant_values_and_code_leave_the_loop() -> None:
    model = _invariant_model()
    program = read_loadable(build(model, FAST))
    body = program.subprograms[0]
    assert {lay.op for lay in body.layers} & {"MatMul", "Gemm"} == set()
    assert "MatMul" in {lay.op for lay in program.layers}  # hoisted: run once, before
    loop = next(lay for lay in program.layers if lay.op == "Loop")
    assert loop.attrs["num_carried"] == 1  # the features are no loop state
    feeds = {"M": np.array(4, np.int64), "f0": RNG.random((2, 3)).astype(np.float32),
             "h0": RNG.random((2, 3)).astype(np.float32)}
    check_against_ort(model, feeds, options=FAST)
    check_against_ort(model, {**feeds, "M": np.array(0, np.int64)}, options=FAST)


def test_a_short_constant_loop_is_still_unrolled() -> None:
    model = _model("never", "M", "", {"M": np.array(3, np.int64)}, {})
    assert "Loop" not in _ops(build(model, FAST))


def _counter_body() -> onnx.GraphProto:
    """SLANet's decoder writes: row c of ``table`` sliced with the carried counter c, and
    buf[:, c] = sum(y) through ScatterElements with indices from Range(c, c + 1)."""
    nodes = [_const("one", np.array([1], np.int64)), _const("zero", np.array([0], np.int64)),
             _const("shape11", np.array([1, 1], np.int64)),
             helper.make_node("Add", ["c_in", "one"], ["c_out"]),
             helper.make_node("Slice", ["table", "c_in", "c_out", "zero"], ["row"]),
             helper.make_node("Add", ["y_in", "row"], ["y_out"]),
             helper.make_node("Squeeze", ["c_in"], ["cs0"]),
             helper.make_node("Squeeze", ["c_out"], ["cs1"]),
             _const("step", np.int64(1)),
             helper.make_node("Range", ["cs0", "cs1", "step"], ["r"]),
             helper.make_node("Reshape", ["r", "shape11"], ["idx"]),
             helper.make_node("ReduceSum", ["y_out"], ["s"], keepdims=1),
             helper.make_node("ScatterElements", ["buf_in", "idx", "s"], ["buf_out"], axis=1),
             helper.make_node("Identity", ["k_in"], ["k_out"])]
    return helper.make_graph(
        nodes, "decoder", [_vi("i", I64, []), _vi("k_in", B, []), _vi("c_in", I64, [1]),
                           _vi("y_in", F, [1, 3]), _vi("buf_in", F, [1, 6])],
        [_vi("k_out", B, []), _vi("c_out", I64, [1]), _vi("y_out", F, [1, 3]),
         _vi("buf_out", F, [1, 6])])


def _counter_model() -> onnx.ModelProto:
    node = helper.make_node("Loop", ["M", "", "c0", "y0", "buf0"], ["c", "y", "buf"],
                            body=_counter_body())
    return make_model([node], {"M": (np.int64, []), "table": (np.float32, [6, 3]),
                               "y0": (np.float32, [1, 3])}, ["c", "y", "buf"],
                      {"c0": np.zeros(1, np.int64), "buf0": np.zeros((1, 6), np.float32)},
                      opset=13)


def _counter_feeds(trips: int) -> dict[str, np.ndarray]:
    return {"M": np.array(trips, np.int64), "table": RNG.random((6, 3)).astype(np.float32),
            "y0": RNG.random((1, 3)).astype(np.float32)}


@pytest.mark.parametrize("trips", [1, 6])
def test_slice_and_range_on_a_carried_counter(trips: int) -> None:
    ops = [lay.op for lay in read_loadable(build(_counter_model(), FAST)).subprograms[0].layers]
    assert {"DynamicSlice", "DynamicRange"} <= set(ops)
    check_against_ort(_counter_model(), _counter_feeds(trips), options=FAST)


def test_a_slice_that_would_change_shape_is_refused_at_run_time() -> None:
    module = LoadedModule(build(_counter_model(), FAST))
    with pytest.raises(KernelError, match=r"iteration 6, body layer .*take 0 elements of "
                       r"axis 0, the layer was planned with 1"):
        module.run(_counter_feeds(7))


def test_scan_outputs_of_a_runtime_length_are_refused() -> None:
    body = _body("never")
    body.output.append(_vi("y_out", F, [2, 3]))
    node = helper.make_node("Loop", ["M", "", "y0"], ["y", "ys"], body=body)
    model = make_model([node], {"M": (np.int64, []), "y0": (np.float32, [2, 3]),
                                "x": (np.float32, [2, 3])}, ["y"], opset=13)
    with pytest.raises(ModelImportError, match="1 scan outputs; a Loop run as a layer"):
        build(model, FAST)


# -- the loadable: the body is validated as the main program is ------------------------------

@pytest.fixture(scope="module")
def loop_loadable() -> bytes:
    return build(_model("never", "M", "", {}, {"M": (np.int64, [])}), FAST)


def _tamper(data: bytes, edit) -> bytes:  # noqa: ANN001
    meta = meta_of(data)
    edit(meta)
    return resign(data, meta)


def _loop_layer(meta: dict) -> dict:
    return next(lay for lay in meta["layers"] if lay["op"] == "Loop")


@pytest.mark.parametrize("edit,message", [
    (lambda m: m["subprograms"][0]["tensors"][0].update(shape=[5]),
     r"subprograms\[0\]\.tensors\[0\]\.nbytes"),
    (lambda m: m["subprograms"][0].update(arena_bytes=1 << 50),
     r"subprograms\[0\]\.arena_bytes"),
    (lambda m: m["subprograms"][0]["layers"][0].update(inputs=[999]),
     r"subprograms\[0\]\.layers\[0\]\.inputs\[0\]"),
    (lambda m: m["subprograms"][0]["outputs"].pop(), r"subprograms\[0\]\.outputs"),
    (lambda m: m.pop("subprograms"), r"sub-program 0 does not exist"),
    (lambda m: _loop_layer(m)["attrs"].update(max_iterations=2**40),
     r"attrs\.max_iterations"),
    (lambda m: _loop_layer(m)["attrs"].update(num_carried=2), r"Loop"),
])
def test_a_tampered_body_is_refused_naming_its_path(loop_loadable: bytes, edit,  # noqa: ANN001
                                                    message: str) -> None:
    read_loadable(loop_loadable)  # the untouched file passes
    with pytest.raises(LoadableError, match=message):
        read_loadable(_tamper(loop_loadable, edit))


def test_a_body_of_other_types_than_the_layer_is_refused(loop_loadable: bytes) -> None:
    def swap(meta: dict) -> None:
        body = meta["subprograms"][0]
        carried = body["tensors"][body["inputs"][2]["tensor"]]
        carried.update(dtype="int32")  # same bytes, another type: every other check passes
        desc = describe(carried["name"], "chw", tuple(carried["shape"]), DType.INT32).__dict__
        body["inputs"][2].update(dtype="int32", descriptor={**desc, "stride": list(
            desc["stride"])})
    with pytest.raises(LoadableError, match=r"its body subprograms\[0\]\.inputs\[2\]"):
        read_loadable(_tamper(loop_loadable, swap))


def test_the_iteration_cap_stops_a_runaway_loop(loop_loadable: bytes) -> None:
    capped = _tamper(loop_loadable, lambda m: _loop_layer(m)["attrs"].update(max_iterations=3))
    module = LoadedModule(capped)
    with pytest.raises(KernelError, match="still running after 3 iterations"):
        module.run(_feeds(M=np.array(4, np.int64)))
    got = module.run(_feeds(M=np.array(3, np.int64)))  # three iterations are allowed
    assert got[0].shape == (2, 3)


def test_the_loop_matches_onnxruntime_run_after_run(loop_loadable: bytes) -> None:
    """The bound body keeps no state between runs: each run starts from its inputs."""
    module = LoadedModule(loop_loadable)
    model = _model("never", "M", "", {}, {"M": (np.int64, [])})
    for trips in (5, 2, 0):
        feeds = _feeds(M=np.array(trips, np.int64))
        np.testing.assert_allclose(module.run(feeds)[0], run_ort(model, feeds)[0], rtol=1e-5)


def test_mutated_loop_loadables_end_typed() -> None:
    """Structure-aware mutations (tests/fuzz) of two Loop loadables, bodies included: each
    is refused or runs, always with a typed error."""
    from tests.fuzz.harness import run_input
    from tests.fuzz.loadables import mutated_loadable

    seeds = [build(_counter_model(), FAST),
             build(_model("limit", "M", "cond", {}, {"M": (np.int64, []),
                                                     "cond": (np.bool_, []),
                                                     "limit": (np.int64, [])}), FAST)]
    outcomes = {(k, i): run_input("structure", mutated_loadable(seed, "structure", i))
                for k, seed in enumerate(seeds) for i in range(24)}
    assert {c: o for c, o in outcomes.items() if o.split(":")[0] not in ("ok", "typed")} == {}
    assert sum(o == "ok" for o in outcomes.values()) < len(outcomes)  # mutations do land
