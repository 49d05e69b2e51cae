"""GridSample, AffineGrid, RoiAlign, TensorScatter, BitCast and Det against onnxruntime;
SwiGLU (which onnxruntime lacks) against onnx's reference evaluator."""

import numpy as np
import pytest
from onnx import helper
from onnx.reference import ReferenceEvaluator

from tests.oracle import assert_close, check_against_ort, make_model, run_pydla

RNG = np.random.default_rng(23)


def _model(node, feeds: dict, inits: dict | None = None, opset: int = 22):
    return make_model([node], {n: (a.dtype, a.shape) for n, a in feeds.items()},
                      list(node.output), inits, opset=opset)


def _check(node, feeds: dict, inits: dict | None = None, opset: int = 22,
           tol: float = 1e-5) -> None:
    check_against_ort(_model(node, feeds, inits, opset), feeds, rtol=tol, atol=tol)


def _check_reference(node, feeds: dict, opset: int, tol: float = 1e-6) -> None:
    """For cases onnxruntime does not implement."""
    model = _model(node, feeds, opset=opset)
    assert_close(run_pydla(model, feeds), ReferenceEvaluator(model).run(None, feeds), rtol=tol,
                 atol=tol)


def _grid(*shape) -> np.ndarray:
    # Beyond [-1, 1] so that every padding mode matters.
    return RNG.uniform(-1.4, 1.4, shape).astype(np.float32)


@pytest.mark.parametrize("mode", ["linear", "nearest", "cubic"])
@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align", [0, 1])
def test_grid_sample_2d(mode, padding, align):
    x = RNG.standard_normal((2, 3, 5, 4)).astype(np.float32)
    node = helper.make_node("GridSample", ["x", "g"], ["y"], mode=mode, padding_mode=padding,
                            align_corners=align)
    _check(node, {"x": x, "g": _grid(2, 6, 3, 2)})


@pytest.mark.parametrize("mode", ["linear", "nearest"])
@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
def test_grid_sample_3d(mode, padding):
    x = RNG.standard_normal((1, 2, 3, 4, 5)).astype(np.float32)
    node = helper.make_node("GridSample", ["x", "g"], ["y"], mode=mode, padding_mode=padding)
    _check(node, {"x": x, "g": _grid(1, 2, 3, 4, 3)})


def test_grid_sample_opset16_names_and_fp16():
    x = RNG.standard_normal((1, 2, 4, 4)).astype(np.float32)
    for mode in ("bilinear", "bicubic", "nearest"):
        node = helper.make_node("GridSample", ["x", "g"], ["y"], mode=mode)
        _check(node, {"x": x, "g": _grid(1, 3, 3, 2)}, opset=16)
    node = helper.make_node("GridSample", ["x", "g"], ["y"])
    _check(node, {"x": x.astype(np.float16), "g": _grid(1, 3, 3, 2).astype(np.float16)},
           tol=1e-2)


@pytest.mark.parametrize("align", [0, 1])
@pytest.mark.parametrize("size", [[2, 3, 4, 5], [2, 3, 2, 4, 3]])
def test_affine_grid(align, size):
    theta = RNG.standard_normal((2, len(size) - 2, len(size) - 1)).astype(np.float32)
    node = helper.make_node("AffineGrid", ["t", "s"], ["y"], align_corners=align)
    _check(node, {"t": theta}, {"s": np.array(size, np.int64)}, opset=20)


def _rois() -> dict:
    x = RNG.standard_normal((2, 3, 10, 8)).astype(np.float32)
    rois = np.array([[0, 0, 7, 9], [1.5, 2.2, 6.1, 4.4], [3, 3, 3.2, 3.5], [-2, 5, 9, 12]],
                    np.float32)
    return {"x": x, "r": rois, "b": np.array([0, 1, 1, 0], np.int64)}


@pytest.mark.parametrize("mode", ["avg", "max"])
@pytest.mark.parametrize("transform", ["half_pixel", "output_half_pixel"])
@pytest.mark.parametrize("ratio", [0, 2])
def test_roi_align(mode, transform, ratio):
    node = helper.make_node("RoiAlign", ["x", "r", "b"], ["y"], mode=mode, sampling_ratio=ratio,
                            coordinate_transformation_mode=transform, output_height=3,
                            output_width=2, spatial_scale=0.9)
    _check(node, _rois(), opset=16)


def test_roi_align_opset10():
    node = helper.make_node("RoiAlign", ["x", "r", "b"], ["y"], output_height=2, output_width=2)
    _check(node, _rois(), opset=10)


@pytest.mark.parametrize("alpha", [1.0, 0.5])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_swiglu_against_reference_evaluator(alpha, dtype):
    feeds = {"a": RNG.standard_normal((3, 4)).astype(dtype),
             "b": RNG.standard_normal((3, 4)).astype(dtype)}
    node = helper.make_node("SwiGLU", ["a", "b"], ["y"], alpha=alpha)
    _check_reference(node, feeds, 28, 2e-3 if dtype == np.float16 else 1e-6)


@pytest.mark.parametrize("mode", ["linear", "circular"])
@pytest.mark.parametrize("axis", [-2, 1, 2])
def test_tensor_scatter(mode, axis):
    past = RNG.standard_normal((2, 5, 4, 3)).astype(np.float32)
    shape = list(past.shape)
    shape[axis] = 2
    feeds = {"p": past, "u": RNG.standard_normal(shape).astype(np.float32),
             "w": np.array([1, 3 if mode == "circular" else 2], np.int64)}
    node = helper.make_node("TensorScatter", ["p", "u", "w"], ["y"], mode=mode, axis=axis)
    _check(node, feeds, opset=24)
    node = helper.make_node("TensorScatter", ["p", "u"], ["y"], mode=mode, axis=axis)
    _check(node, {"p": past, "u": feeds["u"]}, opset=24)


@pytest.mark.parametrize("src,to", [(np.float32, 6), (np.int64, 11), (np.uint16, 5),
                                    (np.float16, 4), (np.uint16, 10), (np.int32, 1)])
def test_bit_cast(src, to):
    x = (RNG.standard_normal((2, 3)) * 1000).astype(src)
    if src == np.uint16:
        x = RNG.integers(0, 30000, (2, 3)).astype(np.uint16)
    _check(helper.make_node("BitCast", ["x"], ["y"], to=to), {"x": x}, opset=26)


def test_bit_cast_bool_and_scalar():
    node = helper.make_node("BitCast", ["x"], ["y"], to=2)
    _check_reference(node, {"x": np.array([True, False, True])}, 26)
    node = helper.make_node("BitCast", ["x"], ["y"], to=6)
    _check(node, {"x": np.array(1.5, np.float32)}, opset=26)


def test_det():
    x = RNG.standard_normal((2, 3, 4, 4)).astype(np.float32)
    _check(helper.make_node("Det", ["x"], ["y"]), {"x": x}, opset=11, tol=1e-4)
    _check_reference(helper.make_node("Det", ["x"], ["y"]), {"x": x[0].astype(np.float64)}, 22,
                     tol=1e-9)


def test_det_constant_folded():
    nodes = [helper.make_node("Det", ["c"], ["d"]), helper.make_node("Mul", ["d", "x"], ["y"])]
    model = make_model(nodes, {"x": (np.float32, [2])}, ["y"],
                       {"c": RNG.standard_normal((2, 3, 3)).astype(np.float32)}, opset=13)
    check_against_ort(model, {"x": np.ones(2, np.float32)}, rtol=1e-4)
