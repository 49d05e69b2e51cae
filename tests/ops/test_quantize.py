import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from pydla.errors import ModelImportError
from tests.oracle import assert_close, check_against_ort, make_model, run_pydla


def _x(shape, dtype=np.float32, seed=0, spread=40.0):
    return (np.random.default_rng(seed).standard_normal(shape) * spread).astype(dtype)


def _q_model(shape, scale, zero_point=None, opset=21, dtype=np.float32, **attrs):
    inits = {"s": scale}
    inputs = ["x", "s"]
    if zero_point is not None:
        inits["z"] = zero_point
        inputs.append("z")
    node = helper.make_node("QuantizeLinear", inputs, ["y"], **attrs)
    return make_model([node], {"x": (dtype, shape)}, ["y"], inits, opset=opset)


def _dq_model(shape, dtype, scale, zero_point=None, opset=21, **attrs):
    inits = {"s": scale}
    inputs = ["x", "s"]
    if zero_point is not None:
        inits["z"] = zero_point
        inputs.append("z")
    node = helper.make_node("DequantizeLinear", inputs, ["y"], **attrs)
    return make_model([node], {"x": (dtype, shape)}, ["y"], inits, opset=opset)


@pytest.mark.parametrize("zp_dtype,opset", [
    (t, o) for t in (np.uint8, np.int8) for o in (10, 13, 19, 21)
] + [(np.uint16, 21), (np.int16, 21)])  # 16-bit targets start at opset 21
def test_quantize_per_tensor(zp_dtype, opset):
    zp = np.array(3 if zp_dtype in (np.uint8, np.uint16) else -2, zp_dtype)
    model = _q_model([3, 4], np.array(0.37, np.float32), zp, opset=opset)
    # Large values saturate at both ends of the range.
    check_against_ort(model, {"x": _x((3, 4), spread=100.0)})


def test_quantize_round_half_to_even():
    model = _q_model([8], np.array(1.0, np.float32), np.array(0, np.int8), opset=13)
    check_against_ort(model, {"x": np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 3.5, 200.0],
                                            np.float32)})


def test_quantize_default_uint8():
    model = _q_model([2, 5], np.array(0.5, np.float32), opset=13)
    check_against_ort(model, {"x": _x((2, 5))})


@pytest.mark.parametrize("out_type", [TensorProto.INT8, TensorProto.UINT16, TensorProto.INT16])
def test_quantize_output_dtype(out_type):
    model = _q_model([2, 5], np.array(0.25, np.float32), output_dtype=out_type)
    check_against_ort(model, {"x": _x((2, 5))})


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_quantize_per_axis(axis):
    n = [2, 3, 4][axis]
    scale = np.linspace(0.2, 0.9, n).astype(np.float32)
    model = _q_model([2, 3, 4], scale, np.arange(n).astype(np.int8), opset=13, axis=axis)
    check_against_ort(model, {"x": _x((2, 3, 4))})


@pytest.mark.parametrize("axis,block", [(1, 2), (1, 3), (0, 2)])
def test_quantize_blocked(axis, block):
    shape = (4, 5)
    sshape = tuple(-(-d // block) if i == axis else d for i, d in enumerate(shape))
    scale = np.random.default_rng(1).uniform(0.2, 1.0, sshape).astype(np.float32)
    zp = np.random.default_rng(2).integers(-5, 5, sshape).astype(np.int8)
    model = _q_model(list(shape), scale, zp, axis=axis, block_size=block)
    check_against_ort(model, {"x": _x(shape)})


@pytest.mark.parametrize("opset", [19, 21])
def test_quantize_fp16_input(opset):
    # Before opset 23 the division runs in float32, as onnxruntime does.
    model = _q_model([3, 4], np.array(0.37, np.float16), np.array(1, np.uint8), opset=opset,
                     dtype=np.float16)
    check_against_ort(model, {"x": _x((3, 4), np.float16)})


def test_quantize_fp16_precision_from_scale():
    # From opset 23, x / scale is rounded to the scale's type (float16) first. onnxruntime
    # still divides in float32, so ONNX's reference is the oracle here.
    x = _x((512,), np.float16, seed=5)
    model = _q_model([512], np.array(0.37, np.float16), np.array(0, np.int16), opset=23,
                     dtype=np.float16)
    want = ReferenceEvaluator(model).run(None, {"x": x})
    assert_close(run_pydla(model, {"x": x}), want)


@pytest.mark.parametrize("x_dtype,zp", [(np.uint8, 128), (np.int8, -3), (np.int16, 100),
                                        (np.uint16, 30000), (np.int32, None)])
def test_dequantize_per_tensor(x_dtype, zp):
    info = np.iinfo(x_dtype)
    x = np.random.default_rng(0).integers(max(info.min, -10**6), min(info.max, 10**6), (3, 4))
    zero = None if zp is None else np.array(zp, x_dtype)
    model = _dq_model([3, 4], x_dtype, np.array(0.05, np.float32), zero)
    check_against_ort(model, {"x": x.astype(x_dtype)})


@pytest.mark.parametrize("opset", [10, 13])
def test_dequantize_old_opsets(opset):
    x = np.arange(-6, 6, dtype=np.int8).reshape(3, 4)
    model = _dq_model([3, 4], np.int8, np.array(0.5, np.float32), np.array(2, np.int8),
                      opset=opset)
    check_against_ort(model, {"x": x})


@pytest.mark.parametrize("axis", [0, 2, -2])
def test_dequantize_per_axis(axis):
    n = [2, 3, 4][axis]
    x = np.random.default_rng(0).integers(0, 256, (2, 3, 4)).astype(np.uint8)
    model = _dq_model([2, 3, 4], np.uint8, np.linspace(0.1, 1.0, n).astype(np.float32),
                      np.arange(n).astype(np.uint8), opset=13, axis=axis)
    check_against_ort(model, {"x": x})


def test_dequantize_blocked():
    x = np.random.default_rng(0).integers(-128, 128, (4, 6)).astype(np.int8)
    scale = np.random.default_rng(1).uniform(0.1, 1.0, (4, 2)).astype(np.float32)
    zp = np.random.default_rng(2).integers(-4, 4, (4, 2)).astype(np.int8)
    model = _dq_model([4, 6], np.int8, scale, zp, axis=1, block_size=4)
    check_against_ort(model, {"x": x})


def test_dequantize_fp16_scale():
    x = np.random.default_rng(0).integers(0, 256, (3, 4)).astype(np.uint8)
    model = _dq_model([3, 4], np.uint8, np.array(0.1, np.float16), np.array(7, np.uint8))
    check_against_ort(model, {"x": x})


def test_dequantize_constant_folded():
    nodes = [helper.make_node("DequantizeLinear", ["w", "s", "z"], ["d"]),
             helper.make_node("Add", ["x", "d"], ["y"])]
    model = make_model(nodes, {"x": (np.float32, [2, 3])}, ["y"],
                       {"w": np.array([[1, 2, 3], [250, 0, 128]], np.uint8),
                        "s": np.array(0.25, np.float32), "z": np.array(128, np.uint8)},
                       opset=13)
    check_against_ort(model, {"x": _x((2, 3))})


@pytest.mark.parametrize("x", [
    np.array([[-1.0, 2.5, 0.3], [4.0, -0.7, 1.1]], np.float32),
    np.array([[1.0, 2.0, 3.0], [0.5, 0.1, 9.0]], np.float32),   # all positive: zp 0
    np.array([[-1.0, -2.0, -3.0], [-0.5, -0.1, -9.0]], np.float32),
    np.zeros((2, 3), np.float32),                                # no range: scale 1
])
def test_dynamic_quantize(x):
    node = helper.make_node("DynamicQuantizeLinear", ["x"], ["y", "s", "z"])
    model = make_model([node], {"x": (np.float32, [2, 3])}, ["y", "s", "z"], opset=11)
    check_against_ort(model, {"x": x})


@pytest.mark.parametrize("out_type", [TensorProto.FLOAT8E4M3FN, TensorProto.INT4])
def test_quantize_unsupported_targets_refused(out_type):
    model = _q_model([4], np.array(1.0, np.float32), output_dtype=out_type)
    with pytest.raises(ModelImportError, match="not supported"):
        run_pydla(model, {"x": _x((4,))})
