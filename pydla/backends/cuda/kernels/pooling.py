"""Pooling over channels-last tensors: one thread per output vector of channels."""

from __future__ import annotations

import numpy as np

from pydla.backends.cuda.codegen import c_type
from pydla.backends.cuda.context import BindContext, vec_width
from pydla.backends.cuda.layout import NHWC, Placement
from pydla.backends.cuda.registry import Candidate, kernel
from pydla.errors import KernelError
from pydla.loadable.program import LayerInfo

_WINDOW = r"""
extern "C" __global__ void pool(const TX* __restrict__ x, TY* __restrict__ y) {
  const i64 total = (i64)N * OH * OW * (C / VEC);
  for (i64 t = blockIdx.x * (i64)blockDim.x + threadIdx.x; t < total;
       t += (i64)gridDim.x * blockDim.x) {
    const int cv = (int)(t % (C / VEC));
    i64 p = t / (C / VEC);
    const int ow = (int)(p % OW); p /= OW;
    const int oh = (int)(p % OH);
    const int n = (int)(p / OH);
    float acc[VEC];
#pragma unroll
    for (int j = 0; j < VEC; ++j) acc[j] = IS_MAX ? -__int_as_float(0x7f800000) : 0.f;
    int count = 0;
    for (int r = 0; r < R; ++r) {
      const int ih = oh * SH - PH + r * DH;
      for (int s = 0; s < S; ++s) {
        const int iw = ow * SW - PW + s * DW;
        const bool inside = ih >= 0 && ih < H && iw >= 0 && iw < W;
        if (!IS_MAX && COUNT_PAD && ih >= -PH && ih < H + PE && iw >= -PW && iw < W + PF)
          ++count;
        if (!inside) continue;
        if (!(!IS_MAX && COUNT_PAD)) ++count;
        float v[VEC];
        ldv<TX, VEC>(x + (((i64)n * H + ih) * W + iw) * C + cv * VEC, v);
#pragma unroll
        for (int j = 0; j < VEC; ++j) {
          if (IS_MAX) acc[j] = (v[j] > acc[j] || v[j] != v[j]) ? v[j] : acc[j];
          else acc[j] += v[j];
        }
      }
    }
    if (!IS_MAX) {
      const float inv = count ? 1.f / count : 0.f;
#pragma unroll
      for (int j = 0; j < VEC; ++j) acc[j] *= inv;
    }
    stv<TY, VEC>(y + (((i64)n * OH + oh) * OW + ow) * C + cv * VEC, acc);
  }
}
"""


def _check(layer: LayerInfo, x: Placement, out: Placement) -> None:
    if x.layout != NHWC or out.layout != NHWC:
        raise KernelError(layer.name, layer.op, "the CUDA backend pools 2-D channels-last "
                          "tensors only")
    if len(layer.outputs) > 1:
        raise KernelError(layer.name, layer.op, "MaxPool indices are not supported on CUDA")


def _defines(values: dict[str, object]) -> str:
    return "".join(f"#define {k} {v}\n" for k, v in values.items())


@kernel("MaxPool", "AveragePool")
def bind_pool(ctx: BindContext, layer: LayerInfo) -> list[Candidate]:
    x, out = ctx.place(layer.inputs[0]), ctx.place(layer.outputs[0])
    _check(layer, x, out)
    n, c, h, w = x.shape
    _, _, oh, ow = out.shape
    kh, kw = (int(v) for v in layer.attrs["kernel_shape"])
    pads = [int(p) for p in layer.attrs.get("pads", [0, 0, 0, 0])]
    strides = [int(s) for s in layer.attrs.get("strides", [1, 1])]
    dilations = [int(d) for d in layer.attrs.get("dilations", [1, 1])]
    vec = vec_width(c, itemsize=x.dtype.itemsize)
    values = {"TX": c_type(x.dtype, layer.name), "TY": c_type(out.dtype, layer.name),
              "VEC": vec, "N": n, "C": c, "H": h, "W": w, "OH": oh, "OW": ow, "R": kh,
              "S": kw, "SH": strides[0], "SW": strides[1], "PH": pads[0], "PW": pads[1],
              "PE": pads[2], "PF": pads[3], "DH": dilations[0], "DW": dilations[1],
              "IS_MAX": int(layer.op == "MaxPool"),
              "COUNT_PAD": int(layer.attrs.get("count_include_pad", 0))}
    source = _defines(values) + _WINDOW
    launch = ctx.kernel_launch(source, "pool", n * oh * ow * (c // vec),
                               [np.uint64(x.ptr), np.uint64(out.ptr)])
    return [Candidate("nvrtc", launch)]


_GLOBAL = r"""
extern "C" __global__ void global_pool(const TX* __restrict__ x, TY* __restrict__ y) {
  const i64 total = (i64)N * (C / VEC);
  for (i64 t = blockIdx.x * (i64)blockDim.x + threadIdx.x; t < total;
       t += (i64)gridDim.x * blockDim.x) {
    const int cv = (int)(t % (C / VEC));
    const int n = (int)(t / (C / VEC));
    float acc[VEC];
#pragma unroll
    for (int j = 0; j < VEC; ++j) acc[j] = IS_MAX ? -__int_as_float(0x7f800000) : 0.f;
    const TX* base = x + (i64)n * HW * C + cv * VEC;
    for (int i = 0; i < HW; ++i) {
      float v[VEC];
      ldv<TX, VEC>(base + (i64)i * C, v);
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        if (IS_MAX) acc[j] = (v[j] > acc[j] || v[j] != v[j]) ? v[j] : acc[j];
        else acc[j] += v[j];
      }
    }
    if (!IS_MAX) {
#pragma unroll
      for (int j = 0; j < VEC; ++j) acc[j] *= (1.f / HW);
    }
    stv<TY, VEC>(y + (i64)n * C + cv * VEC, acc);
  }
}
"""


@kernel("GlobalAveragePool", "GlobalMaxPool")
def bind_global_pool(ctx: BindContext, layer: LayerInfo) -> list[Candidate]:
    x, out = ctx.place(layer.inputs[0]), ctx.place(layer.outputs[0])
    if x.layout != NHWC:
        raise KernelError(layer.name, layer.op, "the CUDA backend pools 2-D channels-last "
                          "tensors only")
    n, c, h, w = x.shape
    # [N, C, 1, 1] is stored the same channels-last or row-major.
    vec = vec_width(c, itemsize=x.dtype.itemsize)
    values = {"TX": c_type(x.dtype, layer.name), "TY": c_type(out.dtype, layer.name),
              "VEC": vec, "N": n, "C": c, "HW": h * w,
              "IS_MAX": int(layer.op == "GlobalMaxPool")}
    source = _defines(values) + _GLOBAL
    launch = ctx.kernel_launch(source, "global_pool", n * (c // vec),
                               [np.uint64(x.ptr), np.uint64(out.ptr)])
    return [Candidate("nvrtc", launch)]
