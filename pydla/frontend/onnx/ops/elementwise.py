"""Importers of elementwise arithmetic and activations.

The ONNX node is the canonical node with its schema's attribute defaults filled in; the
attributes of these ops never changed meaning across opsets 7..28. Clip (attributes before
opset 11, optional inputs after) and PRelu (older exporters' per-channel slope) are
normalised, and enum attributes are checked here so that a bad model fails at import.
"""

from __future__ import annotations

import numpy as np

from pydla.dtypes import to_compute
from pydla.frontend.onnx.importer import ImportContext, OnnxNode
from pydla.frontend.onnx.ops.common import passthrough
from pydla.frontend.onnx.registry import onnx_op
from pydla.ir import Value

passthrough(
    # unary math
    "Abs", "Neg", "Floor", "Ceil", "Round", "Sign", "Sqrt", "Reciprocal", "Exp", "Log",
    "Sin", "Cos", "Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh", "Asinh", "Acosh", "Atanh",
    "Erf", "IsNaN", "IsInf", "BitwiseNot",
    # binary and variadic arithmetic (numpy broadcasting is ONNX's multidirectional rule)
    "Add", "Sub", "Mul", "Div", "Pow", "BitwiseAnd", "BitwiseOr", "BitwiseXor",
    "Sum", "Mean", "Min", "Max",
    # activations
    "Relu", "LeakyRelu", "Elu", "Selu", "Celu", "Sigmoid", "HardSigmoid", "HardSwish", "Tanh",
    "Softplus", "Softsign", "Mish", "ThresholdedRelu", "Shrink", "Swish",
)


def _checked(ctx: ImportContext, node: OnnxNode, name: str,
             allowed: tuple[object, ...]) -> list[Value]:
    """Emit the node as it is once attribute ``name`` is one of ``allowed``."""
    attrs = node.attrs_with_defaults()
    if attrs.get(name) not in allowed:
        raise ctx.error(f"{name}={attrs.get(name)!r} is not one of {list(allowed)}")
    return ctx.emit(node.op_type, node.inputs, attrs)


@onnx_op("Mod")
def import_mod(ctx: ImportContext, node: OnnxNode) -> list[Value]:
    return _checked(ctx, node, "fmod", (0, 1))


@onnx_op("BitShift")
def import_bitshift(ctx: ImportContext, node: OnnxNode) -> list[Value]:
    return _checked(ctx, node, "direction", ("LEFT", "RIGHT"))


@onnx_op("Gelu")
def import_gelu(ctx: ImportContext, node: OnnxNode) -> list[Value]:
    return _checked(ctx, node, "approximate", ("none", "tanh"))


@onnx_op("Clip")
def import_clip_attributes(ctx: ImportContext, node: OnnxNode) -> list[Value]:
    # Before opset 11 the bounds are attributes defaulting to ∓FLT_MAX (which does clip ±inf).
    attrs = node.attrs_with_defaults()
    return ctx.emit("Clip", node.inputs[:1], {"min": attrs["min"], "max": attrs["max"]})


@onnx_op("Clip", since=11)
def import_clip(ctx: ImportContext, node: OnnxNode) -> list[Value]:
    """Constant bounds become the ``min``/``max`` attributes; runtime bounds stay inputs."""
    inputs: list[Value | None] = [node.inputs[0]]
    attrs = {}
    for index, name in ((1, "min"), (2, "max")):
        bound = node.input(index)
        if bound is not None and bound.is_const:
            # .item() keeps integer bounds exact (int64/uint64 do not fit a float).
            attrs[name] = to_compute(bound.const, bound.dtype).reshape(-1)[0].item()
            bound = None
        inputs.append(bound)
    while inputs[-1] is None:
        inputs.pop()
    return ctx.emit("Clip", inputs, attrs)


@onnx_op("PRelu")
def import_prelu(ctx: ImportContext, node: OnnxNode) -> list[Value]:
    x, slope = node.inputs[0], node.inputs[1]
    assert x is not None and slope is not None
    try:
        fits = np.broadcast_shapes(slope.shape, x.shape) == x.shape
    except ValueError:
        fits = False
    if not fits:
        # Older exporters give one slope per channel as [C]; it applies along axis 1.
        if len(x.shape) < 2 or slope.size != x.shape[1] or not slope.is_const:
            raise ctx.error(f"slope of shape {slope.shape} does not broadcast to the input's "
                            f"shape {x.shape}")
        view = (x.shape[1],) + (1,) * (len(x.shape) - 2)
        slope = ctx.const(slope.const.reshape(view), slope.dtype, slope.name)
    return ctx.emit("PRelu", [x, slope], {}, out_types=[(x.shape, x.dtype)])
