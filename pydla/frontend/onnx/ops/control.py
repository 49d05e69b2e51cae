"""Importers of graph-level ops: Constant, Identity, Dropout, If (constant condition)."""

from __future__ import annotations

import numpy as np

from pydla.dtypes import DType
from pydla.frontend.onnx.importer import ImportContext, OnnxNode, import_subgraph, tensor_to_array
from pydla.frontend.onnx.registry import onnx_op
from pydla.ir import Value


@onnx_op("Constant")
def import_constant(ctx: ImportContext, node: OnnxNode) -> list[Value]:
    proto = node.proto
    for a in proto.attribute:
        if a.name == "value":
            arr, dtype = tensor_to_array(a.t)
            return [ctx.const(arr, dtype, node.output_names[0])]
    if "value_float" in node.attrs:
        return [ctx.const(np.array(node.attrs["value_float"], np.float32))]
    if "value_floats" in node.attrs:
        return [ctx.const(np.array(node.attrs["value_floats"], np.float32))]
    if "value_int" in node.attrs:
        return [ctx.const(np.array(node.attrs["value_int"], np.int64))]
    if "value_ints" in node.attrs:
        return [ctx.const(np.array(node.attrs["value_ints"], np.int64))]
    raise ctx.error(f"Constant with attributes {sorted(node.attrs)} is not supported "
                    "(string and sparse constants have no runtime type)")


@onnx_op("Identity")
def import_identity(ctx: ImportContext, node: OnnxNode) -> list[Value | None]:
    return [node.inputs[0]]


@onnx_op("Dropout")
def import_dropout(ctx: ImportContext, node: OnnxNode) -> list[Value | None]:
    # Inference: Dropout is the identity (training_mode must be a constant false).
    training = node.input(2)
    if training is not None and bool(ctx.const_value(training, "training_mode").reshape(-1)[0]):
        raise ctx.error("Dropout in training mode is not supported for inference")
    x = node.inputs[0]
    assert x is not None
    outs: list[Value | None] = [x]
    if len(node.output_names) > 1 and node.output_names[1]:
        ctx.check_constant_size(x.shape, DType.BOOL, "Dropout's mask")
        outs.append(ctx.const(np.ones(x.shape, np.bool_), DType.BOOL))
    return outs


@onnx_op("If")
def import_if(ctx: ImportContext, node: OnnxNode) -> list[Value]:
    cond = node.inputs[0]
    if cond is None or not cond.is_const:
        raise ctx.error("If needs a condition known at build time (a fixed-shape loadable "
                        "carries no control flow)")
    branch = "then_branch" if bool(cond.const.reshape(-1)[0]) else "else_branch"
    return import_subgraph(ctx, node.graph_attrs[branch])
