import numpy as np
import pytest
from onnx import helper
from onnx.reference import ReferenceEvaluator

from pydla.errors import ModelImportError
from tests.oracle import assert_close, check_against_ort, make_model, run_pydla

COORDINATE_MODES = ["half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners",
                    "asymmetric", "tf_half_pixel_for_nn"]
NEAREST_MODES = ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"]
SHAPE = [1, 2, 4, 6]


def _data(shape, dtype=np.float32, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def _resize_model(shape, scales=None, sizes=None, roi=None, axes=None, opset=19,
                  dtype=np.float32, **attrs):
    inits = {"roi": np.array([] if roi is None else roi, np.float32)}
    if scales is not None:
        inits["scales"] = np.array(scales, np.float32)
        inputs = ["x", "roi", "scales"]
    else:
        inits["sizes"] = np.array(sizes, np.int64)
        inputs = ["x", "roi", "", "sizes"]
    if axes is not None:
        attrs["axes"] = axes
    node = helper.make_node("Resize", inputs, ["y"], **attrs)
    return make_model([node], {"x": (dtype, shape)}, ["y"], inits, opset=opset)


def _check(model, shape=SHAPE, dtype=np.float32, **kw):
    check_against_ort(model, {"x": _data(shape, dtype)}, **kw)


# tf_half_pixel_for_nn is a nearest-only mode (onnxruntime's linear and cubic kernels do not
# follow the spec formula for it).
@pytest.mark.parametrize("mode,coord", [(m, c) for m in ("nearest", "linear", "cubic")
                                        for c in COORDINATE_MODES
                                        if m == "nearest" or c != "tf_half_pixel_for_nn"])
@pytest.mark.parametrize("scale", [2.0, 0.5, 1.5])
def test_resize_scales(mode, coord, scale):
    model = _resize_model(SHAPE, scales=[1, 1, scale, scale], mode=mode,
                          coordinate_transformation_mode=coord,
                          opset=13 if coord == "tf_half_pixel_for_nn" else 19)
    _check(model)


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
@pytest.mark.parametrize("coord", ["half_pixel", "half_pixel_symmetric", "pytorch_half_pixel",
                                   "asymmetric"])
def test_resize_fractional_scales(mode, coord):
    # 4·0.6 and 6·0.7 are not whole: the output length is floored.
    model = _resize_model(SHAPE, scales=[1, 1, 0.6, 0.7], mode=mode,
                          coordinate_transformation_mode=coord)
    _check(model)


@pytest.mark.parametrize("mode", ["linear", "cubic"])
def test_resize_align_corners_fractional_scales_follow_onnx(mode):
    # ONNX's reference divides by the fractional output length scale·n - 1 here, and the
    # ONNX node tests expect that; onnxruntime uses the whole output length instead.
    model = _resize_model(SHAPE, scales=[1, 1, 0.6, 0.7], mode=mode,
                          coordinate_transformation_mode="align_corners")
    x = _data(SHAPE)
    assert_close(run_pydla(model, {"x": x}), ReferenceEvaluator(model).run(None, {"x": x}))


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
@pytest.mark.parametrize("coord", ["half_pixel", "pytorch_half_pixel", "align_corners",
                                   "asymmetric", "half_pixel_symmetric"])
@pytest.mark.parametrize("sizes", [[1, 2, 7, 3], [1, 2, 3, 9], [1, 2, 1, 1]])
def test_resize_sizes(mode, coord, sizes):
    model = _resize_model(SHAPE, sizes=sizes, mode=mode, coordinate_transformation_mode=coord)
    _check(model)


@pytest.mark.parametrize("nearest_mode", NEAREST_MODES)
@pytest.mark.parametrize("coord", ["half_pixel", "asymmetric", "align_corners"])
@pytest.mark.parametrize("sizes", [[1, 2, 8, 12], [1, 2, 3, 4], [1, 2, 6, 9]])
def test_resize_nearest_modes(nearest_mode, coord, sizes):
    model = _resize_model(SHAPE, sizes=sizes, mode="nearest", nearest_mode=nearest_mode,
                          coordinate_transformation_mode=coord)
    _check(model)


@pytest.mark.parametrize("nearest_mode", NEAREST_MODES)
@pytest.mark.parametrize("coord", ["half_pixel", "pytorch_half_pixel", "asymmetric",
                                   "half_pixel_symmetric", "tf_half_pixel_for_nn"])
@pytest.mark.parametrize("scales", [[1, 1, 0.7, 1.3], [1, 1, 2.5, 0.35]])
def test_resize_nearest_fractional_scales(nearest_mode, coord, scales):
    # Coordinates that fall exactly between two pixels in float32 pick the same pixel.
    model = _resize_model(SHAPE, scales=scales, mode="nearest", nearest_mode=nearest_mode,
                          coordinate_transformation_mode=coord,
                          opset=13 if coord == "tf_half_pixel_for_nn" else 19)
    _check(model)


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
@pytest.mark.parametrize("extrapolation", [0.0, 10.0])
def test_resize_tf_crop_and_resize(mode, extrapolation):
    roi = [0, 0, 0.2, -0.3, 1, 1, 1.1, 0.9]
    model = _resize_model(SHAPE, sizes=[1, 2, 5, 7], roi=roi, mode=mode,
                          coordinate_transformation_mode="tf_crop_and_resize",
                          extrapolation_value=extrapolation)
    _check(model)


def test_resize_tf_crop_and_resize_axes():
    model = _resize_model(SHAPE, sizes=[7, 5], roi=[-0.3, 0.2, 0.9, 1.1], axes=[3, 2],
                          mode="linear", coordinate_transformation_mode="tf_crop_and_resize")
    _check(model)


@pytest.mark.parametrize("a", [-0.5, -0.75])
@pytest.mark.parametrize("exclude_outside", [0, 1])
@pytest.mark.parametrize("scale", [2.0, 0.5])
def test_resize_cubic_options(a, exclude_outside, scale):
    model = _resize_model(SHAPE, scales=[1, 1, scale, scale], mode="cubic", cubic_coeff_a=a,
                          exclude_outside=exclude_outside)
    _check(model)


@pytest.mark.parametrize("mode", ["linear", "cubic"])
@pytest.mark.parametrize("sizes", [[1, 2, 2, 3], [1, 2, 3, 2], [1, 2, 8, 4]])
def test_resize_antialias(mode, sizes):
    model = _resize_model([1, 2, 8, 9], sizes=sizes, mode=mode, antialias=1)
    _check(model, shape=[1, 2, 8, 9])


@pytest.mark.parametrize("policy", ["stretch", "not_larger", "not_smaller"])
@pytest.mark.parametrize("axes", [[2, 3], [3, 2]])
def test_resize_axes_and_aspect_ratio(policy, axes):
    model = _resize_model(SHAPE, sizes=[5, 9], axes=axes, mode="nearest",
                          keep_aspect_ratio_policy=policy)
    _check(model)


def test_resize_scales_with_axes():
    model = _resize_model(SHAPE, scales=[2.0, 1.5], axes=[-1, 2], mode="linear")
    _check(model)


@pytest.mark.parametrize("shape,scales", [([3, 5], [2.0, 0.6]), ([2, 3, 4], [1.0, 2.0, 0.5]),
                                          ([1, 1, 2, 3, 4], [1, 1, 2.0, 1.5, 0.5])])
def test_resize_linear_ranks(shape, scales):
    model = _resize_model(shape, scales=scales, mode="linear")
    _check(model, shape=shape)


def test_resize_opset11_half_pixel_default():
    model = _resize_model(SHAPE, scales=[1, 1, 1.5, 2.0], mode="linear", opset=11)
    _check(model)


@pytest.mark.parametrize("mode", ["nearest", "linear"])
@pytest.mark.parametrize("scales", [[1, 1, 2.0, 3.0], [1, 1, 0.5, 0.7], [1, 1, 1.5, 2.5]])
def test_resize_opset10(mode, scales):
    node = helper.make_node("Resize", ["x", "scales"], ["y"], mode=mode)
    model = make_model([node], {"x": (np.float32, SHAPE)}, ["y"],
                       {"scales": np.array(scales, np.float32)}, opset=10)
    _check(model)


@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_upsample_opset7(mode):
    node = helper.make_node("Upsample", ["x"], ["y"], mode=mode, scales=[1.0, 1.0, 2.0, 1.5])
    model = make_model([node], {"x": (np.float32, SHAPE)}, ["y"], opset=7)
    _check(model)


@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_upsample_opset9(mode):
    node = helper.make_node("Upsample", ["x", "scales"], ["y"], mode=mode)
    model = make_model([node], {"x": (np.float32, SHAPE)}, ["y"],
                       {"scales": np.array([1, 1, 3.0, 2.0], np.float32)}, opset=9)
    _check(model)


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
def test_resize_fp16(mode):
    model = _resize_model(SHAPE, scales=[1, 1, 2.0, 1.5], mode=mode, dtype=np.float16)
    _check(model, dtype=np.float16, rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.int32])
def test_resize_nearest_integer(dtype):
    x = np.random.default_rng(1).integers(0, 100, SHAPE).astype(dtype)
    model = _resize_model(SHAPE, scales=[1, 1, 2.0, 0.5], mode="nearest", dtype=dtype)
    check_against_ort(model, {"x": x})


def test_resize_linear_uint8():
    # onnxruntime truncates integer results.
    x = np.random.default_rng(1).integers(0, 256, SHAPE).astype(np.uint8)
    model = _resize_model(SHAPE, sizes=[1, 2, 8, 12], mode="linear", dtype=np.uint8,
                          coordinate_transformation_mode="asymmetric")
    check_against_ort(model, {"x": x})


def test_resize_constant_folded():
    nodes = [helper.make_node("Resize", ["c", "roi", "scales"], ["r"], mode="linear"),
             helper.make_node("Add", ["x", "r"], ["y"])]
    model = make_model(nodes, {"x": (np.float32, [1, 1, 4, 6])}, ["y"],
                       {"c": _data([1, 1, 2, 3]), "roi": np.array([], np.float32),
                        "scales": np.array([1, 1, 2, 2], np.float32)}, opset=13)
    check_against_ort(model, {"x": _data([1, 1, 4, 6], seed=3)})


def test_resize_antialias_nearest_refused():
    model = _resize_model(SHAPE, scales=[1, 1, 0.5, 0.5], mode="nearest")
    model.graph.node[0].attribute.append(helper.make_attribute("antialias", 1))
    with pytest.raises(ModelImportError, match="antialias"):
        run_pydla(model, {"x": _data(SHAPE)})
