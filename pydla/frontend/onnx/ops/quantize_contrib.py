"""Importers of onnxruntime's quantized contrib ops (domain com.microsoft), which
``quantize_static(quant_format=QOperator)`` writes around QLinearConv/QLinearMatMul.

QGemm is an int8 layer (QGemm, B transposed at build time); QLinearSoftmax a layer of its
own (onnxruntime's table arithmetic). The pointwise, pooling and concat ops run as
DequantizeLinear → float op → QuantizeLinear, which is how onnxruntime defines them (its
kernels compute in float and requantize). Their schemas are not in
onnx.defs, so every output type is given here.
"""

from __future__ import annotations

import numpy as np

from pydla.dtypes import DType
from pydla.frontend.onnx.importer import ImportContext, OnnxNode
from pydla.frontend.onnx.ops.quantize import check_int8_operand, int8_layer
from pydla.frontend.onnx.registry import onnx_op
from pydla.ir import Value

MS = "com.microsoft."


def _required(ctx: ImportContext, node: OnnxNode, *indices: int) -> list[Value]:
    out = []
    for i in indices:
        v = node.input(i)
        if v is None:
            raise ctx.error(f"input {i} is required")
        out.append(v)
    return out


def _dq(ctx: ImportContext, x: Value, scale: Value, zero_point: Value | None) -> Value:
    check_int8_operand(ctx, x, zero_point)
    for v in (scale, zero_point):
        if v is not None and v.size != 1:
            raise ctx.error(f"{v.name!r} must have one element (per-tensor quantization)")
    return ctx.emit("DequantizeLinear", [x, scale, zero_point], {"axis": 0, "block_size": 0},
                    out_types=[(x.shape, DType.FLOAT32)])[0]


def _q(ctx: ImportContext, x: Value, scale: Value, zero_point: Value | None) -> list[Value]:
    out = zero_point.dtype if zero_point is not None else DType.UINT8
    if scale.size != 1 or (zero_point is not None and zero_point.size != 1):
        raise ctx.error("the output scale and zero point must have one element")
    return ctx.emit("QuantizeLinear", [x, scale, zero_point],
                    {"axis": 0, "block_size": 0, "precision": int(DType.FLOAT32)},
                    out_types=[(x.shape, out)])


@onnx_op(MS + "QLinearAdd", MS + "QLinearMul", since=1)
def import_qlinear_binary(ctx: ImportContext, node: OnnxNode) -> list[Value]:
    a, a_scale, b, b_scale, c_scale = _required(ctx, node, 0, 1, 3, 4, 6)
    fa = _dq(ctx, a, a_scale, node.input(2))
    fb = _dq(ctx, b, b_scale, node.input(5))
    op = node.op_type.removeprefix("QLinear")
    shape = tuple(np.broadcast_shapes(a.shape, b.shape))
    y = ctx.emit(op, [fa, fb], {}, out_types=[(shape, DType.FLOAT32)])[0]
    return _q(ctx, y, c_scale, node.input(7))


@onnx_op(MS + "QLinearGlobalAveragePool", since=1)
def import_qlinear_global_average_pool(ctx: ImportContext, node: OnnxNode) -> list[Value]:
    x, x_scale, y_scale = _required(ctx, node, 0, 1, 3)
    if int(node.attrs.get("channels_last", 0)):
        raise ctx.error("channels_last=1 is not supported")
    fx = _dq(ctx, x, x_scale, node.input(2))
    shape = (*x.shape[:2], *([1] * (len(x.shape) - 2)))
    y = ctx.emit("GlobalAveragePool", [fx], {}, out_types=[(shape, DType.FLOAT32)])[0]
    return _q(ctx, y, y_scale, node.input(4))


@onnx_op(MS + "QLinearSigmoid", MS + "QLinearLeakyRelu", since=1)
def import_qlinear_activation(ctx: ImportContext, node: OnnxNode) -> list[Value]:
    x, x_scale, y_scale = _required(ctx, node, 0, 1, 3)
    fx = _dq(ctx, x, x_scale, node.input(2))
    op = node.op_type.removeprefix("QLinear")
    attrs = {"alpha": float(node.attrs.get("alpha", 0.01))} if op == "LeakyRelu" else {}
    y = ctx.emit(op, [fx], attrs, out_types=[(x.shape, DType.FLOAT32)])[0]
    return _q(ctx, y, y_scale, node.input(4))


@onnx_op(MS + "QLinearConcat", since=1)
def import_qlinear_concat(ctx: ImportContext, node: OnnxNode) -> list[Value]:
    y_scale = _required(ctx, node, 0)[0]
    if (len(node.inputs) - 2) % 3 or len(node.inputs) < 5:
        raise ctx.error("inputs must be Y_scale, Y_zero_point, then (X, X_scale, "
                        "X_zero_point) triples")
    parts = []
    for i in range(2, len(node.inputs), 3):
        x, scale = _required(ctx, node, i, i + 1)
        parts.append(_dq(ctx, x, scale, node.input(i + 2)))
    rank = len(parts[0].shape)
    axis = int(node.attrs.get("axis", 0))
    if not -rank <= axis < rank:
        raise ctx.error(f"axis {axis} is out of range for rank {rank}")
    axis %= rank
    shape = list(parts[0].shape)
    shape[axis] = sum(p.shape[axis] for p in parts)
    y = ctx.emit("Concat", parts, {"axis": axis}, out_types=[(tuple(shape), DType.FLOAT32)])[0]
    return _q(ctx, y, y_scale, node.input(1))


@onnx_op(MS + "QGemm", since=1)
def import_qgemm(ctx: ImportContext, node: OnnxNode) -> list[Value]:
    """A·B (+ C, int32 at scale a_scale·b_scale), requantized when y_scale is given."""
    a, a_scale, b, b_scale = _required(ctx, node, 0, 1, 3, 4)
    a_zp, b_zp, bias, y_scale, y_zp = (node.input(i) for i in (2, 5, 6, 7, 8))
    if float(node.attrs.get("alpha", 1.0)) != 1.0 or int(node.attrs.get("transA", 0)):
        raise ctx.error("only alpha=1 and transA=0 are supported")
    if len(a.shape) != 2 or len(b.shape) != 2:
        raise ctx.error(f"A {a.shape} and B {b.shape} must be matrices")
    check_int8_operand(ctx, a, a_zp)
    check_int8_operand(ctx, b, b_zp)
    if int(node.attrs.get("transB", 0)):
        if b.const is None:
            raise ctx.error(f"a transposed B {b.name!r} must be a constant")
        b = ctx.const(np.ascontiguousarray(b.const.T), b.dtype, name=f"{b.name}_t")
    n = b.shape[1]
    if bias is not None and (bias.dtype is not DType.INT32 or bias.size != n):
        raise ctx.error(f"C {bias.name!r} must be int32 with {n} values")
    out = (y_zp.dtype if y_zp is not None else DType.UINT8) if y_scale is not None \
        else DType.FLOAT32
    return int8_layer(ctx.emit("QGemm", [a, a_scale, a_zp, b, b_scale, b_zp, y_scale, y_zp,
                                         bias], {}, out_types=[((a.shape[0], n), out)]))


@onnx_op(MS + "QLinearSoftmax", since=1)
def import_qlinear_softmax(ctx: ImportContext, node: OnnxNode) -> list[Value]:
    """Softmax's ``opset`` attribute picks its axis semantics (before 13: the whole tail).
    Its own layer: onnxruntime's table-based arithmetic is not DQ → Softmax → Q's."""
    x, x_scale, y_scale = _required(ctx, node, 0, 1, 3)
    x_zp, y_zp = node.input(2), node.input(4)
    check_int8_operand(ctx, x, x_zp)
    if y_zp is not None and y_zp.dtype is not x.dtype:
        raise ctx.error(f"y_zero_point {y_zp.name!r} must be {x.dtype.name.lower()} like x")
    for v in (x_scale, y_scale):
        if v.size != 1 or v.dtype is not DType.FLOAT32:
            raise ctx.error(f"{v.name!r} must be one float32 value")
    rank = len(x.shape)
    single = int(node.attrs.get("opset", 13)) >= 13
    axis = int(node.attrs.get("axis", -1 if single else 1))
    if not -rank <= axis < rank:
        raise ctx.error(f"axis {axis} is out of range for rank {rank}")
    axis %= rank
    axes = [axis] if single else list(range(axis, rank))
    return ctx.emit("QLinearSoftmax", [x, x_scale, x_zp, y_scale, y_zp], {"axes": axes},
                    out_types=[(x.shape, x.dtype)])
