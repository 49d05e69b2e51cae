"""Importers of Softmax, LogSoftmax and Hardmax.

Before opset 13 the input is coerced to 2-D at ``axis`` (default 1) and normalised over the
whole tail; from 13 on over the single ``axis`` (default -1). Both become the canonical
``axes``: the contiguous, non-negative list of normalised axes.
"""

from __future__ import annotations

from pydla.frontend.onnx.importer import ImportContext, OnnxNode
from pydla.frontend.onnx.registry import onnx_op
from pydla.ir import Value


def _import(ctx: ImportContext, node: OnnxNode, single_axis: bool) -> list[Value]:
    x = node.input(0)
    if x is None or len(x.shape) == 0:
        raise ctx.error(f"{node.op_type} needs an input of rank 1 or more")
    rank = len(x.shape)
    axis = int(node.attr("axis", -1 if single_axis else 1))
    if not -rank <= axis < rank:
        raise ctx.error(f"axis {axis} is out of range for rank {rank}")
    axis %= rank
    axes = [axis] if single_axis else list(range(axis, rank))
    return ctx.emit(node.op_type, [x], {"axes": axes}, out_types=[(x.shape, x.dtype)])


@onnx_op("Softmax", "LogSoftmax", "Hardmax")
def import_softmax_2d(ctx: ImportContext, node: OnnxNode) -> list[Value]:
    return _import(ctx, node, single_axis=False)


@onnx_op("Softmax", "LogSoftmax", "Hardmax", since=13)
def import_softmax(ctx: ImportContext, node: OnnxNode) -> list[Value]:
    return _import(ctx, node, single_axis=True)
