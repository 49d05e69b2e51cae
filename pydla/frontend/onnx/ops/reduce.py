"""Importers of reductions: Reduce* and ArgMax/ArgMin.

Canonical form: ``Reduce*`` with ``axes`` (sorted, non-negative, possibly empty) and
``keepdims``. "All axes" is spelled out, and an empty list means a reduction over no axis
(``noop_with_empty_axes``), which still applies the op's elementwise part (square, abs, log…)
as onnxruntime does. The axes move from the attribute (old opsets) or the ``axes`` input
(ReduceSum since 13, the others since 18) into the attribute.
"""

from __future__ import annotations

from pydla.frontend.onnx.importer import ImportContext, OnnxNode
from pydla.frontend.onnx.ops.common import int_list
from pydla.frontend.onnx.registry import onnx_op
from pydla.ir import Value

REDUCE_OPS = ("ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1",
              "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare")
# Reductions over no axis that leave the input unchanged (the others square, abs, log…).
_IDENTITY_WHEN_EMPTY = ("ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd",
                        "ReduceLogSumExp")


def _normalize_axes(ctx: ImportContext, axes: list[int], rank: int) -> list[int]:
    out = set()
    for a in axes:
        if not -rank <= a < rank:
            raise ctx.error(f"axis {a} is out of range for rank {rank}")
        out.add(a % rank)
    return sorted(out)


@onnx_op(*REDUCE_OPS)
def import_reduce(ctx: ImportContext, node: OnnxNode) -> list[Value | None]:
    x = node.inputs[0]
    assert x is not None
    attrs = node.attrs_with_defaults()
    rank = len(x.shape)
    axes_input = node.input(1)
    if axes_input is not None:
        axes = int_list(ctx, axes_input, "axes")
    else:
        axes = [int(a) for a in attrs.get("axes", [])]
    if not axes:
        if int(attrs.get("noop_with_empty_axes", 0)):
            if node.op_type in _IDENTITY_WHEN_EMPTY:
                return [x]
        else:
            axes = list(range(rank))
    return ctx.emit(node.op_type, [x], {"axes": _normalize_axes(ctx, axes, rank),
                                        "keepdims": int(attrs.get("keepdims", 1))})


@onnx_op("ArgMax", "ArgMin")
def import_arg(ctx: ImportContext, node: OnnxNode) -> list[Value | None]:
    x = node.inputs[0]
    assert x is not None
    attrs = node.attrs_with_defaults()
    rank = len(x.shape)
    axis = int(attrs.get("axis", 0))
    if not -rank <= axis < rank:
        raise ctx.error(f"axis {axis} is out of range for rank {rank}")
    return ctx.emit(node.op_type, [x], {"axis": axis % rank,
                                        "keepdims": int(attrs.get("keepdims", 1)),
                                        "select_last_index": int(attrs.get("select_last_index",
                                                                           0))})
