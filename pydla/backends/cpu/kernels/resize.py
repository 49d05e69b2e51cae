"""CPU kernel of Resize (nearest, linear and cubic; every coordinate transformation).

Resize is separable, so it is applied one axis at a time. At bind time every resized axis
gets a plan: for each output position the source indices (taps) and their weights, worked
out from the fixed shapes as in ONNX's reference; a run is then one gather per tap and a
weighted sum. Out-of-range taps take the edge value (indices clamped), unless
``exclude_outside`` drops and renormalises them. Nearest needs a single gather.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from pydla.backends.base import LayerSpec, RunFn
from pydla.backends.cpu.registry import kernel

Inputs = Sequence[np.ndarray | None]
Outputs = Sequence[np.ndarray]


@dataclass(frozen=True)
class _AxisPlan:
    axis: int
    index: np.ndarray            # (taps, out) source indices, clamped
    weights: np.ndarray | None   # (taps, out, 1, …) broadcasting along the axis; None for
                                 # nearest (one tap of weight 1)
    outside: np.ndarray | None   # (out, 1, …): positions that take extrapolation_value


def source_coords(mode: str, n_out: int, n_in: int, scale: float, start: float,
                   end: float) -> np.ndarray:
    """Each output position's coordinate in the input (coordinate_transformation_mode).

    Worked out in float32 in onnxruntime's order of operations: where a coordinate falls
    exactly between two pixels, nearest then picks the same one. The fractional output
    length ``scale · n_in`` (not the whole one) enters align_corners and tf_crop_and_resize,
    as in ONNX's reference.
    """
    f = np.float32
    y = np.arange(n_out, dtype=np.float32)
    s, length = f(scale), f(n_in)
    width = s * length  # the fractional output length a scale implies
    if mode == "asymmetric":
        x = y / s
    elif mode == "half_pixel" or (mode == "pytorch_half_pixel" and n_out > 1):
        x = (y + f(0.5)) / s - f(0.5)
    elif mode == "pytorch_half_pixel":
        x = np.zeros(n_out, np.float32)
    elif mode == "half_pixel_symmetric":
        offset = length / f(2) * (f(1) - f(n_out) / width)
        x = (offset + (y.astype(np.float64) + 0.5) / float(s) - 0.5).astype(np.float32)
    elif mode == "tf_half_pixel_for_nn":
        x = (y + f(0.5)) / s
    elif mode == "align_corners":
        x = y * (length - f(1)) / (width - f(1)) if width != 1 else np.zeros(n_out, np.float32)
    elif mode == "tf_crop_and_resize":
        a, b = f(start), f(end)
        if width == 1:
            x = np.full(n_out, 0.5 * (start + end) * (n_in - 1), np.float32)
        else:
            x = a * (length - f(1)) + y * (b - a) * (length - f(1)) / (width - f(1))
    else:
        raise ValueError(f"unknown coordinate_transformation_mode {mode!r}")
    return x.astype(np.float64)


def nearest_index(x: np.ndarray, rule: str, scale: float) -> np.ndarray:
    if rule == "round_prefer_floor":
        i = np.ceil(x - 0.5)
    elif rule == "round_prefer_ceil":
        i = np.floor(x + 0.5)
    elif rule == "floor":
        i = np.floor(x)
    elif rule == "ceil":
        i = np.ceil(x)
    elif rule == "simple":  # Upsample and Resize-10, as onnxruntime keeps them
        i = np.ceil(x) if scale < 1 else np.trunc(x)
    else:
        raise ValueError(f"unknown nearest_mode {rule!r}")
    return i.astype(np.int64)


def _cubic(t: np.ndarray, a: float) -> np.ndarray:
    """Keys' cubic convolution kernel with coefficient a, at distances t."""
    t = np.abs(t)
    near = ((a + 2) * t - (a + 3)) * t * t + 1
    far = ((a * t - 5 * a) * t + 8 * a) * t - 4 * a
    return np.where(t <= 1, near, np.where(t < 2, far, 0.0))


def filter_weights(x: np.ndarray, mode: str, scale: float, attrs: dict,
                    n_in: int) -> tuple[np.ndarray, np.ndarray]:
    """Taps (unclamped source indices) and weights of linear/cubic interpolation at x,
    both (taps, out).

    With antialias, downscaling stretches the filter by 1/scale (more taps, normalised).
    """
    antialias = bool(attrs["antialias"])
    s = min(scale, 1.0) if antialias else 1.0
    support = 1.0 if mode == "linear" else 2.0
    first = int(np.floor(-support / s) + 1)
    offsets = np.arange(first, 2 - first)
    base = np.floor(x)
    taps = base.astype(np.int64)[:, None] + offsets[None, :]
    dist = (offsets[None, :] - (x - base)[:, None]) * s
    if mode == "linear":
        w = np.clip(1 - np.abs(dist), 0, 1)
    else:
        w = _cubic(dist, float(attrs["cubic_coeff_a"]))
    if antialias:
        w = w / w.sum(axis=1, keepdims=True)
    if attrs["exclude_outside"]:
        w = np.where((taps < 0) | (taps >= n_in), 0.0, w)
        total = w.sum(axis=1, keepdims=True)
        w = w / np.where(total == 0, 1.0, total)
    return taps.T, w.T


def _axis_plan(axis: int, n_in: int, n_out: int, rank: int, attrs: dict,
               dtype: np.dtype) -> _AxisPlan | None:
    """How to resize one axis (weights in the compute type); None when it stays as it is."""
    mode = attrs["mode"]
    coord = attrs["coordinate_transformation_mode"]
    scale = float(attrs["scales"][axis])
    start, end = float(attrs["roi"][axis]), float(attrs["roi"][rank + axis])
    x = source_coords(coord, n_out, n_in, scale, start, end)
    outside = None
    if coord == "tf_crop_and_resize":
        out_of_range = (x < 0) | (x > n_in - 1)
        outside = out_of_range if out_of_range.any() else None
    # An axis of scale 1 keeps its length and is left alone whatever the coordinate mode
    # (tf_half_pixel_for_nn would shift it by half a pixel), as both onnxruntime and ONNX's
    # reference do; only a cropping roi still moves it.
    uncropped = coord != "tf_crop_and_resize" or (start, end) == (0.0, 1.0)
    if n_out == n_in and ((scale == 1 and uncropped) or (
            outside is None and np.array_equal(x, np.arange(n_in)))):
        return None
    if n_in == 0 or n_out == 0:
        return _AxisPlan(axis, np.zeros((1, n_out), np.intp), None, None)
    shape = (n_out,) + (1,) * (rank - axis - 1)  # broadcasts along the axis
    weights = None
    if mode == "nearest":
        index = nearest_index(x, attrs["nearest_mode"], scale)[None, :]
    else:
        index, w = filter_weights(x, mode, scale, attrs, n_in)
        weights = w.astype(dtype).reshape((len(w),) + shape)
    return _AxisPlan(axis, np.clip(index, 0, n_in - 1).astype(np.intp), weights,
                     None if outside is None else outside.reshape(shape))


def _apply(y: np.ndarray, plan: _AxisPlan, extrapolation: np.ndarray) -> np.ndarray:
    """Resize y along the plan's axis: one gather per tap, weighted and summed."""
    ax = plan.axis
    if plan.weights is None:
        r = np.take(y, plan.index[0], axis=ax)
    else:
        r = np.take(y, plan.index[0], axis=ax) * plan.weights[0]
        for k in range(1, len(plan.index)):
            r += np.take(y, plan.index[k], axis=ax) * plan.weights[k]
    if plan.outside is not None:
        r = np.where(plan.outside, extrapolation.astype(r.dtype), r)
    return r


@kernel("Resize")
def bind_resize(spec: LayerSpec) -> RunFn:
    attrs = dict(spec.attrs)
    in_shape = spec.inputs[0].shape
    out_shape = spec.outputs[0].shape
    dtype = spec.inputs[0].dtype.np
    # Integers interpolate in float64 and saturate. Plain results are truncated, as
    # onnxruntime does; antialiased ones are rounded half to even as in ONNX's reference
    # (onnxruntime's fixed-point path for them can differ by one).
    interpolates = attrs["mode"] != "nearest" or (
        attrs["coordinate_transformation_mode"] == "tf_crop_and_resize")
    integer = dtype.kind in "iu" and interpolates
    ctype = np.dtype(np.float64) if integer else dtype
    rank = len(in_shape)
    plans = [p for ax in range(rank)
             if (p := _axis_plan(ax, in_shape[ax], out_shape[ax], rank, attrs, ctype))
             is not None]
    extrapolation = np.asarray(float(attrs["extrapolation_value"]))
    info = np.iinfo(dtype) if integer else None
    to_integer = np.rint if attrs["antialias"] else np.trunc

    def run(inputs: Inputs, outputs: Outputs) -> None:
        y = inputs[0].astype(ctype, copy=False)
        for plan in plans:
            y = _apply(y, plan, extrapolation)
        if info is not None:
            y = np.clip(to_integer(y), info.min, info.max)
        np.copyto(outputs[0], y, casting="unsafe")

    return run
