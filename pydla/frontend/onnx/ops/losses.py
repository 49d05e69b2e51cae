"""Importers of the loss ops NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss.

Canonical attributes: ``reduction`` ("none", "sum" or "mean") and ``ignore_index`` (an int,
or None when the model gives none, so that no class index is ignored).
"""

from __future__ import annotations

from pydla.frontend.onnx.importer import ImportContext, OnnxNode
from pydla.frontend.onnx.registry import onnx_op
from pydla.ir import Value


@onnx_op("NegativeLogLikelihoodLoss", "SoftmaxCrossEntropyLoss", since=12)
def import_loss(ctx: ImportContext, node: OnnxNode) -> list[Value]:
    x, target = node.input(0), node.input(1)
    if x is None or target is None:
        raise ctx.error("scores and target are required")
    if len(x.shape) < 2 or target.shape != (x.shape[0],) + x.shape[2:]:
        raise ctx.error(f"target shape {target.shape} does not match scores {x.shape}")
    a = node.attrs_with_defaults()
    reduction = str(a.get("reduction", "mean"))
    if reduction not in ("none", "sum", "mean"):
        raise ctx.error(f"reduction {reduction!r} is not supported")
    ignore = a.get("ignore_index")
    attrs = {"reduction": reduction, "ignore_index": None if ignore is None else int(ignore)}
    loss_shape = target.shape if reduction == "none" else ()
    types = [(loss_shape, x.dtype)]
    if node.op_type == "SoftmaxCrossEntropyLoss" and len(node.output_names) > 1 \
            and node.output_names[1]:
        types.append((x.shape, x.dtype))
    return ctx.emit(node.op_type, node.inputs[:3], attrs, out_types=types)
