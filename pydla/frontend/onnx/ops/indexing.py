"""Importers of indexing ops: gathers, scatters, TopK, cumulative sums/products, OneHot,
Compress, NonZero, ReverseSequence.

Index tensors stay data inputs (the kernels check their range at run time); parameters that
fix an output shape (TopK's k, OneHot's depth, Compress's condition) must be constants.
"""

from __future__ import annotations

import numpy as np

from pydla.dtypes import DType, to_compute
from pydla.frontend.onnx.importer import ImportContext, OnnxNode
from pydla.frontend.onnx.ops.shape import data_input, emit_one, norm_axis, scalar_param
from pydla.frontend.onnx.registry import onnx_op
from pydla.ir import Value

REDUCTIONS = ("none", "add", "mul", "max", "min")


@onnx_op("Gather")
def import_gather(ctx: ImportContext, node: OnnxNode) -> list[Value]:
    x, idx = data_input(ctx, node, 0), data_input(ctx, node, 1)
    axis = norm_axis(ctx, int(node.attr("axis", 0)), len(x.shape))
    shape = x.shape[:axis] + idx.shape + x.shape[axis + 1:]
    return emit_one(ctx, "Gather", [x, idx], {"axis": axis}, shape, x.dtype)


@onnx_op("GatherElements", since=11)
def import_gather_elements(ctx: ImportContext, node: OnnxNode) -> list[Value]:
    x, idx = data_input(ctx, node, 0), data_input(ctx, node, 1)
    if len(idx.shape) != len(x.shape):
        raise ctx.error(f"indices rank {len(idx.shape)} differs from data rank {len(x.shape)}")
    axis = norm_axis(ctx, int(node.attr("axis", 0)), len(x.shape))
    return emit_one(ctx, "GatherElements", [x, idx], {"axis": axis}, idx.shape, x.dtype)


@onnx_op("GatherND", since=11)
def import_gather_nd(ctx: ImportContext, node: OnnxNode) -> list[Value]:
    x, idx = data_input(ctx, node, 0), data_input(ctx, node, 1)
    b = int(node.attr("batch_dims", 0))
    if len(idx.shape) < 1 or not 0 <= b < min(len(x.shape), len(idx.shape)):
        raise ctx.error(f"batch_dims {b} does not fit data {x.shape} and indices {idx.shape}")
    k = idx.shape[-1]
    if k > len(x.shape) - b or x.shape[:b] != idx.shape[:b]:
        raise ctx.error(f"indices {idx.shape} do not fit data {x.shape} (batch_dims {b})")
    shape = x.shape[:b] + idx.shape[b:-1] + x.shape[b + k:]
    return emit_one(ctx, "GatherND", [x, idx], {"batch_dims": b}, shape, x.dtype)


def _reduction(ctx: ImportContext, node: OnnxNode) -> str:
    reduction = str(node.attr("reduction", "none"))
    if reduction not in REDUCTIONS:
        raise ctx.error(f"reduction {reduction!r} is not one of {REDUCTIONS}")
    return reduction


@onnx_op("ScatterND", since=11)
def import_scatter_nd(ctx: ImportContext, node: OnnxNode) -> list[Value]:
    x, idx, upd = (data_input(ctx, node, i) for i in range(3))
    k = idx.shape[-1] if idx.shape else 0
    if not idx.shape or k > len(x.shape) or upd.shape != idx.shape[:-1] + x.shape[k:]:
        raise ctx.error(f"updates {upd.shape} do not fit data {x.shape} and indices "
                        f"{idx.shape}")
    attrs = {"reduction": _reduction(ctx, node)}
    return emit_one(ctx, "ScatterND", [x, idx, upd], attrs, x.shape, x.dtype)


@onnx_op("ScatterElements", since=11)
@onnx_op("Scatter", since=9)
def import_scatter_elements(ctx: ImportContext, node: OnnxNode) -> list[Value]:
    # Scatter (opsets 9-10) is ScatterElements without a reduction.
    x, idx, upd = (data_input(ctx, node, i) for i in range(3))
    if len(idx.shape) != len(x.shape) or idx.shape != upd.shape:
        raise ctx.error(f"indices {idx.shape} and updates {upd.shape} do not fit data "
                        f"{x.shape}")
    axis = norm_axis(ctx, int(node.attr("axis", 0)), len(x.shape))
    attrs = {"axis": axis, "reduction": _reduction(ctx, node)}
    return emit_one(ctx, "ScatterElements", [x, idx, upd], attrs, x.shape, x.dtype)


@onnx_op("NonZero", since=9)
def import_nonzero(ctx: ImportContext, node: OnnxNode) -> list[Value]:
    x = data_input(ctx, node)
    if not x.is_const:
        raise ctx.error("NonZero of a runtime tensor has a data-dependent output shape, which "
                        "a fixed-shape loadable cannot hold (only constant inputs are folded)")
    values = to_compute(x.const, x.dtype).reshape(x.shape or (1,))
    return [ctx.const(np.array(np.nonzero(values), np.int64).reshape(values.ndim, -1),
                      DType.INT64)]


@onnx_op("Compress", since=9)
def import_compress(ctx: ImportContext, node: OnnxNode) -> list[Value]:
    x = data_input(ctx, node)
    cond = ctx.const_value(node.input(1), "Compress condition (it fixes the output shape)")
    selected = np.flatnonzero(cond.reshape(-1).astype(bool)).astype(np.int64)
    axis = node.attr("axis")
    if axis is None:
        # Without an axis the input is flattened first.
        x = emit_one(ctx, "Reshape", [x], {"shape": [x.size]}, [x.size], x.dtype)[0]
        axis = 0
    axis = norm_axis(ctx, int(axis), len(x.shape))
    if selected.size and selected[-1] >= x.shape[axis]:
        raise ctx.error(f"condition selects index {selected[-1]} of axis {axis}, which has "
                        f"size {x.shape[axis]}")
    shape = x.shape[:axis] + (selected.size,) + x.shape[axis + 1:]
    return emit_one(ctx, "Gather", [x, ctx.const(selected, DType.INT64)], {"axis": axis},
                    shape, x.dtype)


@onnx_op("OneHot", since=9)
def import_one_hot(ctx: ImportContext, node: OnnxNode) -> list[Value]:
    idx, values = data_input(ctx, node, 0), data_input(ctx, node, 2)
    depth = int(scalar_param(ctx, node.input(1), "OneHot depth"))
    if depth <= 0:
        raise ctx.error(f"depth {depth} must be positive")
    if values.size != 2:
        raise ctx.error(f"values must hold [off, on], it has shape {values.shape}")
    axis = norm_axis(ctx, int(node.attr("axis", -1)), len(idx.shape) + 1)
    shape = idx.shape[:axis] + (depth,) + idx.shape[axis:]
    return emit_one(ctx, "OneHot", [idx, values], {"axis": axis, "depth": depth}, shape,
                    values.dtype)


@onnx_op("TopK")
def import_top_k(ctx: ImportContext, node: OnnxNode) -> list[Value]:
    x = data_input(ctx, node)
    axis = norm_axis(ctx, int(node.attr("axis", -1)), len(x.shape))
    if node.opset < 10:
        k = int(node.attr("k", 0))
    else:
        k = int(scalar_param(ctx, node.input(1), "TopK k"))
    if not 0 <= k <= x.shape[axis]:
        raise ctx.error(f"k {k} is out of range for axis {axis} of size {x.shape[axis]}")
    attrs = {"axis": axis, "k": k, "largest": int(node.attr("largest", 1)),
             "sorted": int(node.attr("sorted", 1))}
    shape = x.shape[:axis] + (k,) + x.shape[axis + 1:]
    return ctx.emit("TopK", [x], attrs, out_types=[(shape, x.dtype), (shape, DType.INT64)])


def _import_cumulative(ctx: ImportContext, node: OnnxNode) -> list[Value]:
    x = data_input(ctx, node)
    axis = norm_axis(ctx, int(scalar_param(ctx, node.input(1), f"{node.op_type} axis")),
                     len(x.shape))
    attrs = {"axis": axis, "exclusive": int(node.attr("exclusive", 0)),
             "reverse": int(node.attr("reverse", 0))}
    return emit_one(ctx, node.op_type, [x], attrs, x.shape, x.dtype)


onnx_op("CumSum", since=11)(_import_cumulative)
onnx_op("CumProd", since=26)(_import_cumulative)


@onnx_op("ReverseSequence", since=10)
def import_reverse_sequence(ctx: ImportContext, node: OnnxNode) -> list[Value]:
    x, lens = data_input(ctx, node, 0), data_input(ctx, node, 1)
    rank = len(x.shape)
    batch = norm_axis(ctx, int(node.attr("batch_axis", 1)), rank, "batch_axis")
    time = norm_axis(ctx, int(node.attr("time_axis", 0)), rank, "time_axis")
    if batch == time or lens.shape != (x.shape[batch],):
        raise ctx.error(f"batch_axis {batch}, time_axis {time} and sequence_lens {lens.shape} "
                        f"do not fit input {x.shape}")
    attrs = {"batch_axis": batch, "time_axis": time}
    return emit_one(ctx, "ReverseSequence", [x, lens], attrs, x.shape, x.dtype)
