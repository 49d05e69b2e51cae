"""Conv, ConvTranspose and ConvInteger against onnxruntime."""

import numpy as np
import pytest
from onnx import helper

from tests.oracle import check_against_ort, make_model

RNG = np.random.default_rng(0)


def _rand(*shape: int, dtype=np.float32) -> np.ndarray:
    return RNG.standard_normal(shape).astype(dtype)


def _conv(op: str, x: np.ndarray, w: np.ndarray, b: np.ndarray | None, opset: int = 17,
          **attrs) -> None:
    inits = {"w": w} | ({"b": b} if b is not None else {})
    ins = ["x", "w"] + (["b"] if b is not None else [])
    model = make_model([helper.make_node(op, ins, ["y"], **attrs)],
                       {"x": (x.dtype, x.shape)}, ["y"], inits, opset=opset)
    tol = 1e-2 if x.dtype == np.float16 else 1e-4
    check_against_ort(model, {"x": x}, rtol=tol, atol=tol)


@pytest.mark.parametrize("attrs", [
    {},
    {"pads": [1, 1, 1, 1]},
    {"pads": [0, 1, 2, 1], "strides": [2, 1]},
    {"dilations": [2, 2], "pads": [2, 2, 2, 2]},
    {"auto_pad": "SAME_UPPER", "strides": [2, 2]},
    {"auto_pad": "SAME_LOWER", "strides": [2, 2]},
    {"auto_pad": "VALID", "strides": [2, 3]},
    {"kernel_shape": [3, 3], "strides": [3, 3], "dilations": [1, 2]},
])
def test_conv_2d_attributes(attrs):
    _conv("Conv", _rand(2, 4, 7, 8), _rand(6, 4, 3, 3), _rand(6), **attrs)


@pytest.mark.parametrize("group,cin,cout", [(2, 4, 6), (4, 4, 4), (4, 4, 8)])
def test_conv_groups_and_depthwise(group, cin, cout):
    _conv("Conv", _rand(1, cin, 6, 6), _rand(cout, cin // group, 3, 3), _rand(cout),
          group=group, pads=[1, 1, 1, 1])


def test_conv_1d_3d_no_bias():
    _conv("Conv", _rand(2, 3, 11), _rand(4, 3, 3), None, strides=[2], pads=[1, 0])
    _conv("Conv", _rand(1, 2, 4, 5, 6), _rand(3, 2, 2, 3, 2), None, pads=[1, 0, 1, 0, 1, 1],
          dilations=[1, 2, 1], opset=11)


def test_conv_1x1_and_fp16():
    _conv("Conv", _rand(1, 8, 5, 5), _rand(4, 8, 1, 1), _rand(4))
    _conv("Conv", _rand(1, 3, 6, 6, dtype=np.float16), _rand(4, 3, 3, 3, dtype=np.float16),
          _rand(4, dtype=np.float16), pads=[1, 1, 1, 1])


def test_conv_weight_as_input_and_opset7():
    x, w = _rand(1, 2, 5, 5), _rand(3, 2, 3, 3)
    model = make_model([helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])],
                       {"x": (np.float32, x.shape), "w": (np.float32, w.shape)}, ["y"], opset=7)
    check_against_ort(model, {"x": x, "w": w})


def test_conv_constant_folded():
    model = make_model([helper.make_node("Conv", ["x", "w"], ["c"]),
                        helper.make_node("Add", ["c", "z"], ["y"])],
                       {"z": (np.float32, [1, 2, 2, 2])}, ["y"],
                       {"x": _rand(1, 3, 4, 4), "w": _rand(2, 3, 3, 3)})
    check_against_ort(model, {"z": _rand(1, 2, 2, 2)})


@pytest.mark.parametrize("attrs", [
    {},
    {"strides": [2, 2], "pads": [1, 0, 1, 0]},
    {"strides": [2, 2], "output_padding": [1, 1]},
    {"strides": [3, 2], "dilations": [2, 1], "pads": [1, 1, 0, 2]},
    {"strides": [2, 2], "output_shape": [10, 9]},
    {"strides": [2, 2], "output_shape": [8, 10]},
    {"strides": [2, 2], "auto_pad": "SAME_UPPER"},
    {"strides": [2, 2], "auto_pad": "SAME_LOWER"},
    {"group": 2, "strides": [2, 1]},
])
def test_conv_transpose_2d(attrs):
    _conv("ConvTranspose", _rand(2, 4, 4, 5), _rand(4, 3, 3, 3), _rand(3 * attrs.get("group", 1)),
          **attrs)


def test_conv_transpose_1d_3d():
    _conv("ConvTranspose", _rand(1, 2, 5), _rand(2, 3, 4), None, strides=[3])
    _conv("ConvTranspose", _rand(1, 2, 3, 3, 2), _rand(2, 2, 2, 2, 2), _rand(2),
          strides=[2, 1, 2], pads=[0, 1, 0, 1, 0, 0])


def test_conv_integer():
    x = RNG.integers(0, 255, (1, 2, 5, 5), dtype=np.uint8)
    w = RNG.integers(0, 255, (3, 2, 3, 3), dtype=np.uint8)
    model = make_model([helper.make_node("ConvInteger", ["x", "w", "xz", "wz"], ["y"],
                                         pads=[1, 1, 1, 1])],
                       {"x": (np.uint8, x.shape)}, ["y"],
                       {"w": w, "xz": np.array(7, np.uint8), "wz": np.array(3, np.uint8)},
                       opset=10)
    check_against_ort(model, {"x": x})


@pytest.mark.parametrize("attrs,mask,bias", [
    ({}, False, False),
    ({"pads": [1, 1, 1, 1], "strides": [2, 1]}, True, True),
    ({"group": 2, "offset_group": 2, "dilations": [2, 1], "pads": [1, 0, 1, 0]}, True, False),
])
def test_deform_conv(attrs, mask, bias):
    x, w = _rand(2, 4, 6, 5), _rand(4, 4 // attrs.get("group", 1), 2, 3)
    pads, strides = attrs.get("pads", [0] * 4), attrs.get("strides", [1, 1])
    dil = attrs.get("dilations", [1, 1])
    out = [(n + pads[i] + pads[i + 2] - (k - 1) * d - 1) // s + 1
           for i, (n, k, d, s) in enumerate(zip(x.shape[2:], w.shape[2:], dil, strides))]
    og = attrs.get("offset_group", 1)
    inits = {"w": w, "off": _rand(2, og * 2 * 6, *out) * 1.5}
    ins = ["x", "w", "off", "b" if bias else ""]
    if bias:
        inits["b"] = _rand(4)
    if mask:
        inits["mask"] = RNG.uniform(0, 1, (2, og * 6, *out)).astype(np.float32)
        ins.append("mask")
    model = make_model([helper.make_node("DeformConv", ins, ["y"], **attrs)],
                       {"x": (np.float32, x.shape)}, ["y"], inits, opset=19)
    check_against_ort(model, {"x": x})


@pytest.mark.parametrize("k,past,bias,activation", [
    (3, False, False, "none"), (4, True, True, "silu"), (1, False, True, "swish"),
])
def test_causal_conv_with_state(k, past, bias, activation):
    x, w = _rand(2, 3, 5), _rand(3, 1, k)
    inits = {"w": w} | ({"b": _rand(3)} if bias else {}) | \
        ({"past": _rand(2, 3, k - 1)} if past else {})
    ins = ["x", "w", "b" if bias else "", "past" if past else ""]
    outs = ["y", "state"]
    model = make_model([helper.make_node("CausalConvWithState", ins, outs,
                                         activation=activation)],
                       {"x": (np.float32, x.shape)}, outs, inits, opset=27)
    check_against_ort(model, {"x": x})


def test_conv_batch_in_im2col_chunks(monkeypatch):
    import pydla.backends.cpu.kernels.conv as conv_kernels

    monkeypatch.setattr(conv_kernels, "IM2COL_BYTES", 2000)  # one image per chunk
    _conv("Conv", _rand(3, 4, 6, 5), _rand(4, 2, 3, 3), _rand(4), group=2, pads=[1, 0, 1, 2])
