"""Resize of the two spatial axes of rank-4 tensors (any layout): nearest, linear and cubic,
every coordinate transformation but tf_crop_and_resize, antialias and exclude_outside.

Resize is separable: on the host each resized axis gets a table of source indices (taps)
and weights per output position, worked out in float32 as onnxruntime (and the CPU
backend) do; the kernel (a thread per output element, in the output's memory order) sums
taps_h × taps_w weighted reads. Nearest is one tap of weight 1.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pydla.backends.cuda.codegen import c_type, decompose, defines, offset
from pydla.backends.cuda.context import BindContext
from pydla.backends.cuda.registry import Candidate, kernel
from pydla.errors import KernelError
from pydla.loadable.program import LayerInfo


def source_coords(mode: str, n_out: int, n_in: int, scale: float) -> np.ndarray:
    """Each output position's coordinate in the input (float32 arithmetic)."""
    f = np.float32
    y = np.arange(n_out, dtype=np.float32)
    s, length = f(scale), f(n_in)
    width = s * length
    if mode == "asymmetric":
        x = y / s
    elif mode == "half_pixel" or (mode == "pytorch_half_pixel" and n_out > 1):
        x = (y + f(0.5)) / s - f(0.5)
    elif mode == "pytorch_half_pixel":
        x = np.zeros(n_out, np.float32)
    elif mode == "half_pixel_symmetric":
        off = length / f(2) * (f(1) - f(n_out) / width)
        x = (off + (y.astype(np.float64) + 0.5) / float(s) - 0.5).astype(np.float32)
    elif mode == "tf_half_pixel_for_nn":
        x = (y + f(0.5)) / s
    elif mode == "align_corners":
        x = y * (length - f(1)) / (width - f(1)) if width != 1 else np.zeros(n_out, np.float32)
    else:
        raise ValueError(f"coordinate_transformation_mode {mode!r} is not supported on CUDA")
    return x.astype(np.float64)


def _nearest(x: np.ndarray, rule: str, scale: float) -> np.ndarray:
    if rule == "round_prefer_floor":
        i = np.ceil(x - 0.5)
    elif rule == "round_prefer_ceil":
        i = np.floor(x + 0.5)
    elif rule == "floor":
        i = np.floor(x)
    elif rule == "ceil":
        i = np.ceil(x)
    elif rule == "simple":
        i = np.ceil(x) if scale < 1 else np.trunc(x)
    else:
        raise ValueError(f"unknown nearest_mode {rule!r}")
    return i.astype(np.int64)


def _cubic(t: np.ndarray, a: float) -> np.ndarray:
    t = np.abs(t)
    near = ((a + 2) * t - (a + 3)) * t * t + 1
    far = ((a * t - 5 * a) * t + 8 * a) * t - 4 * a
    return np.where(t <= 1, near, np.where(t < 2, far, 0.0))


def axis_table(n_in: int, n_out: int, scale: float, attrs: dict[str, Any]
               ) -> tuple[np.ndarray, np.ndarray]:
    """(taps, n_out) int32 source indices (clamped) and float32 weights of one axis."""
    mode = attrs.get("mode", "nearest")
    coord = attrs.get("coordinate_transformation_mode", "half_pixel")
    if n_out == n_in and scale == 1:  # left alone whatever the coordinate mode
        return np.arange(n_out, dtype=np.int32)[None], np.ones((1, n_out), np.float32)
    x = source_coords(coord, n_out, n_in, scale)
    if mode == "nearest":
        index = _nearest(x, attrs.get("nearest_mode", "round_prefer_floor"), scale)[None]
        weights = np.ones((1, n_out))
    elif mode in ("linear", "cubic"):
        antialias = bool(attrs.get("antialias", 0))
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
            w = _cubic(dist, float(attrs.get("cubic_coeff_a", -0.75)))
        if antialias:
            w = w / w.sum(axis=1, keepdims=True)
        if attrs.get("exclude_outside", 0):
            w = np.where((taps < 0) | (taps >= n_in), 0.0, w)
            total = w.sum(axis=1, keepdims=True)
            w = w / np.where(total == 0, 1.0, total)
        index, weights = taps.T, w.T
    else:
        raise ValueError(f"mode {mode!r} is not supported")
    return (np.clip(index, 0, max(n_in - 1, 0)).astype(np.int32),
            np.ascontiguousarray(weights, dtype=np.float32))


_RESIZE = r"""
extern "C" __global__ void resize(const TX* __restrict__ x, TY* __restrict__ y,
    const int* __restrict__ ih_tab, const float* __restrict__ wh_tab,
    const int* __restrict__ iw_tab, const float* __restrict__ ww_tab) {
  for (i64 t = blockIdx.x * (i64)blockDim.x + threadIdx.x; t < TOTAL;
       t += (i64)gridDim.x * blockDim.x) {
COORDS
    const i64 base = X_BASE;
    float acc = 0.f;
#pragma unroll
    for (int a = 0; a < TH; ++a) {
      const int ih = ih_tab[a * OH + c2];
      float row = 0.f;
#pragma unroll
      for (int b = 0; b < TW; ++b) {
        const float v = ld(x + base + (i64)ih * XSH + (i64)iw_tab[b * OW + c3] * XSW);
        row = NEAREST ? v : fmaf(ww_tab[b * OW + c3], v, row);
      }
      acc = NEAREST ? row : fmaf(wh_tab[a * OH + c2], row, acc);
    }
    st(y + Y_OFF, acc);
  }
}
"""


@kernel("Resize")
def bind_resize(ctx: BindContext, layer: LayerInfo) -> list[Candidate]:
    x, out = ctx.place(layer.inputs[0]), ctx.place(layer.outputs[0])
    attrs = dict(layer.attrs)
    if len(x.shape) != 4 or x.shape[:2] != out.shape[:2]:
        raise KernelError(layer.name, layer.op, "the CUDA backend resizes the two spatial "
                          "axes of rank-4 tensors only")
    if attrs.get("coordinate_transformation_mode") == "tf_crop_and_resize":
        raise KernelError(layer.name, layer.op, "tf_crop_and_resize is not supported on CUDA")
    scales = attrs.get("scales") or []
    tables = []
    for axis in (2, 3):
        n_in, n_out = x.shape[axis], out.shape[axis]
        scale = float(scales[axis]) if len(scales) == 4 else n_out / max(n_in, 1)
        try:
            tables.append(axis_table(n_in, n_out, scale, attrs))
        except ValueError as e:
            raise KernelError(layer.name, layer.op, str(e)) from None
    (ih, wh), (iw, ww) = tables
    nearest = attrs.get("mode", "nearest") == "nearest"
    order = out.physical_order()
    coords = [f"c{d}" for d in range(4)]
    lines = decompose("t", [out.shape[d] for d in order], "p", "    ")
    lines += [f"    const i64 c{d} = p{i};" for i, d in enumerate(order)]
    xs = x.strides
    values = {"TX": c_type(x.dtype, layer.name), "TY": c_type(out.dtype, layer.name),
              "TOTAL": out.size, "OH": out.shape[2], "OW": out.shape[3], "TH": ih.shape[0],
              "TW": iw.shape[0], "XSH": xs[2], "XSW": xs[3], "NEAREST": int(nearest)}
    source = defines(values) + (
        _RESIZE.replace("COORDS", "\n".join(lines))
        .replace("X_BASE", offset(coords[:2], xs[:2]))
        .replace("Y_OFF", offset(coords, out.strides)))
    args = [np.uint64(x.ptr), np.uint64(out.ptr), np.uint64(ctx.upload(ih)),
            np.uint64(ctx.upload(wh)), np.uint64(ctx.upload(iw)), np.uint64(ctx.upload(ww))]
    return [Candidate("nvrtc", ctx.kernel_launch(source, "resize", out.size, args))]
