"""Importers of graph-level ops: Constant, Identity, Dropout, If."""

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
    if cond is None:
        raise ctx.error("If has no condition")
    if cond.is_const:
        branch = "then_branch" if bool(cond.const.reshape(-1)[0]) else "else_branch"
        return import_subgraph(ctx, node.graph_attrs[branch])
    return _select_branches(ctx, node, cond)


def _select_branches(ctx: ImportContext, node: OnnxNode, cond: Value) -> list[Value]:
    """An If whose condition is known only at run time (a wake-word model runs its verifier
    when the first stage's score passes a threshold): a loadable carries no control flow,
    so both branches run and ``Where(cond, then, else)`` keeps one per output — as
    TensorRT's conditional does when it evaluates both sides. The outputs must have one
    type whatever the branch (a fixed-shape loadable has one shape per tensor); the cost
    is the untaken branch's work."""
    if cond.size != 1:
        raise ctx.error(f"If's condition has shape {cond.shape}; a single value is required")
    then = import_subgraph(ctx, node.graph_attrs["then_branch"])
    other = import_subgraph(ctx, node.graph_attrs["else_branch"])
    if len(then) != len(other):
        raise ctx.error(f"If's branches give {len(then)} and {len(other)} outputs")
    if cond.dtype is not DType.BOOL:
        cond = ctx.emit("Cast", [cond], {"to": int(DType.BOOL)},
                        out_types=[(cond.shape, DType.BOOL)])[0]
    if cond.shape != ():
        cond = ctx.emit("Reshape", [cond], {"shape": []}, out_types=[((), DType.BOOL)])[0]
    outs = []
    for i, (a, b) in enumerate(zip(then, other)):
        if a.shape != b.shape or a.dtype is not b.dtype:
            raise ctx.error(
                f"If's output {i} is {a.dtype.name.lower()}{list(a.shape)} in the then branch and "
                f"{b.dtype.name.lower()}{list(b.shape)} in the else branch; with a condition known "
                "only at run time both must match (a loadable has one shape per tensor)")
        outs += ctx.emit("Where", [cond, a, b], out_types=[(a.shape, a.dtype)])
    return outs
