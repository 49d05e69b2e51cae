"""QLinearConv, QLinearMatMul, ConvInteger and MatMulInteger run as the int8 layers
QConv/QGemm (int32 accumulation, round half to even, saturation): bit-exact against
onnxruntime, whose MLAS kernels define the semantics."""

import numpy as np
import pytest
from onnx import helper
from onnx.reference import ReferenceEvaluator

from pydla.errors import ModelImportError
from tests.oracle import assert_close, check_against_ort, make_model, run_pydla

RNG = np.random.default_rng(7)


def _q(shape, dtype):
    info = np.iinfo(dtype)
    return RNG.integers(info.min, int(info.max) + 1, shape).astype(dtype)


def _qconv_model(x_shape, w_shape, x_dtype, w_dtype, per_channel, bias, **attrs):
    m = w_shape[0]
    inits = {
        "xs": np.array(0.05, np.float32), "xz": np.array(131 if x_dtype == np.uint8 else -3,
                                                         x_dtype),
        "w": _q(w_shape, w_dtype),
        "ws": (RNG.uniform(0.002, 0.02, m) if per_channel else np.array(0.01)).astype(np.float32),
        "wz": (np.zeros(m if per_channel else (), w_dtype)),
        "ys": np.array(0.4, np.float32), "yz": np.array(120 if x_dtype == np.uint8 else 5,
                                                        x_dtype),
    }
    names = ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"]
    if bias:
        inits["b"] = RNG.integers(-5000, 5000, m).astype(np.int32)
        names.append("b")
    node = helper.make_node("QLinearConv", names, ["y"], **attrs)
    return make_model([node], {"x": (x_dtype, x_shape)}, ["y"], inits, opset=10)


@pytest.mark.parametrize("x_dtype,w_dtype,per_channel,bias,w_shape,attrs", [
    (np.uint8, np.int8, True, True, (8, 6, 3, 3), {"pads": [1, 1, 1, 1]}),
    (np.uint8, np.int8, False, False, (8, 6, 1, 1), {}),
    (np.int8, np.int8, True, True, (8, 6, 3, 3), {"strides": [2, 2], "pads": [0, 1, 1, 0]}),
    (np.uint8, np.uint8, False, True, (8, 3, 3, 3), {"group": 2, "dilations": [2, 1],
                                                      "pads": [2, 1, 2, 1]}),
    (np.uint8, np.int8, True, True, (6, 1, 3, 3), {"group": 6, "pads": [1, 1, 1, 1]}),
])
def test_qlinearconv(x_dtype, w_dtype, per_channel, bias, w_shape, attrs):
    x_shape = [2, 6, 9, 7]
    model = _qconv_model(x_shape, w_shape, x_dtype, w_dtype, per_channel, bias, **attrs)
    check_against_ort(model, {"x": _q(x_shape, x_dtype)})


def test_qlinearconv_saturates():
    # A tiny output scale sends most results past both ends of the range.
    model = _qconv_model([1, 4, 5, 5], (3, 4, 3, 3), np.uint8, np.int8, False, False)
    model.graph.initializer[5].CopyFrom(  # ys
        helper.make_tensor("ys", 1, [], [0.001]))
    out = check_against_ort(model, {"x": _q((1, 4, 5, 5), np.uint8)})[0]
    assert (out == 0).any() and (out == 255).any()


@pytest.mark.parametrize("a_shape,b_shape,a_dtype,b_dtype,per_column", [
    ((5, 12), (12, 7), np.uint8, np.int8, True),
    ((2, 5, 12), (12, 7), np.int8, np.int8, False),
    ((2, 5, 12), (2, 12, 7), np.uint8, np.uint8, False),
])
def test_qlinearmatmul(a_shape, b_shape, a_dtype, b_dtype, per_column):
    n = b_shape[-1]
    inits = {"as": np.array(0.03, np.float32), "az": np.array(7, a_dtype),
             "b": _q(b_shape, b_dtype),
             "bs": (RNG.uniform(0.01, 0.05, n) if per_column else np.array(0.02)
                    ).astype(np.float32),
             "bz": np.zeros(n if per_column else (), b_dtype),
             "ys": np.array(0.2, np.float32), "yz": np.array(3, a_dtype)}
    node = helper.make_node("QLinearMatMul", ["a", "as", "az", "b", "bs", "bz", "ys", "yz"],
                            ["y"])
    model = make_model([node], {"a": (a_dtype, a_shape)}, ["y"], inits, opset=10)
    check_against_ort(model, {"a": _q(a_shape, a_dtype)})


def test_conv_integer_per_channel_weight_zero_point():
    inits = {"w": _q((4, 3, 3, 3), np.uint8), "xz": np.array(100, np.uint8),
             "wz": np.array([1, 128, 3, 200], np.uint8)}
    node = helper.make_node("ConvInteger", ["x", "w", "xz", "wz"], ["y"], pads=[1, 1, 1, 1])
    model = make_model([node], {"x": (np.uint8, [1, 3, 6, 6])}, ["y"], inits, opset=10)
    # onnxruntime refuses a per-channel weight zero point here; ONNX's reference does not.
    feeds = {"x": _q((1, 3, 6, 6), np.uint8)}
    assert_close(run_pydla(model, feeds), ReferenceEvaluator(model).run(None, feeds))


def test_matmul_integer_per_row_zero_point():
    inits = {"b": _q((16, 5), np.int8), "az": np.arange(4, dtype=np.uint8) * 30}
    node = helper.make_node("MatMulInteger", ["a", "b", "az"], ["y"])
    model = make_model([node], {"a": (np.uint8, [4, 16])}, ["y"], inits, opset=10)
    # onnxruntime and ONNX's reference both refuse a per-row zero point: numpy in int64.
    a = _q((4, 16), np.uint8)
    want = (a.astype(np.int64) - inits["az"][:, None]) @ inits["b"].astype(np.int64)
    assert_close(run_pydla(model, {"a": a}), [want.astype(np.int32)])


def test_qlinearconv_bad_bias_refused():
    model = _qconv_model([1, 6, 5, 5], (8, 6, 1, 1), np.uint8, np.int8, True, True)
    for init in model.graph.initializer:
        if init.name == "b":
            init.CopyFrom(helper.make_tensor("b", 6, [3], [1, 2, 3]))  # INT32, 3 values
    with pytest.raises(ModelImportError, match="QLinearConv.*bias 'b' must be int32 with one "
                                               "value per output channel"):
        run_pydla(model, {"x": _q((1, 6, 5, 5), np.uint8)})


def test_qlinearconv_per_channel_scale_length_refused():
    model = _qconv_model([1, 6, 5, 5], (8, 6, 1, 1), np.uint8, np.int8, False, False)
    for init in model.graph.initializer:
        if init.name == "ws":
            init.CopyFrom(helper.make_tensor("ws", 1, [3], [0.1, 0.2, 0.3]))
    with pytest.raises(ModelImportError, match="'ws' has 3 elements; expected 1 or 8"):
        run_pydla(model, {"x": _q((1, 6, 5, 5), np.uint8)})


@pytest.mark.parametrize("dtype,opset,axis,shape", [
    (np.uint8, 13, -1, (3, 10)), (np.int8, 13, 1, (2, 7, 3)), (np.uint8, 1, 1, (2, 3, 4))])
def test_com_microsoft_qlinear_softmax_exact(dtype, opset, axis, shape):
    from onnx import TensorProto, numpy_helper

    elem = TensorProto.UINT8 if dtype == np.uint8 else TensorProto.INT8
    node = helper.make_node("QLinearSoftmax", ["x", "xs", "xz", "ys", "yz"], ["y"],
                            domain="com.microsoft", axis=axis, opset=opset)
    inits = [numpy_helper.from_array(np.array(0.1, np.float32), "xs"),
             numpy_helper.from_array(np.array(3, dtype), "xz"),
             numpy_helper.from_array(np.array(1 / 256, np.float32), "ys"),
             numpy_helper.from_array(np.array(0 if dtype == np.uint8 else -128, dtype), "yz")]
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", elem, shape)],
                              [helper.make_tensor_value_info("y", elem, shape)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13),
                                                    helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 8
    check_against_ort(model, {"x": _q(shape, dtype)})
