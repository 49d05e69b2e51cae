"""Importers of ops that rearrange elements in space: Pad, CenterCropPad, DepthToSpace,
SpaceToDepth, Trilu, Col2Im.

Pad's canonical form has one ``pads`` entry per axis (begins then ends, negative = crop), so
CenterCropPad lowers to it too.
"""

from __future__ import annotations

import math

from pydla.frontend.onnx.importer import ImportContext, OnnxNode
from pydla.frontend.onnx.ops.common import int_list
from pydla.frontend.onnx.ops.shape import data_input, emit_one, norm_axes, scalar_param
from pydla.frontend.onnx.registry import onnx_op
from pydla.ir import Value

PAD_MODES = ("constant", "reflect", "edge", "wrap")


@onnx_op("Pad", since=2)
def import_pad(ctx: ImportContext, node: OnnxNode) -> list[Value]:
    x = data_input(ctx, node)
    rank = len(x.shape)
    mode = str(node.attr("mode", "constant"))
    if mode not in PAD_MODES:
        raise ctx.error(f"pad mode {mode!r} is not supported (expected one of {PAD_MODES})")
    inputs: list[Value | None] = [x]
    value: int | float | bool = 0
    axes = list(range(rank))
    if node.opset < 11:
        pads = [int(p) for p in node.attr("pads", [])]
        value = float(node.attr("value", 0.0))
    else:
        pads = int_list(ctx, node.input(1), "Pad pads")
        if node.input(3) is not None:
            axes = norm_axes(ctx, int_list(ctx, node.input(3), "Pad axes"), rank)
        fill = node.input(2)
        if fill is not None and fill.size and mode == "constant":
            if fill.is_const:
                value = scalar_param(ctx, fill, "Pad constant_value")
            else:
                inputs.append(fill)  # a runtime fill value stays a data input
    if len(pads) != 2 * len(axes):
        raise ctx.error(f"pads {pads} need two entries per padded axis ({len(axes)} axes)")
    full = [0] * (2 * rank)
    for i, a in enumerate(axes):
        full[a], full[a + rank] = pads[i], pads[i + len(axes)]
    shape = [d + full[i] + full[i + rank] for i, d in enumerate(x.shape)]
    if min(shape, default=0) < 0:
        raise ctx.error(f"pads {full} crop more than the input shape {x.shape}")
    attrs = {"mode": mode, "pads": full}
    if mode == "constant":
        attrs["value"] = value
    return emit_one(ctx, "Pad", inputs, attrs, shape, x.dtype)


@onnx_op("CenterCropPad", since=18)
def import_center_crop_pad(ctx: ImportContext, node: OnnxNode) -> list[Value]:
    x = data_input(ctx, node)
    rank = len(x.shape)
    target = int_list(ctx, node.input(1), "CenterCropPad shape")
    axes = norm_axes(ctx, node.attr("axes", list(range(rank))), rank)
    if len(target) != len(axes):
        raise ctx.error(f"shape {target} does not match axes {axes}")
    pads = [0] * (2 * rank)
    for a, want in zip(axes, target):
        diff = want - x.shape[a]
        # Centre with the odd element at the end: crops and pads begin with floor(diff / 2).
        begin = diff // 2 if diff >= 0 else -((-diff) // 2)
        pads[a], pads[a + rank] = begin, diff - begin
    shape = [d + pads[i] + pads[i + rank] for i, d in enumerate(x.shape)]
    return emit_one(ctx, "Pad", [x], {"mode": "constant", "pads": pads, "value": 0}, shape,
                    x.dtype)


def _blocksize(ctx: ImportContext, node: OnnxNode, x: Value) -> int:
    if len(x.shape) != 4:
        raise ctx.error(f"{node.op_type} needs a 4-D input, got shape {x.shape}")
    bs = int(node.attr("blocksize", 0))
    if bs <= 0:
        raise ctx.error(f"blocksize {bs} must be positive")
    return bs


def _mode(ctx: ImportContext, node: OnnxNode) -> str:
    mode = str(node.attr("mode", "DCR")).upper()
    if mode not in ("DCR", "CRD"):
        raise ctx.error(f"mode {mode!r} must be DCR or CRD")
    return mode


@onnx_op("DepthToSpace")
def import_depth_to_space(ctx: ImportContext, node: OnnxNode) -> list[Value]:
    x = data_input(ctx, node)
    bs = _blocksize(ctx, node, x)
    b, c, h, w = x.shape
    if c % (bs * bs):
        raise ctx.error(f"channels {c} are not divisible by blocksize² {bs * bs}")
    return emit_one(ctx, "DepthToSpace", [x], {"blocksize": bs, "mode": _mode(ctx, node)},
                    [b, c // (bs * bs), h * bs, w * bs], x.dtype)


@onnx_op("SpaceToDepth")
def import_space_to_depth(ctx: ImportContext, node: OnnxNode) -> list[Value]:
    x = data_input(ctx, node)
    bs = _blocksize(ctx, node, x)
    b, c, h, w = x.shape
    if h % bs or w % bs:
        raise ctx.error(f"spatial size {h}x{w} is not divisible by blocksize {bs}")
    return emit_one(ctx, "SpaceToDepth", [x], {"blocksize": bs, "mode": _mode(ctx, node)},
                    [b, c * bs * bs, h // bs, w // bs], x.dtype)


@onnx_op("Trilu", since=14)
def import_trilu(ctx: ImportContext, node: OnnxNode) -> list[Value]:
    x = data_input(ctx, node)
    if len(x.shape) < 2:
        raise ctx.error(f"Trilu needs rank >= 2, got shape {x.shape}")
    k = 0 if node.input(1) is None else int(scalar_param(ctx, node.input(1), "Trilu k"))
    attrs = {"upper": int(node.attr("upper", 1)), "k": k}
    return emit_one(ctx, "Trilu", [x], attrs, x.shape, x.dtype)


@onnx_op("Col2Im", since=18)
def import_col2im(ctx: ImportContext, node: OnnxNode) -> list[Value]:
    x = data_input(ctx, node)
    image = int_list(ctx, node.input(1), "Col2Im image_shape")
    block = int_list(ctx, node.input(2), "Col2Im block_shape")
    nd = len(image)
    dil = [int(v) for v in node.attr("dilations", [1] * nd)]
    strides = [int(v) for v in node.attr("strides", [1] * nd)]
    pads = [int(v) for v in node.attr("pads", [0] * (2 * nd))]
    if len(x.shape) != 3 or len(block) != nd or len(dil) != nd or len(strides) != nd \
            or len(pads) != 2 * nd:
        raise ctx.error(f"input {x.shape}, image_shape {image}, block_shape {block}, "
                        f"dilations {dil}, strides {strides} and pads {pads} do not agree")
    n, ck, length = x.shape
    taps = math.prod(block)
    blocks = [(i + pads[d] + pads[d + nd] - (dil[d] * (block[d] - 1) + 1)) // strides[d] + 1
              for d, i in enumerate(image)]
    if ck % taps or math.prod(blocks) != length or min(blocks) < 1:
        raise ctx.error(f"input shape {x.shape} does not match {blocks} blocks of {block}")
    attrs = {"image_shape": image, "block_shape": block, "dilations": dil,
             "strides": strides, "pads": pads}
    return emit_one(ctx, "Col2Im", [x], attrs, [n, ck // taps, *image], x.dtype)

