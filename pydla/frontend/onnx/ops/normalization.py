"""Importers of the normalizations: BatchNormalization, InstanceNormalization,
LayerNormalization, GroupNormalization, RMSNormalization, LpNormalization, LRN,
MeanVarianceNormalization.

Axes are normalised to non-negative values; BatchNormalization keeps only ``epsilon`` (plus
``training_mode``/``momentum`` when the model asks for batch statistics).
"""

from __future__ import annotations

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
    attrs: dict[str, float | int] = {"epsilon": float(a.get("epsilon", 1e-5))}
    wanted = [n for n in node.output_names if n]
    if node.opset >= 14 and int(a.get("training_mode", 0)):
        # Normalise with the batch's statistics and update the running ones.
        mean, var = params[2], params[3]
        attrs.update(training_mode=1, momentum=float(a.get("momentum", 0.9)))
        types = [(x.shape, x.dtype), (mean.shape, mean.dtype), (var.shape, var.dtype)]
        return ctx.emit("BatchNormalization", [x, *params], attrs,
                        out_types=types[:len(node.output_names)])
    if len(wanted) > 1:
        raise ctx.error("the mean/variance outputs of BatchNormalization exist only in "
                        "training mode, which inference does not run")
    return ctx.emit("BatchNormalization", [x, *params], attrs, num_outputs=1)


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
