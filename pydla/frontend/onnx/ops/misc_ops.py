"""Importers of GridSample, AffineGrid, RoiAlign, SwiGLU, TensorScatter, BitCast and Det.

Canonical attributes: GridSample's ``mode`` is linear/nearest/cubic (opset 16's bilinear and
bicubic renamed), with ``padding_mode`` and ``align_corners``; AffineGrid's ``size`` is the
constant output size; RoiAlign's ``coordinate_transformation_mode`` is explicit
(output_half_pixel before opset 16); TensorScatter's ``axis`` is non-negative; BitCast
records its source type ``from`` beside ``to``. SwiGLU becomes Swish × B, which fuses.
"""

from __future__ import annotations

from pydla.dtypes import DType
from pydla.frontend.onnx.importer import ImportContext, OnnxNode
from pydla.frontend.onnx.ops.common import int_list
from pydla.frontend.onnx.registry import onnx_op
from pydla.ir import Value

_GRID_MODES = {"bilinear": "linear", "bicubic": "cubic", "linear": "linear",
               "cubic": "cubic", "nearest": "nearest"}


def _inputs(ctx: ImportContext, node: OnnxNode, count: int) -> list[Value]:
    values = [node.input(i) for i in range(count)]
    if any(v is None for v in values):
        raise ctx.error(f"the first {count} inputs are required")
    return values  # type: ignore[return-value]


@onnx_op("GridSample", since=16)
def import_grid_sample(ctx: ImportContext, node: OnnxNode) -> list[Value]:
    x, grid = _inputs(ctx, node, 2)
    a = node.attrs_with_defaults()
    mode = _GRID_MODES.get(str(a.get("mode", "linear")))
    padding = str(a.get("padding_mode", "zeros"))
    if mode is None or padding not in ("zeros", "border", "reflection"):
        raise ctx.error(f"mode {a.get('mode')!r} / padding_mode {padding!r} is not supported")
    rank = len(x.shape) - 2
    if rank < 1 or grid.shape[0] != x.shape[0] or len(grid.shape) != rank + 2 \
            or grid.shape[-1] != rank:
        raise ctx.error(f"grid shape {grid.shape} does not fit input shape {x.shape}")
    attrs = {"mode": mode, "padding_mode": padding,
             "align_corners": int(a.get("align_corners", 0))}
    shape = x.shape[:2] + grid.shape[1:-1]
    return ctx.emit("GridSample", [x, grid], attrs, out_types=[(shape, x.dtype)])


@onnx_op("AffineGrid", since=20)
def import_affine_grid(ctx: ImportContext, node: OnnxNode) -> list[Value]:
    theta, size_in = _inputs(ctx, node, 2)
    size = int_list(ctx, size_in, "AffineGrid size")
    rank = len(size) - 2
    if rank not in (2, 3) or theta.shape != (size[0], rank, rank + 1) or min(size) < 1:
        raise ctx.error(f"theta {theta.shape} and size {size} do not describe a 2-D or 3-D "
                        "grid")
    attrs = {"size": size, "align_corners": int(node.attrs_with_defaults().get(
        "align_corners", 0))}
    shape = (size[0], *size[2:], rank)
    return ctx.emit("AffineGrid", [theta], attrs, out_types=[(shape, theta.dtype)])


@onnx_op("RoiAlign", since=10)
def import_roi_align(ctx: ImportContext, node: OnnxNode) -> list[Value]:
    x, rois, batch = _inputs(ctx, node, 3)
    a = node.attrs_with_defaults()
    mode = str(a.get("mode", "avg"))
    transform = str(a.get("coordinate_transformation_mode", "output_half_pixel"))
    if mode not in ("avg", "max") or transform not in ("half_pixel", "output_half_pixel"):
        raise ctx.error(f"mode {mode!r} / coordinate_transformation_mode {transform!r} is "
                        "not supported")
    if len(x.shape) != 4 or len(rois.shape) != 2 or rois.shape[1] != 4 \
            or batch.shape != (rois.shape[0],):
        raise ctx.error(f"X {x.shape}, rois {rois.shape} and batch_indices {batch.shape} "
                        "do not fit")
    attrs = {"mode": mode, "coordinate_transformation_mode": transform,
             "output_height": int(a.get("output_height", 1)),
             "output_width": int(a.get("output_width", 1)),
             "sampling_ratio": int(a.get("sampling_ratio", 0)),
             "spatial_scale": float(a.get("spatial_scale", 1.0))}
    shape = (rois.shape[0], x.shape[1], attrs["output_height"], attrs["output_width"])
    return ctx.emit("RoiAlign", [x, rois, batch], attrs, out_types=[(shape, x.dtype)])


@onnx_op("SwiGLU", since=28)
def import_swiglu(ctx: ImportContext, node: OnnxNode) -> list[Value]:
    gate, value = _inputs(ctx, node, 2)
    if gate.shape != value.shape or gate.dtype != value.dtype:
        raise ctx.error(f"A {gate.shape} and B {value.shape} must have the same type")
    alpha = float(node.attrs_with_defaults().get("alpha", 1.0))
    t = [(gate.shape, gate.dtype)]
    swish = ctx.emit("Swish", [gate], {"alpha": alpha}, out_types=t)[0]
    return ctx.emit("Mul", [swish, value], {}, out_types=t)


@onnx_op("TensorScatter", since=24)
def import_tensor_scatter(ctx: ImportContext, node: OnnxNode) -> list[Value]:
    past, update = _inputs(ctx, node, 2)
    a = node.attrs_with_defaults()
    rank = len(past.shape)
    axis = int(a.get("axis", -2))
    axis = axis + rank if axis < 0 else axis
    mode = str(a.get("mode", "linear"))
    if mode not in ("linear", "circular") or not 1 <= axis < rank:
        raise ctx.error(f"mode {mode!r} / axis {a.get('axis')} is not supported (the axis "
                        "cannot be the batch axis)")
    fits = len(update.shape) == rank and all(
        u == p if i != axis else u <= p for i, (u, p) in enumerate(zip(update.shape,
                                                                       past.shape)))
    if not fits or update.dtype != past.dtype:
        raise ctx.error(f"update {update.shape} does not fit the cache {past.shape}")
    return ctx.emit("TensorScatter", node.inputs[:3], {"axis": axis, "mode": mode},
                    out_types=[(past.shape, past.dtype)])


@onnx_op("BitCast", since=26)
def import_bit_cast(ctx: ImportContext, node: OnnxNode) -> list[Value]:
    (x,) = _inputs(ctx, node, 1)
    code = int(node.attr("to", 0))
    try:
        to = DType(code)
    except ValueError:
        raise ctx.error(f"BitCast to type {code} is not supported") from None
    if to.itemsize != x.dtype.itemsize:
        raise ctx.error(f"{x.dtype.short} and {to.short} differ in width")
    return ctx.emit("BitCast", [x], {"to": int(to), "from": int(x.dtype)},
                    out_types=[(x.shape, to)])


@onnx_op("Det", since=11)
def import_det(ctx: ImportContext, node: OnnxNode) -> list[Value]:
    (x,) = _inputs(ctx, node, 1)
    if len(x.shape) < 2 or x.shape[-1] != x.shape[-2] or not x.dtype.is_float:
        raise ctx.error(f"Det needs floating-point square matrices, got {x.dtype.short} "
                        f"{x.shape}")
    return ctx.emit("Det", [x], {}, out_types=[(x.shape[:-2], x.dtype)])
