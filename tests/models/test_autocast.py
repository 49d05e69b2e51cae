"""--autocast=fp16: every family stays within cosine 0.999 of float32; layers that would
overflow on calibration data stay float32 and the build log says so."""

import numpy as np
import pytest
from onnx import helper

from pydla.builder import BuildOptions, build, build_graph, load_model
from pydla.dtypes import DType
from pydla.engine import LoadedModule
from pydla.errors import BuildError
from pydla.loadable import read_loadable
from pydla.passes import PassContext
from tests.models.families import FAMILIES
from tests.oracle import make_model, run_pydla


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b) + 1e-300))


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_fp16_autocast_cosine(family):
    model, feeds = FAMILIES[family]()
    ref = run_pydla(model, feeds)
    half = run_pydla(model, feeds, BuildOptions(autocast=DType.FLOAT16))
    prog = read_loadable(build(model, BuildOptions(autocast=DType.FLOAT16)))
    assert any(lay.precision == "fp16" for lay in prog.layers)
    for r, h in zip(ref, half):
        assert h.dtype == r.dtype  # network I/O keep their types
        assert cosine(r, h) >= 0.999


def overflow_model():
    # y = ((x * 1000) relu * 100) / 1e5: the middle values reach ~3e5 > fp16's 65504.
    return make_model(
        [helper.make_node("Mul", ["x", "k1"], ["a"], name="scale_up"),
         helper.make_node("Relu", ["a"], ["b"], name="relu"),
         helper.make_node("Mul", ["b", "k2"], ["c"], name="scale_more"),
         helper.make_node("Div", ["c", "k3"], ["d"], name="scale_down"),
         helper.make_node("MatMul", ["d", "w"], ["y"], name="project")],
        {"x": (np.float32, [4, 8])}, ["y"],
        {"k1": np.float32(1000), "k2": np.float32(100), "k3": np.float32(1e5),
         "w": np.random.default_rng(0).standard_normal((8, 8)).astype(np.float32)})


def test_overflowing_layer_stays_fp32_with_calibration():
    model = overflow_model()
    x = np.random.default_rng(1).uniform(0, 3, (4, 8)).astype(np.float32)
    ref = run_pydla(model, {"x": x})[0]
    # Without calibration data the overflow goes unnoticed: fp16 intermediates become inf.
    blind = run_pydla(model, {"x": x}, BuildOptions(autocast=DType.FLOAT16, opt_level=0))[0]
    assert not np.isfinite(blind).all()
    opts = BuildOptions(autocast=DType.FLOAT16, calibration=[{"x": x}], opt_level=0)
    ctx = PassContext()
    build_graph(load_model(model), opts, ctx)
    kept = [m for m in ctx.log if "overflow" in m]
    assert any("scale_more" in m for m in kept), ctx.log
    got = LoadedModule(build(model, opts)).run([x])[0]
    assert np.isfinite(got).all()
    assert cosine(got, ref) >= 0.999
    prog = read_loadable(build(model, opts))
    prec = {lay.name: lay.precision for lay in prog.layers}
    assert prec["scale_more"] == "fp32" and prec["project"] == "fp16"


def test_sensitive_layers_and_overrides():
    model = make_model(
        [helper.make_node("MatMul", ["x", "w"], ["h"], name="fc"),
         helper.make_node("Softmax", ["h"], ["y"], name="softmax", axis=-1)],
        {"x": (np.float32, [2, 8])}, ["y"],
        {"w": np.ones((8, 8), np.float32)})
    prog = read_loadable(build(model, BuildOptions(autocast=DType.FLOAT16, opt_level=0)))
    prec = {lay.name: lay.precision for lay in prog.layers}
    assert prec["softmax"] == "fp32" and prec["fc"] == "fp16"
    prog = read_loadable(build(model, BuildOptions(autocast=DType.FLOAT16, opt_level=0,
                                                   layer_precisions={"fc": "fp32"})))
    assert {lay.name: lay.precision for lay in prog.layers}["fc"] == "fp32"
    with pytest.raises(BuildError, match="unknown layers"):
        build(model, BuildOptions(autocast=DType.FLOAT16, layer_precisions={"nope": "fp32"}))
    with pytest.raises(BuildError, match="adjusts --autocast"):
        build(model, BuildOptions(layer_precisions={"fc": "fp32"}))


@pytest.mark.parametrize("opt_level", [0, 3])
def test_casts_of_wide_integers_stay_fp32(opt_level):
    # MatMulInteger's int32 sums reach 64·255·127 ≈ 2.1e6 here, far past fp16's 65504: the
    # Cast (fused with the scale at level 3) keeps float32, the scaled product is small
    from onnx import TensorProto

    b = np.random.default_rng(0).integers(-127, 128, (64, 4)).astype(np.int8)
    model = make_model([helper.make_node("MatMulInteger", ["a", "b"], ["acc"], name="mmi"),
                        helper.make_node("Cast", ["acc"], ["f"], to=TensorProto.FLOAT,
                                         name="to_float"),
                        helper.make_node("Mul", ["f", "s"], ["y"], name="scale")],
                       {"a": (np.uint8, (1, 64))}, ["y"], {"b": b, "s": np.float32(1e-4)})
    a = np.full((1, 64), 255, np.uint8)
    ctx = PassContext()
    opts = BuildOptions(autocast=DType.FLOAT16, opt_level=opt_level, autotune=False)
    build_graph(load_model(model), opts, ctx)
    assert any("kept" in m and "wide integers" in m for m in ctx.log), ctx.log
    got = LoadedModule(build(model, opts)).run([a])[0]
    want = run_pydla(model, {"a": a})[0]
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, want, rtol=1e-3)
