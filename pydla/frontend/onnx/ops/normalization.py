"""Importers of the normalizations: BatchNormalization, InstanceNormalization,
LayerNormalization, GroupNormalization, RMSNormalization, LpNormalization, LRN,
MeanVarianceNormalization.

Axes are normalised to non-negative values. BatchNormalization is the inference form with
per-channel parameters and ``epsilon``; training mode is refused.
"""

from __future__ import annotations

import numpy as np

from pydla.dtypes import to_compute, to_storage
from pydla.frontend.onnx.importer import ImportContext, OnnxNode
from pydla.frontend.onnx.ops.common import passthrough
from pydla.frontend.onnx.registry import onnx_op
from pydla.ir import Value


def _x(ctx: ImportContext, node: OnnxNode, min_rank: int = 1) -> Value:
    x = node.input(0)
    if x is None or len(x.shape) < min_rank:
        raise ctx.error(f"X must have rank {min_rank} or more")
    return x


def _axis(ctx: ImportContext, axis: int, rank: int) -> int:
    if not -rank <= axis < rank:
        raise ctx.error(f"axis {axis} is out of range for rank {rank}")
    return axis % rank


def _params(ctx: ImportContext, node: OnnxNode, count: int) -> list[Value]:
    vals = [node.input(i) for i in range(1, count + 1)]
    if any(v is None for v in vals):
        raise ctx.error(f"{node.op_type} needs all of its {count + 1} inputs")
    return vals  # type: ignore[return-value]


@onnx_op("BatchNormalization")
def import_batch_normalization(ctx: ImportContext, node: OnnxNode) -> list[Value]:
    x = _x(ctx, node, 2)
    params = _params(ctx, node, 4)
    a = node.attrs_with_defaults()
    eps = float(a.get("epsilon", 1e-5))
    training = node.opset >= 14 and int(a.get("training_mode", 0))
    if training or len([n for n in node.output_names if n]) > 1:
        raise ctx.error("BatchNormalization in training mode (batch statistics, running "
                        "mean/variance outputs) is not supported for inference")
    if all(p.size == x.shape[1] for p in params):
        return ctx.emit("BatchNormalization", [x, *params], {"epsilon": eps},
                        out_types=[(x.shape, x.dtype)])
    return _batch_norm_per_element(ctx, x, params, eps)


def _batch_norm_per_element(ctx: ImportContext, x: Value, params: list[Value],
                            eps: float) -> list[Value]:
    """Opset < 9 with spatial=0: one statistic per (C, spatial…) element, as Mul + Add."""
    s, b, m, v = (to_compute(ctx.const_value(p, "BatchNormalization parameters"),
                             p.dtype).astype(np.float64) for p in params)
    if any(arr.size != int(np.prod(x.shape[1:])) for arr in (s, b, m, v)):
        raise ctx.error(f"parameters {[p.shape for p in params]} fit neither the channels nor "
                        f"the per-element (spatial=0) layout of X {x.shape}")
    inv = s / np.sqrt(v + eps)
    scale = ctx.const(to_storage(inv.reshape(x.shape[1:]), x.dtype), x.dtype, "bn_scale")
    shift = ctx.const(to_storage((b - m * inv).reshape(x.shape[1:]), x.dtype), x.dtype,
                      "bn_shift")
    scaled = ctx.emit("Mul", [x, scale], {}, out_types=[(x.shape, x.dtype)])
    return ctx.emit("Add", [scaled[0], shift], {}, out_types=[(x.shape, x.dtype)])


@onnx_op("LayerNormalization", since=17)
def import_layer_normalization(ctx: ImportContext, node: OnnxNode) -> list[Value]:
    x = _x(ctx, node)
    scale = node.input(1)
    if scale is None:
        raise ctx.error("Scale is required")
    a = node.attrs_with_defaults()
    attrs = {"axis": _axis(ctx, int(a.get("axis", -1)), len(x.shape)),
             "epsilon": float(a.get("epsilon", 1e-5))}
    return ctx.emit("LayerNormalization", [x, scale, node.input(2)], attrs,
                    num_outputs=len(node.output_names))


@onnx_op("RMSNormalization", since=23)
def import_rms_normalization(ctx: ImportContext, node: OnnxNode) -> list[Value]:
    x = _x(ctx, node)
    a = node.attrs_with_defaults()
    attrs = {"axis": _axis(ctx, int(a.get("axis", -1)), len(x.shape)),
             "epsilon": float(a.get("epsilon", 1e-5))}
    return ctx.emit("RMSNormalization", [x, *_params(ctx, node, 1)], attrs,
                    out_types=[(x.shape, x.dtype)])


@onnx_op("GroupNormalization", since=18)
def import_group_normalization(ctx: ImportContext, node: OnnxNode) -> list[Value]:
    x = _x(ctx, node, 2)
    a = node.attrs_with_defaults()
    groups = int(a["num_groups"])
    channels = x.shape[1]
    scale, bias = _params(ctx, node, 2)
    if groups < 1 or channels % groups:
        raise ctx.error(f"{channels} channels cannot form {groups} groups")
    if {scale.size, bias.size} - {channels, groups}:
        raise ctx.error(f"scale {scale.shape} and bias {bias.shape} must have one value per "
                        "channel (or per group before opset 21)")
    attrs = {"num_groups": groups, "epsilon": float(a.get("epsilon", 1e-5))}
    return ctx.emit("GroupNormalization", [x, scale, bias], attrs, out_types=[(x.shape, x.dtype)])


@onnx_op("InstanceNormalization")
def import_instance_normalization(ctx: ImportContext, node: OnnxNode) -> list[Value]:
    x = _x(ctx, node, 3)
    attrs = {"epsilon": float(node.attrs_with_defaults().get("epsilon", 1e-5))}
    return ctx.emit("InstanceNormalization", [x, *_params(ctx, node, 2)], attrs)


@onnx_op("LpNormalization")
def import_lp_normalization(ctx: ImportContext, node: OnnxNode) -> list[Value]:
    x = _x(ctx, node)
    a = node.attrs_with_defaults()
    p = int(a.get("p", 2))
    if p not in (1, 2):
        raise ctx.error(f"p must be 1 or 2, not {p}")
    return ctx.emit("LpNormalization", [x],
                    {"axis": _axis(ctx, int(a.get("axis", -1)), len(x.shape)), "p": p})


@onnx_op("MeanVarianceNormalization", since=9)
def import_mean_variance_normalization(ctx: ImportContext, node: OnnxNode) -> list[Value]:
    x = _x(ctx, node)
    axes = sorted({_axis(ctx, int(v), len(x.shape))
                   for v in node.attrs_with_defaults().get("axes", [0, 2, 3])})
    return ctx.emit("MeanVarianceNormalization", [x], {"axes": axes},
                    out_types=[(x.shape, x.dtype)])


passthrough("LRN")
