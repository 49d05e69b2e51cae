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

from pydla.backends.cpu.kernels.resize import filter_weights, nearest_index, source_coords
from pydla.backends.cuda.codegen import c_type, decompose, defines, offset
from pydla.backends.cuda.context import BindContext
from pydla.backends.cuda.registry import Candidate, kernel
from pydla.errors import KernelError
from pydla.loadable.program import LayerInfo


def axis_table(n_in: int, n_out: int, scale: float, attrs: dict[str, Any]
               ) -> tuple[np.ndarray, np.ndarray]:
    """(taps, n_out) int32 source indices (clamped) and float32 weights of one axis."""
    mode = attrs.get("mode", "nearest")
    coord = attrs.get("coordinate_transformation_mode", "half_pixel")
    if n_out == n_in and scale == 1:  # left alone whatever the coordinate mode
        return np.arange(n_out, dtype=np.int32)[None], np.ones((1, n_out), np.float32)
    if coord == "tf_crop_and_resize":
        raise ValueError("coordinate_transformation_mode tf_crop_and_resize is not supported "
                         "on CUDA")
    # The coordinate and filter rules are the CPU backend's, so both devices agree.
    x = source_coords(coord, n_out, n_in, scale, 0.0, 1.0)
    if mode == "nearest":
        index = nearest_index(x, attrs.get("nearest_mode", "round_prefer_floor"), scale)[None]
        weights = np.ones((1, n_out))
    elif mode in ("linear", "cubic"):
        index, weights = filter_weights(x, mode, scale, {
            "antialias": attrs.get("antialias", 0),
            "cubic_coeff_a": attrs.get("cubic_coeff_a", -0.75),
            "exclude_outside": attrs.get("exclude_outside", 0)}, n_in)
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
