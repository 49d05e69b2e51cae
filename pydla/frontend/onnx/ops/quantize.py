"""Importers of linear quantization: QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear.

Scale and zero point stay data inputs (they are per-tensor, per-axis or blocked tensors).
The canonical attributes fix the granularity once: ``axis`` (non-negative) and ``block_size``
(0 unless blocked); a scale with one element is per-tensor whatever its rank.
QuantizeLinear also records ``precision``, the type the division ``x / scale`` rounds to.
Only integer targets of at most 16 bits have a runtime type; float8 and 4-bit forms are
refused with a clear error.
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

from pydla.dtypes import DType
from pydla.frontend.onnx.importer import ImportContext, OnnxNode
from pydla.frontend.onnx.registry import onnx_op
from pydla.ir import Value

_QUANT_TYPES = (DType.INT8, DType.UINT8, DType.INT16, DType.UINT16)
_DEQUANT_INPUTS = _QUANT_TYPES + (DType.INT32,)
_FLOAT_OUTPUTS = (DType.FLOAT32, DType.FLOAT16, DType.BFLOAT16)
_PRECISIONS = _FLOAT_OUTPUTS + (DType.FLOAT64,)


def _type_name(code: int) -> str:
    return TensorProto.DataType.Name(code)


def _name(v: Value) -> str:
    return repr(v.name)


def _check_scale(ctx: ImportContext, scale: Value) -> None:
    """A constant scale must be positive and finite: zero divides by zero, a negative one
    flips the order of values, and neither is a quantization."""
    if scale.const is None:
        return
    s = scale.const.astype(np.float64)
    bad = ~(np.isfinite(s) & (s > 0))
    if bad.any():
        at = tuple(int(i) for i in np.argwhere(bad)[0])
        raise ctx.error(f"scale {_name(scale)} has the non-positive or non-finite value "
                        f"{float(s[at])} at index {at}")


def _granularity(ctx: ImportContext, node: OnnxNode, x: Value, scale: Value,
                 zero_point: Value | None) -> dict[str, int]:
    """``axis`` and ``block_size`` after checking the scale's shape against the input's."""
    attrs = node.attrs_with_defaults()
    rank = len(x.shape)
    block = int(attrs.get("block_size", 0))
    axis = int(attrs.get("axis", 1))
    _check_scale(ctx, scale)
    # A scalar and a one-element tensor are the same per-tensor parameter (real models
    # pair a scalar zero point with a [1] scale): only element counts must agree then.
    per_tensor = scale.size == 1
    if zero_point is not None and zero_point.shape != scale.shape and not (
            per_tensor and zero_point.size == 1):
        raise ctx.error(f"zero point {_name(zero_point)} shape {zero_point.shape} differs "
                        f"from scale {_name(scale)} shape {scale.shape}")
    if per_tensor:
        return {"axis": 0, "block_size": 0}
    if not -rank <= axis < rank:
        raise ctx.error(f"axis {axis} is out of range for input {_name(x)} of rank {rank}")
    axis %= rank
    if block > 0:
        want = tuple(-(-d // block) if i == axis else d for i, d in enumerate(x.shape))
        if scale.shape != want:
            raise ctx.error(f"blocked scale shape {scale.shape} does not fit input shape "
                            f"{x.shape} with block_size {block} on axis {axis}")
        return {"axis": axis, "block_size": block}
    if scale.shape != (x.shape[axis],):
        raise ctx.error(f"per-axis scale {_name(scale)} shape {scale.shape} does not match "
                        f"input {_name(x)} dimension {x.shape[axis]} on axis {axis}")
    return {"axis": axis, "block_size": 0}


def _division_precision(ctx: ImportContext, node: OnnxNode, x: Value, scale: Value) -> DType:
    """The type ``x / scale`` is rounded to before rounding to an integer.

    From opset 23 on, ONNX says: the ``precision`` attribute, else the scale's type. Before,
    the spec is silent and onnxruntime divides in float32, which we follow.
    """
    code = int(node.attrs.get("precision", 0))
    if code:
        if code not in [int(t) for t in _PRECISIONS]:
            raise ctx.error(f"division precision {_type_name(code)} is not supported")
        return DType(code)
    if node.opset >= 23 and scale.dtype.is_half:
        return scale.dtype
    if x.dtype is DType.INT32 or scale.dtype is DType.INT32:
        return DType.FLOAT64
    return DType.FLOAT32


@onnx_op("QuantizeLinear", since=10)
def import_quantize(ctx: ImportContext, node: OnnxNode) -> list[Value]:
    x, scale, zero_point = node.inputs[0], node.input(1), node.input(2)
    assert x is not None
    if scale is None:
        raise ctx.error("the scale input is missing")
    out_code = int(node.attrs.get("output_dtype", 0))
    if zero_point is not None:
        out = zero_point.dtype
        if out_code and out_code != int(out):
            raise ctx.error(f"output_dtype {_type_name(out_code)} differs from the type "
                            f"{out.name.lower()} of zero point {_name(zero_point)}")
    elif out_code:
        if out_code not in [int(t) for t in _QUANT_TYPES]:
            raise ctx.error(f"quantization to {_type_name(out_code)} is not supported (only "
                            "int8, uint8, int16 and uint16 have a runtime type)")
        out = DType(out_code)
    else:
        out = DType.UINT8
    if out not in _QUANT_TYPES:
        raise ctx.error(f"quantization to {out.name.lower()} is not supported")
    precision = _division_precision(ctx, node, x, scale)
    attrs = _granularity(ctx, node, x, scale, zero_point)
    attrs["precision"] = int(precision)
    return ctx.emit("QuantizeLinear", [x, scale, zero_point], attrs, out_types=[(x.shape, out)])


@onnx_op("DequantizeLinear", since=10)
def import_dequantize(ctx: ImportContext, node: OnnxNode) -> list[Value]:
    x, scale, zero_point = node.inputs[0], node.input(1), node.input(2)
    assert x is not None
    if scale is None:
        raise ctx.error("the scale input is missing")
    if x.dtype not in _DEQUANT_INPUTS:
        raise ctx.error(f"dequantization of {x.dtype.name.lower()} is not supported")
    if zero_point is not None and zero_point.dtype is not x.dtype:
        raise ctx.error(f"zero point {_name(zero_point)} type {zero_point.dtype.name.lower()} "
                        f"differs from the type {x.dtype.name.lower()} of input {_name(x)}")
    out_code = int(node.attrs.get("output_dtype", 0))
    out = scale.dtype
    if out_code:
        if out_code not in [int(t) for t in _FLOAT_OUTPUTS]:
            raise ctx.error(f"output_dtype {_type_name(out_code)} is not supported")
        out = DType(out_code)
    if out not in _FLOAT_OUTPUTS:
        raise ctx.error(f"dequantization to {out.name.lower()} is not supported")
    attrs = _granularity(ctx, node, x, scale, zero_point)
    # Quantized weights stay quantized: pydla.passes.fold_qdq reads them into int8 layers.
    return ctx.emit("DequantizeLinear", [x, scale, zero_point], attrs,
                    out_types=[(x.shape, out)], fold=False)


@onnx_op("DynamicQuantizeLinear", since=11)
def import_dynamic_quantize(ctx: ImportContext, node: OnnxNode) -> list[Value]:
    x = node.inputs[0]
    assert x is not None
    return ctx.emit("DynamicQuantizeLinear", [x], {},
                    out_types=[(x.shape, DType.UINT8), ((), DType.FLOAT32), ((), DType.UINT8)])


def int8_layer(outs: list[Value]) -> list[Value]:
    """The layer's precision is int8 whatever its output type (layer info, reports)."""
    for v in outs:
        if v.producer is not None:
            v.producer.precision = "int8"
    return outs


def check_int8_operand(ctx: ImportContext, v: Value, zero_point: Value | None,
                   allowed: tuple[DType, ...] = (DType.INT8, DType.UINT8)) -> None:
    if v.dtype not in allowed:
        raise ctx.error(f"input {_name(v)} is {v.dtype.name.lower()}; expected one of "
                        f"{', '.join(t.name.lower() for t in allowed)}")
    if zero_point is not None and zero_point.dtype is not v.dtype:
        raise ctx.error(f"zero point {_name(zero_point)} type {zero_point.dtype.name.lower()} "
                        f"differs from the type {v.dtype.name.lower()} of input {_name(v)}")


def _gemm_shape(a: Value, b: Value) -> tuple[int, ...]:
    batch = tuple(np.broadcast_shapes(a.shape[:-2], b.shape[:-2]))
    return (*batch, a.shape[-2], b.shape[-1])


def _conv_shape(x: Value, w: Value, attrs: dict) -> tuple[int, ...]:
    nd = len(x.shape) - 2
    pads, strides, dilations = attrs["pads"], attrs["strides"], attrs["dilations"]
    return (x.shape[0], w.shape[0], *[
        (i + pads[d] + pads[d + nd] - (k - 1) * dilations[d] - 1) // strides[d] + 1
        for d, (i, k) in enumerate(zip(x.shape[2:], w.shape[2:]))])


def _check_per_channel(ctx: ImportContext, v: Value | None, channels: int) -> None:
    if v is not None and v.size not in (1, channels):
        raise ctx.error(f"{_name(v)} has {v.size} elements; expected 1 or {channels} (one per "
                        "output channel)")


def _quantized_operands(ctx: ImportContext, node: OnnxNode, channels: int) -> list[Value | None]:
    """QLinearConv/QLinearMatMul's eight inputs, checked (the layout of QUANTIZED_INPUTS)."""
    ins = [node.input(i) for i in range(8)]
    names = ("x", "x_scale", "x_zero_point", "w", "w_scale", "w_zero_point", "y_scale",
             "y_zero_point")
    for i in (0, 1, 3, 4, 6):
        if ins[i] is None:
            raise ctx.error(f"input {names[i]} is required")
    x, x_scale, x_zp, w, w_scale, w_zp, y_scale, y_zp = ins
    assert x is not None and w is not None and x_scale is not None and w_scale is not None
    assert y_scale is not None
    check_int8_operand(ctx, x, x_zp)
    check_int8_operand(ctx, w, w_zp)
    for s in (x_scale, w_scale, y_scale):
        _check_scale(ctx, s)
    for v in (x_scale, x_zp, y_scale, y_zp):
        if v is not None and v.size != 1:
            raise ctx.error(f"{_name(v)} must have one element (per-tensor quantization)")
    _check_per_channel(ctx, w_scale, channels)
    _check_per_channel(ctx, w_zp, channels)
    return ins


@onnx_op("QLinearConv", since=10)
def import_qlinear_conv(ctx: ImportContext, node: OnnxNode) -> list[Value]:
    from pydla.frontend.onnx.ops.conv import conv_attrs

    x, w = node.input(0), node.input(3)
    if x is None or w is None or len(x.shape) < 3 or len(w.shape) != len(x.shape):
        raise ctx.error("x and w must be N-D images of the same rank")
    ins = _quantized_operands(ctx, node, w.shape[0])
    bias = node.input(8)
    if bias is not None and (bias.dtype is not DType.INT32 or bias.size != w.shape[0]):
        raise ctx.error(f"bias {_name(bias)} must be int32 with one value per output channel "
                        f"({w.shape[0]}), not {bias.dtype.name.lower()} {bias.shape}")
    attrs = conv_attrs(ctx, node, x, w)
    y_zp = ins[7]
    out = y_zp.dtype if y_zp is not None else DType.UINT8
    return int8_layer(ctx.emit("QConv", [*ins, bias], attrs,
                               out_types=[(_conv_shape(x, w, attrs), out)]))


@onnx_op("QLinearMatMul", since=10)
def import_qlinear_matmul(ctx: ImportContext, node: OnnxNode) -> list[Value]:
    a, b = node.input(0), node.input(3)
    if a is None or b is None or len(a.shape) < 2 or len(b.shape) < 2:
        raise ctx.error("a and b must have rank 2 or more")
    ins = _quantized_operands(ctx, node, b.shape[-1])
    y_zp = ins[7]
    out = y_zp.dtype if y_zp is not None else DType.UINT8
    if a.shape[-1] != b.shape[-2]:
        raise ctx.error(f"a {a.shape} and b {b.shape} do not multiply")
    return int8_layer(ctx.emit("QGemm", [*ins, None], out_types=[(_gemm_shape(a, b), out)]))


@onnx_op("ConvInteger", since=10)
def import_conv_integer(ctx: ImportContext, node: OnnxNode) -> list[Value]:
    """The raw int32 accumulator of QConv (no scales)."""
    from pydla.frontend.onnx.ops.conv import conv_attrs

    x, w, x_zp, w_zp = (node.input(i) for i in range(4))
    if x is None or w is None or len(x.shape) < 3 or len(w.shape) != len(x.shape):
        raise ctx.error("x and w must be N-D images of the same rank")
    check_int8_operand(ctx, x, x_zp)
    check_int8_operand(ctx, w, w_zp)
    if x_zp is not None and x_zp.size != 1:
        raise ctx.error(f"x_zero_point {_name(x_zp)} must be a scalar (per-tensor quantization)")
    _check_per_channel(ctx, w_zp, w.shape[0])
    attrs = conv_attrs(ctx, node, x, w)
    return int8_layer(ctx.emit("QConv", [x, None, x_zp, w, None, w_zp, None, None, None],
                               attrs, out_types=[(_conv_shape(x, w, attrs), DType.INT32)]))


@onnx_op("MatMulInteger", since=10)
def import_matmul_integer(ctx: ImportContext, node: OnnxNode) -> list[Value]:
    """The raw int32 accumulator of QGemm (no scales); a_zero_point per tensor or per row."""
    a, b, a_zp, b_zp = (node.input(i) for i in range(4))
    if a is None or b is None or len(a.shape) < 2 or len(b.shape) < 2:
        raise ctx.error("A and B must have rank 2 or more (a vector operand is not supported)")
    check_int8_operand(ctx, a, a_zp)
    check_int8_operand(ctx, b, b_zp)
    if a_zp is not None and a_zp.size not in (1, a.shape[-2]):
        raise ctx.error(f"a_zero_point {_name(a_zp)} has {a_zp.size} elements; expected 1 or "
                        f"{a.shape[-2]} (one per row)")
    _check_per_channel(ctx, b_zp, b.shape[-1])
    if a.shape[-1] != b.shape[-2]:
        raise ctx.error(f"A {a.shape} and B {b.shape} do not multiply")
    return int8_layer(ctx.emit("QGemm", [a, None, a_zp, b, None, b_zp, None, None, None],
                               out_types=[(_gemm_shape(a, b), DType.INT32)]))
