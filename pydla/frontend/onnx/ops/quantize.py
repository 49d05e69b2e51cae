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
    return ctx.emit("DequantizeLinear", [x, scale, zero_point], attrs,
                    out_types=[(x.shape, out)])


@onnx_op("DynamicQuantizeLinear", since=11)
def import_dynamic_quantize(ctx: ImportContext, node: OnnxNode) -> list[Value]:
    x = node.inputs[0]
    assert x is not None
    return ctx.emit("DynamicQuantizeLinear", [x], {},
                    out_types=[(x.shape, DType.UINT8), ((), DType.FLOAT32), ((), DType.UINT8)])
