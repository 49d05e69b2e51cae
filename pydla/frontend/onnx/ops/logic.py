"""Importers of comparisons, boolean logic, Where, Cast and CastLike.

Cast's canonical form is ``Cast`` with the single attribute ``to`` (a DType code);
CastLike becomes that Cast. ``saturate`` and ``round_mode`` only concern float8/float4
targets, which pydla does not support, so they are dropped.
"""

from __future__ import annotations

import onnx

from pydla.dtypes import DType
from pydla.frontend.onnx.importer import ImportContext, OnnxNode
from pydla.frontend.onnx.ops.common import passthrough
from pydla.frontend.onnx.registry import onnx_op
from pydla.ir import Value

passthrough("Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "Not", "And", "Or",
            "Xor", "Where")


def _cast(ctx: ImportContext, x: Value, code: int) -> list[Value]:
    try:
        to = DType(code)
    except ValueError:
        names = {v: k for k, v in onnx.TensorProto.DataType.items()}
        raise ctx.error(f"cast to {names.get(code, code)} is not supported") from None
    if to is x.dtype:
        return [x]
    return ctx.emit("Cast", [x], {"to": int(to)}, out_types=[(x.shape, to)])


@onnx_op("Cast")
def import_cast(ctx: ImportContext, node: OnnxNode) -> list[Value]:
    x, to = node.inputs[0], node.attr("to")
    assert x is not None
    if to is None:
        raise ctx.error("Cast has no 'to' attribute")
    return _cast(ctx, x, int(to))


@onnx_op("CastLike")
def import_cast_like(ctx: ImportContext, node: OnnxNode) -> list[Value]:
    x, like = node.inputs[0], node.inputs[1]
    assert x is not None and like is not None
    return _cast(ctx, x, int(like.dtype))
