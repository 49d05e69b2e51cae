"""Shape rules of the sampling and image-restructuring layers: GridSample, AffineGrid,
RoiAlign, Col2Im, DeformConv, CausalConvWithState and MaxUnpool (canonical attributes:
pydla.frontend.onnx.ops.misc_ops, shape_spatial, conv and pooling).

Sample coordinates, ROI boxes and unpool indices are runtime data the kernels clamp or
bound; these rules prove the geometry the kernels index with.
"""

from __future__ import annotations

import math

from pydla.loadable.validate import Expected, LayerCheck, rule

_MAX_SPATIAL = 6
_DIM = 1 << 31


@rule("GridSample")
def _grid_sample(check: LayerCheck) -> Expected:
    check.arity(2, 2)
    x = check.x(0, (3, 2 + _MAX_SPATIAL))
    rank = len(x.shape) - 2
    grid = check.x(1, len(x.shape))
    check.need(grid.shape[0] == x.shape[0] and grid.shape[-1] == rank and grid.dtype.is_float,
               1, f"grid {grid.shape} of {grid.dtype.name.lower()} does not fit input "
               f"{x.shape}")
    check.choice("mode", ("linear", "nearest", "cubic"))
    check.choice("padding_mode", ("zeros", "border", "reflection"))
    check.flag("align_corners")
    return [(x.shape[:2] + grid.shape[1:-1], x.dtype)]


@rule("AffineGrid")
def _affine_grid(check: LayerCheck) -> Expected:
    check.arity(1, 1)
    theta = check.x(0, 3)
    size = check.ints("size", None, None, 1, _DIM)
    rank = len(size) - 2
    if rank not in (2, 3):
        raise check.fail(".attrs.size", f"{size} is not (N, C, H, W) or (N, C, D, H, W)")
    check.need(theta.shape == (size[0], rank, rank + 1), 0, f"theta {theta.shape} is not "
               f"{(size[0], rank, rank + 1)} for size {size}")
    check.flag("align_corners")
    return [((size[0], *size[2:], rank), theta.dtype)]


@rule("RoiAlign")
def _roi_align(check: LayerCheck) -> Expected:
    check.arity(3, 3)
    x = check.x(0, 4)
    rois = check.x(1, 2)
    batch = check.indices(2, 1)
    check.need(rois.shape[1] == 4 and rois.dtype.is_float, 1, f"rois {rois.shape} are not "
               "(R, 4) boxes")
    check.need(batch.shape == (rois.shape[0],), 2, f"batch_indices {batch.shape} are not one "
               f"per ROI of {rois.shape}")
    check.choice("mode", ("avg", "max"))
    check.choice("coordinate_transformation_mode", ("half_pixel", "output_half_pixel"))
    oh = check.int_("output_height", None, 1, 1 << 16)
    ow = check.int_("output_width", None, 1, 1 << 16)
    check.int_("sampling_ratio", None, 0, 1 << 16)
    check.float_("spatial_scale")
    return [((rois.shape[0], x.shape[1], oh, ow), x.dtype)]


def _windows(check: LayerCheck, nd: int) -> tuple[list[int], list[int], list[int]]:
    """Validated dilations, strides and [begin…, end…] pads of an ``nd``-D window."""
    dil = check.ints("dilations", nd, None, 1, 1 << 20)
    strides = check.ints("strides", nd, None, 1, 1 << 20)
    pads = check.ints("pads", 2 * nd, None, 0, 1 << 20)
    return dil, strides, pads


@rule("Col2Im")
def _col2im(check: LayerCheck) -> Expected:
    check.arity(1, 1)
    n, ck, length = check.x(0, 3).shape
    image = check.ints("image_shape", None, None, 1, _DIM)
    nd = len(image)
    if not 1 <= nd <= _MAX_SPATIAL:
        raise check.fail(".attrs.image_shape", f"{image} is not 1..{_MAX_SPATIAL} sizes")
    block = check.ints("block_shape", nd, None, 1, _DIM)
    dil, strides, pads = _windows(check, nd)
    blocks = [(i + pads[d] + pads[d + nd] - (dil[d] * (block[d] - 1) + 1)) // strides[d] + 1
              for d, i in enumerate(image)]
    taps = math.prod(block)
    check.need(ck % taps == 0 and min(blocks) >= 1 and math.prod(blocks) == length, 0,
               f"input {(n, ck, length)} is not {blocks} blocks of {block}")
    return [((n, ck // taps, *image), check.x(0).dtype)]


@rule("DeformConv")
def _deform_conv(check: LayerCheck) -> Expected:
    check.arity(3, 5)
    n, c, h, w = check.x(0, 4).shape
    m, cg, kh, kw = check.x(1, 4).shape
    offset = check.x(2, 4)
    dil, strides, pads = _windows(check, 2)
    group = check.int_("group", None, 1, 1 << 20)
    og = check.int_("offset_group", None, 1, 1 << 20)
    if c != cg * group or m % group or c % og:
        raise check.fail(".attrs.group", f"X {(n, c, h, w)} and W {(m, cg, kh, kw)} do not "
                         f"fit group {group} and offset_group {og}")
    out = [(i + pads[d] + pads[d + 2] - (k - 1) * dil[d] - 1) // strides[d] + 1
           for d, (i, k) in enumerate(((h, kh), (w, kw)))]
    if min(out) < 1:
        raise check.fail(".attrs.pads", f"output sizes {out} are empty")
    want = (n, 2 * og * kh * kw, *out)
    check.need(offset.shape == want, 2, f"offset {offset.shape} is not {want}")
    bias, mask = check.opt(3), check.opt(4)
    if bias is not None:
        check.need(bias.shape == (m,), 3, f"bias {bias.shape} is not ({m},)")
    if mask is not None:
        want = (n, og * kh * kw, *out)
        check.need(mask.shape == want, 4, f"mask {mask.shape} is not {want}")
    return [((n, m, *out), check.x(0).dtype)]


@rule("CausalConvWithState")
def _causal_conv(check: LayerCheck) -> Expected:
    check.arity(2, 4, (1, 2))
    x = check.x(0, 3)
    batch, channels, _ = x.shape
    w = check.x(1, 3)
    k = w.shape[2]
    check.need(w.shape[:2] == (channels, 1) and k >= 1, 1, f"weight {w.shape} is not a "
               f"depthwise (C, 1, k) kernel for {x.shape}")
    bias, past = check.opt(2), check.opt(3)
    if bias is not None:
        check.need(bias.shape == (channels,), 2, f"bias {bias.shape} is not ({channels},)")
    state = (batch, channels, k - 1)
    if past is not None:
        check.need(past.shape == state, 3, f"past_state {past.shape} is not {state}")
    check.choice("activation", ("none", "silu", "swish"), "none")
    return [(x.shape, x.dtype), (state, x.dtype)][:len(check.outs)]


@rule("MaxUnpool")
def _max_unpool(check: LayerCheck) -> Expected:
    check.arity(2, 2)
    x = check.x(0, (3, 2 + _MAX_SPATIAL))
    ind = check.indices(1, len(x.shape))
    check.need(ind.shape == x.shape, 1, f"indices {ind.shape} are not X's {x.shape}")
    inner = tuple(check.ints("unpooled_shape", len(x.shape), None, 1, _DIM))
    if inner[:2] != x.shape[:2]:
        raise check.fail(".attrs.unpooled_shape", f"{list(inner)} does not keep X's batch "
                         f"and channels {x.shape[:2]}")
    # A given output_shape may be larger: the unpooled block fills its leading corner.
    y = check.outs[0].shape
    bigger = len(y) == len(inner) and all(o >= u for o, u in zip(y, inner))
    return [(y if bigger else inner, x.dtype)]
