"""CPU kernels of GridSample, AffineGrid, RoiAlign, TensorScatter, BitCast and Det.

GridSample follows onnxruntime (and PyTorch's grid_sampler): coordinates are denormalised
in the grid's type, nearest rounds half to even, and each interpolation tap outside the
input reads 0 (zeros), the clamped pixel (border) or the reflected one (reflection). ONNX's
reference also clamps or reflects the coordinate itself first; that changes nothing except
for cubic with border padding, where onnxruntime's per-tap clamping is followed.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np

from pydla.backends.base import LayerSpec
from pydla.backends.cpu.kernels.indexing import checked_indices
from pydla.backends.cpu.registry import reference
from pydla.dtypes import DType, bf16_to_f32, f32_to_bf16
from pydla.errors import KernelError

Inputs = Sequence[np.ndarray | None]
# (indices, weight or None, in-range mask or None) of one tap along one spatial axis.
Tap = tuple[np.ndarray, np.ndarray | None, np.ndarray | None]


def _reflect(x: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """Reflect ``x`` at ``lo`` and ``hi`` until it lies between them."""
    span = hi - lo
    if span <= 0:
        return np.full_like(x, lo)
    below, above = x < lo, x > hi
    dx = np.where(below, lo - x, x - hi)
    flips = np.trunc(dx / span)
    rest = dx - flips * span
    even = flips % 2 == 0
    from_lo = np.where(even, lo + rest, hi - rest)
    from_hi = np.where(even, hi - rest, lo + rest)
    return np.where(below, from_lo, np.where(above, from_hi, x))


def _fetch(idx: np.ndarray, size: int, padding: str, lo: float,
           hi: float) -> tuple[np.ndarray, np.ndarray | None]:
    """Integer taps ``idx`` as in-range indices, plus the in-range mask for zeros padding."""
    if padding == "zeros":
        valid = (idx >= 0) & (idx < size)
        return np.clip(idx, 0, size - 1), valid
    if padding == "reflection":
        idx = _reflect(idx.astype(np.float64), lo, hi).astype(np.int64)
    return np.clip(idx, 0, size - 1), None


def _cubic(t: np.ndarray) -> list[np.ndarray]:
    """Keys' cubic convolution weights (A = -0.75) of the taps at -1, 0, 1, 2."""
    a = -0.75
    t1, t2 = t + 1, 1 - t
    return [((a * t1 - 5 * a) * t1 + 8 * a) * t1 - 4 * a,
            ((a + 2) * t - (a + 3)) * t * t + 1,
            ((a + 2) * t2 - (a + 3)) * t2 * t2 + 1,
            ((a * (2 - t) - 5 * a) * (2 - t) + 8 * a) * (2 - t) - 4 * a]


def _axis_taps(coord: np.ndarray, size: int, mode: str, padding: str,
               align: bool) -> list[Tap]:
    """The taps of one spatial axis from normalised coordinates ``coord``."""
    lo, hi = (0.0, size - 1.0) if align else (-0.5, size - 0.5)
    x = (coord + 1) / 2 * (size - 1) if align else ((coord + 1) * size - 1) / 2
    if mode == "nearest":
        x = np.rint(x)
        idx, valid = _fetch(np.trunc(x).astype(np.int64), size, padding, lo, hi)
        return [(idx, None, valid)]
    base = np.floor(x)
    t = x - base
    base = base.astype(np.int64)
    if mode == "linear":
        offsets, weights = [0, 1], [1 - t, t]
    else:
        offsets, weights = [-1, 0, 1, 2], _cubic(t)
    taps: list[Tap] = []
    for o, w in zip(offsets, weights):
        idx, valid = _fetch(base + o, size, padding, lo, hi)
        taps.append((idx, w, valid))
    return taps


@reference("GridSample")
def grid_sample(spec: LayerSpec, inputs: Inputs) -> list[np.ndarray]:
    a = spec.attrs
    x, grid = inputs[0], inputs[1]
    n, c, dims = x.shape[0], x.shape[1], x.shape[2:]
    rank = len(dims)
    g = grid.reshape(n, -1, rank)
    if g.dtype.kind != "f":
        g = g.astype(np.float32)
    xf = x.reshape(n, c, -1)
    if xf.dtype.kind != "f":
        xf = xf.astype(np.float64)
    strides = [int(np.prod(dims[d + 1:], dtype=np.int64)) for d in range(rank)]
    # The grid's last axis lists coordinates fastest axis first (x, y, z).
    per_axis = [_axis_taps(g[..., rank - 1 - d], dims[d], a["mode"], a["padding_mode"],
                           bool(a["align_corners"])) for d in range(rank)]
    out = np.zeros((n, c, g.shape[1]), xf.dtype)
    for combo in itertools.product(*per_axis):
        flat = sum(idx * s for (idx, _, _), s in zip(combo, strides))
        vals = np.take_along_axis(xf, flat[:, None, :], axis=2)
        masks = [m for _, _, m in combo if m is not None]
        if masks:
            vals = np.where(np.logical_and.reduce(masks)[:, None, :], vals, 0)
        weights = [w for _, w, _ in combo if w is not None]
        out += vals * np.prod(weights, axis=0)[:, None, :] if weights else vals
    return [out.reshape(spec.outputs[0].shape)]


@reference("AffineGrid")
def affine_grid(spec: LayerSpec, inputs: Inputs) -> list[np.ndarray]:
    theta = inputs[0].astype(np.float64)
    dims = spec.attrs["size"][2:]
    axes = [np.linspace(-1.0, 1.0, d) if spec.attrs["align_corners"]
            else (2 * np.arange(d) + 1) / d - 1 for d in dims]
    mesh = np.meshgrid(*axes, indexing="ij")
    # Homogeneous points (x, y[, z], 1): the fastest spatial axis comes first.
    points = np.stack([m.reshape(-1) for m in mesh[::-1]] + [np.ones(mesh[0].size)], axis=-1)
    grid = np.matmul(points, theta.transpose(0, 2, 1))
    return [grid.reshape(spec.outputs[0].shape)]


def _roi_axis(start: float, bins: int, bin_size: float, grid: int,
              size: int) -> tuple[np.ndarray, ...]:
    """Bilinear sample positions of one axis: (low, high, low weight, high weight, valid),
    each (bins, grid), as the reference's pre_calc_for_bilinear_interpolate."""
    pos = start + np.arange(bins)[:, None] * bin_size + \
        (np.arange(grid)[None, :] + 0.5) * bin_size / grid
    valid = (pos >= -1.0) & (pos <= size)
    pos = np.maximum(pos, 0)
    low = np.trunc(pos).astype(np.int64)
    edge = low >= size - 1
    low = np.where(edge, size - 1, low)
    high = np.where(edge, size - 1, low + 1)
    frac = np.where(edge, 0.0, pos - low)
    return low, high, 1 - frac, frac, valid


# Samples RoiAlign may take of one ROI (all channels): 2**28 float64s, 2 GiB per term.
_MAX_SAMPLES = 1 << 28


@reference("RoiAlign")
def roi_align(spec: LayerSpec, inputs: Inputs) -> list[np.ndarray]:
    a = spec.attrs
    x, rois, batch = inputs[0], inputs[1].astype(np.float64), inputs[2]
    batch = checked_indices(spec, batch, x.shape[0], "the batch")
    height, width = x.shape[2], x.shape[3]
    ph, pw = a["output_height"], a["output_width"]
    half = a["coordinate_transformation_mode"] == "half_pixel"
    offset = 0.5 if half else 0.0
    out = np.zeros(spec.outputs[0].shape, np.float64)
    for r in range(rois.shape[0]):  # sample grids differ per ROI
        x1, y1, x2, y2 = rois[r] * a["spatial_scale"] - offset
        rw, rh = x2 - x1, y2 - y1
        if not half:  # malformed ROIs become 1×1
            rw, rh = max(rw, 1.0), max(rh, 1.0)
        ratio = a["sampling_ratio"]
        if not np.isfinite(rh * rw):
            raise KernelError(spec.name, spec.op, f"ROI {r} {rois[r].tolist()} is not finite")
        gh = ratio if ratio > 0 else int(np.ceil(rh / ph))
        gw = ratio if ratio > 0 else int(np.ceil(rw / pw))
        if gh <= 0 or gw <= 0:
            continue
        # an adaptive grid grows with the box (runtime data): bound the work it asks for
        if gh * gw * ph * pw * x.shape[1] > _MAX_SAMPLES:
            raise KernelError(spec.name, spec.op, f"ROI {r} {rois[r].tolist()} asks for a "
                              f"{gh}x{gw} sampling grid per bin, over {_MAX_SAMPLES} samples")
        yl, yh, wyl, wyh, vy = _roi_axis(y1, ph, rh / ph, gh, height)
        xl, xh, wxl, wxh, vx = _roi_axis(x1, pw, rw / pw, gw, width)
        img = x[batch[r]].astype(np.float64)
        # Axes of each term: (C, ph, gh, pw, gw).
        ys = [(yl, wyl), (yh, wyh)]
        xs = [(xl, wxl), (xh, wxh)]
        valid = (vy[:, :, None, None] & vx[None, None, :, :])
        terms = [img[:, yi[:, :, None, None], xi[None, None, :, :]]
                 * (wy[:, :, None, None] * wx[None, None, :, :] * valid)
                 for yi, wy in ys for xi, wx in xs]
        if a["mode"] == "avg":
            out[r] = np.sum(terms, axis=0).sum(axis=(2, 4)) / max(gh * gw, 1)
        else:
            out[r] = np.max(terms, axis=0).max(axis=(2, 4))
    return [out]


@reference("TensorScatter")
def tensor_scatter(spec: LayerSpec, inputs: Inputs) -> list[np.ndarray]:
    past, update = inputs[0], inputs[1]
    where = inputs[2] if len(inputs) > 2 else None
    axis, circular = spec.attrs["axis"], spec.attrs["mode"] == "circular"
    capacity, length = past.shape[axis], update.shape[axis]
    starts = np.zeros(past.shape[0], np.int64) if where is None else where.astype(np.int64)
    out = past.copy()
    lead = (slice(None),) * (axis - 1)
    for b in range(past.shape[0]):  # one write position per batch entry
        pos = starts[b] + np.arange(length)
        if circular:
            pos %= capacity
        elif length and (pos[0] < 0 or pos[-1] >= capacity):
            raise KernelError(spec.name, spec.op, f"write index {int(starts[b])} + {length} "
                              f"updates do not fit the cache of {capacity}")
        out[b][(*lead, pos)] = update[b]
    return [out]


@reference("BitCast")
def bit_cast(spec: LayerSpec, inputs: Inputs) -> list[np.ndarray]:
    # Half types reach kernels widened to float32: restore their bits first, and hand the
    # backend float32 values that it rounds back to the same bits.
    x = inputs[0]
    src, dst = DType(spec.attrs["from"]), DType(spec.attrs["to"])
    if src is DType.FLOAT16:
        x = x.astype(np.float16)
    elif src is DType.BFLOAT16:
        x = f32_to_bf16(x)
    y = np.array(x, order="C").view(dst.np)  # (ascontiguousarray would make 0-d 1-d)
    if dst is DType.FLOAT16:
        y = y.astype(np.float32)
    elif dst is DType.BFLOAT16:
        y = bf16_to_f32(y)
    return [y]


@reference("Det")
def det(spec: LayerSpec, inputs: Inputs) -> list[np.ndarray]:
    return [np.linalg.det(inputs[0])]
