"""Optimization profiles (--minShapes/--optShapes/--maxShapes): one loadable with a plan per
shape set (pydla.plan.profiles), every shape in range run exactly, against onnxruntime."""

from __future__ import annotations

import re

import numpy as np
import onnx
import pytest
from onnx import TensorProto
from onnx import helper as oh
from onnx import numpy_helper as nh

from pydla import api, cudla
from pydla.builder import BuildOptions, build
from pydla.engine.faults import InvalidParamError
from pydla.engine.module import LoadedModule, ProfileShapeError
from pydla.errors import BuildError
from pydla.loadable import read_loadable
from pydla.loadable.format import HEADER
from pydla.session import InferenceSession

ort = pytest.importorskip("onnxruntime")

X = (3, 8, 8)  # an image's shape after the batch


def _model(nodes: list, outputs: list, inits: list, x_dims: list) -> onnx.ModelProto:
    graph = oh.make_graph(nodes, "profiles", [oh.make_tensor_value_info(
        "x", TensorProto.FLOAT, x_dims)], outputs, inits)
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])


def batch_model() -> onnx.ModelProto:
    """A classifier with a symbolic batch: each row's answer is its own."""
    rng = np.random.default_rng(0)
    inits = [nh.from_array(rng.standard_normal((16, 3, 3, 3)).astype(np.float32), "w"),
             nh.from_array(rng.standard_normal(16).astype(np.float32), "b"),
             nh.from_array(rng.standard_normal((256, 64)).astype(np.float32) / 16, "g")]
    nodes = [oh.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             oh.make_node("Relu", ["c"], ["r"]),
             oh.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
             oh.make_node("Flatten", ["p"], ["f"], axis=1),
             oh.make_node("MatMul", ["f", "g"], ["m"]),
             oh.make_node("Softmax", ["m"], ["y"], axis=1),
             oh.make_node("ReduceMean", ["r"], ["z"], axes=[2, 3], keepdims=0)]
    return _model(nodes, [oh.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 64]),
                          oh.make_tensor_value_info("z", TensorProto.FLOAT, ["N", 16])],
                  inits, ["N", *X])


def centred_model() -> onnx.ModelProto:
    """x minus its mean over the batch: rows depend on each other, padding would be wrong."""
    nodes = [oh.make_node("ReduceMean", ["x"], ["mu"], axes=[0], keepdims=1),
             oh.make_node("Sub", ["x", "mu"], ["y"])]
    return _model(nodes, [oh.make_tensor_value_info("y", TensorProto.FLOAT, ["N", *X])], [],
                  ["N", *X])


def spatial_model() -> onnx.ModelProto:
    """A convolution over images of any height."""
    w = nh.from_array(np.random.default_rng(1).standard_normal((4, 3, 3, 3)).astype(np.float32),
                      "w")
    nodes = [oh.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             oh.make_node("Relu", ["c"], ["y"])]
    return _model(nodes, [oh.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, "H", 8])],
                  [w], [1, 3, "H", 8])


def profile(lo: tuple, opt: tuple, hi: tuple, **kw: object) -> BuildOptions:
    # no autotuning: the plans' kernels are chosen by priority, which keeps the test fast
    return BuildOptions(min_shapes={"x": lo}, opt_shapes={"x": opt}, max_shapes={"x": hi},
                        autotune=False, **kw)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def batched() -> bytes:
    return build(batch_model(), profile((1, *X), (4, *X), (8, *X)))


def x_of(shape: tuple) -> np.ndarray:
    return np.random.default_rng(sum(shape)).standard_normal(shape).astype(np.float32)


def oracle(model: onnx.ModelProto, x: np.ndarray) -> list[np.ndarray]:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": x})


def close(got: list[np.ndarray], want: list[np.ndarray]) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


def test_every_batch_in_range_runs_on_every_api(batched: bytes) -> None:
    program = read_loadable(batched)
    assert program.profiles is not None and program.profiles.pad_batch
    # opt first, then min, the powers of two between and max
    assert [p.shapes[0][0] for p in program.profiles.profiles] == [4, 1, 2, 8]
    module = LoadedModule(batched)
    session = InferenceSession(batched)
    assert session.get_inputs()[0].shape == [None, *X]
    assert [o.shape for o in session.get_outputs()] == [[None, 64], [None, 16]]
    with api.Device() as dev:
        mod = dev.load(batched)
        for b in range(1, 9):
            x = x_of((b, *X))
            want = oracle(batch_model(), x)
            close(module.run({"x": x}), want)
            close(mod.run({"x": x}), want)
            close(session.run(None, {"x": x}), want)
    assert len(module._plans) == 3  # bound on first use, each once


def test_padded_batch_equals_its_exact_build(batched: bytes) -> None:
    x = x_of((3, *X))  # no plan of its own: runs padded in the batch-4 plan
    exact = LoadedModule(build(batch_model(), BuildOptions(shapes={"x": (3, *X)},
                                                           autotune=False)))
    for got, want in zip(LoadedModule(batched).run({"x": x}), exact.run({"x": x})):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


def test_cudla_sees_profile_0(batched: bytes) -> None:
    dev = cudla.create_device(0, cudla.Mode.CUDA_DLA)
    try:
        mod = cudla.module_load_from_memory(dev, batched, len(batched), 0)
        kinds = cudla.ModuleAttributeType
        ins = cudla.module_get_attributes(mod, kinds.INPUT_TENSOR_DESCRIPTORS)
        outs = cudla.module_get_attributes(mod, kinds.OUTPUT_TENSOR_DESCRIPTORS)
        cudla.module_unload(mod, 0)
    finally:
        cudla.destroy_device(dev)
    assert (ins[0].n, ins[0].c, ins[0].h, ins[0].w) == (4, *X)
    assert [d.n for d in outs] == [4, 4]


def test_weights_are_written_once(batched: bytes) -> None:
    def weights_size(data: bytes) -> int:
        return HEADER.unpack_from(data, 0)[8]

    single = build(batch_model(), BuildOptions(shapes={"x": (8, *X)}, autotune=False))
    assert weights_size(batched) == weights_size(single)  # four plans, one set of weights
    assert len(batched) < 1.5 * len(single) < 8 * len(single) / 4


def test_out_of_range_shapes_name_input_and_range(batched: bytes) -> None:
    module = LoadedModule(batched)
    with pytest.raises(ProfileShapeError, match=r"input 'x': shape \(9, 3, 8, 8\) is outside "
                       r"the optimization profile \[min \(1, 3, 8, 8\), max \(8, 3, 8, 8\)\]"):
        module.run({"x": x_of((9, *X))})
    with pytest.raises(ProfileShapeError, match="outside"):
        module.run({"x": x_of((2, 3, 8, 9))})
    with api.Device() as dev, pytest.raises(InvalidParamError, match="input 'x': shape"):
        dev.load(batched).run({"x": x_of((9, *X))})
    with pytest.raises(ProfileShapeError, match="outside"):
        InferenceSession(batched).run(None, {"x": x_of((9, *X))})


def test_unprovable_model_gets_exact_plans() -> None:
    logs: list[str] = []
    data = build(centred_model(), profile((1, *X), (2, *X), (4, *X), verbose=True,
                                          log=logs.append))
    program = read_loadable(data)
    assert program.profiles is not None and not program.profiles.pad_batch
    assert sorted(p.shapes[0][0] for p in program.profiles.profiles) == [1, 2, 3, 4]
    why = program.build["profile"]["why_exact"]
    assert "ReduceMean" in why and "axis 0" in why
    assert any("exact plans" in line for line in logs)
    module = LoadedModule(data)
    for b in range(1, 5):
        x = x_of((b, *X))
        close(module.run({"x": x}), oracle(centred_model(), x))


def test_too_many_exact_plans_refused_at_once() -> None:
    with pytest.raises(BuildError, match=r"needs 100 plans \(N in \[1, 100\]\), more than "
                       r"the limit 64 .*ReduceMean"):
        build(centred_model(), profile((1, *X), (2, *X), (100, *X)))


def test_dynamic_spatial_dim_gets_exact_plans() -> None:
    data = build(spatial_model(), profile((1, 3, 6, 8), (1, 3, 8, 8), (1, 3, 9, 8)))
    program = read_loadable(data)
    assert program.profiles is not None and not program.profiles.pad_batch
    assert "not axis 0" in program.build["profile"]["why_exact"]
    module = LoadedModule(data)
    for h in (6, 7, 8, 9):
        x = x_of((1, 3, h, 8))
        close(module.run({"x": x}), oracle(spatial_model(), x))


@pytest.mark.parametrize("kw, message", [
    ({"shapes": {"x": (2, *X)}}, "both --shapes and an optimization profile"),
    ({"opt_shapes": {}}, "--optShapes not given"),
    ({"min_shapes": {"x": (5, *X)}}, r"min \[5, 3, 8, 8\] <= opt \[4, 3, 8, 8\]"),
    ({"max_shapes": {"x": (8, 3, 8)}}, "differ in rank"),
    ({"opt_shapes": {"x": (4, *X), "y": (1,)}, "min_shapes": {"x": (1, *X), "y": (1,)},
      "max_shapes": {"x": (8, *X), "y": (1,)}}, r"names \['y'\], which are not inputs"),
    ({"int8": object()}, "without --int8"),
])
def test_bad_profiles_refused(kw: dict, message: str) -> None:
    base = {"min_shapes": {"x": (1, *X)}, "opt_shapes": {"x": (4, *X)},
            "max_shapes": {"x": (8, *X)}, "autotune": False}
    with pytest.raises(BuildError, match=message):
        build(batch_model(), BuildOptions(**{**base, **kw}))  # type: ignore[arg-type]


def _rows_model(nodes: list, out_dims: list, inits: list | None = None,
                x_type: int = TensorProto.FLOAT) -> onnx.ModelProto:
    graph = oh.make_graph(nodes, "rows", [oh.make_tensor_value_info("x", x_type, ["N", 4])],
                          [oh.make_tensor_value_info("y", TensorProto.FLOAT, out_dims)],
                          inits or [])
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])


def _i64(name: str, values: list) -> onnx.TensorProto:
    return nh.from_array(np.array(values, np.int64), name)


@pytest.mark.parametrize("model, why", [
    (_rows_model([oh.make_node("Transpose", ["x"], ["y"], perm=[1, 0])], [4, "N"]),
     r"perm \[1, 0\] moves axis 0"),
    (_rows_model([oh.make_node("Reshape", ["x", "s"], ["y"])], [1, None], [_i64("s", [1, -1])]),
     "does not keep the batch"),
    (_rows_model([oh.make_node("Shape", ["x"], ["sh"]),
                  oh.make_node("Gather", ["sh", "zero"], ["n"], axis=0),
                  oh.make_node("Cast", ["n"], ["nf"], to=TensorProto.FLOAT),
                  oh.make_node("Div", ["x", "nf"], ["y"])], ["N", 4], [_i64("zero", 0)]),
     "changes with the batch size"),
    (_rows_model([oh.make_node("Slice", ["x", "s", "e", "a"], ["y"])], ["N", 4],
                 [_i64("s", [1]), _i64("e", [2**62]), _i64("a", [0])]),
     "slices axis 0"),
    (_rows_model([oh.make_node("Slice", ["x", "s", "e", "a", "st"], ["y"])], ["N", 4],
                 [_i64("s", [-1]), _i64("e", [-(2**62)]), _i64("a", [0]), _i64("st", [-1])]),
     "Slice.* has attributes that change with the batch"),  # reversed rows
    (_rows_model([oh.make_node("ReduceSum", ["x"], ["y"], keepdims=1)], [1, 1]),
     "reduces over axis 0"),
    (_rows_model([oh.make_node("Gather", ["emb", "x"], ["g"], axis=0),
                  oh.make_node("ReduceMean", ["g"], ["y"], axes=[2], keepdims=0)], ["N", 4],
                 [nh.from_array(np.ones((10, 3), np.float32), "emb")], TensorProto.INT64),
     None),  # an embedding lookup keeps rows apart
    (_rows_model([oh.make_node("Reshape", ["x", "s3"], ["r"]),
                  oh.make_node("MatMul", ["r", "r"], ["mm"]),
                  oh.make_node("Reshape", ["mm", "s2"], ["y"])], ["N", 4],
                 [_i64("s3", [0, 2, 2]), _i64("s2", [0, 4])]),
     None),  # a batched product of two batched operands (attention's q·kᵀ)
])
def test_batch_row_analysis(model: onnx.ModelProto, why: str | None) -> None:
    from pydla.frontend.onnx import import_model
    from pydla.plan.profiles import batch_rows_independent

    graphs = [(import_model(model, {"x": (b, 4)}, {}), b) for b in (8, 7)]
    found = batch_rows_independent(graphs, {"x"})
    if why is None:
        assert found is None
    else:
        assert found is not None and re.search(why, found), found


def two_inputs_model() -> onnx.ModelProto:
    """x and y share the symbol N; z has a fixed shape."""
    w = nh.from_array(np.random.default_rng(2).standard_normal((4, 3)).astype(np.float32), "w")
    nodes = [oh.make_node("Mul", ["x", "y"], ["m"]), oh.make_node("Add", ["m", "z"], ["a"]),
             oh.make_node("MatMul", ["a", "w"], ["out"])]
    graph = oh.make_graph(nodes, "two", [
        oh.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4]),
        oh.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4]),
        oh.make_tensor_value_info("z", TensorProto.FLOAT, [4])],
        [oh.make_tensor_value_info("out", TensorProto.FLOAT, ["N", 3])], [w])
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])


def test_cli_profile_of_two_inputs(tmp_path: pytest.TempPathFactory) -> None:
    from pydla.tools.cli import main

    onnx_path, engine = tmp_path / "two.onnx", tmp_path / "two.bin"  # type: ignore[operator]
    onnx.save(two_inputs_model(), onnx_path)
    assert main(["build", f"--onnx={onnx_path}", f"--saveEngine={engine}",
                 "--minShapes=x:1x4,y:1x4", "--optShapes=x:2x4,y:2x4",
                 "--maxShapes=x:5x4,y:5x4", "--builderOptimizationLevel=2"]) == 0
    data = engine.read_bytes()
    program = read_loadable(data)
    assert program.profiles is not None and program.profiles.pad_batch
    assert [r.name for r in program.profiles.ranges] == ["x", "y", "z"]
    assert [p.shapes[0][0] for p in program.profiles.profiles] == [2, 1, 4, 5]
    module = LoadedModule(data)
    sess = ort.InferenceSession(two_inputs_model().SerializeToString(),
                                providers=["CPUExecutionProvider"])
    z = x_of((4,))
    for b in range(1, 6):
        feeds = {"x": x_of((b, 4)), "y": x_of((b + 10, 4))[:b], "z": z}
        close(module.run(feeds), sess.run(None, feeds))
    with pytest.raises(ProfileShapeError, match=r"inputs \['x', 'y'\] share the batch"):
        module.run({"x": x_of((3, 4)), "y": x_of((2, 4)), "z": z})


def test_range_the_model_cannot_run_refused() -> None:
    """A model that reshapes to a constant batch of 1 imports at no other batch."""
    model = _rows_model([oh.make_node("Reshape", ["x", "s"], ["y"])], [1, 4], [_i64("s", [1, 4])])
    with pytest.raises(BuildError, match=r"shapes \{'x': \(2, 4\)\} \(inside its range\) do "
                       "not import: .*Reshape"):
        build(model, BuildOptions(min_shapes={"x": (1, 4)}, opt_shapes={"x": (1, 4)},
                                  max_shapes={"x": (2, 4)}, autotune=False))


def test_cli_run_takes_shapes_in_the_profile(batched: bytes, tmp_path, capsys) -> None:
    from pydla.tools.cli import main

    engine = tmp_path / "b.bin"
    engine.write_bytes(batched)
    assert main(["run", str(engine), "--shapes=x:3x3x8x8"]) == 0
    assert "output y: shape=(3, 64)" in capsys.readouterr().out
    assert main(["run", str(engine), "--shapes=x:9x3x8x8"]) == 1
    assert capsys.readouterr().err.strip().endswith(
        "input 'x': shape (9, 3, 8, 8) is outside the optimization profile "
        "[min (1, 3, 8, 8), max (8, 3, 8, 8)]")
    assert main(["run", str(engine), "--shapes=q:1x2"]) == 1
