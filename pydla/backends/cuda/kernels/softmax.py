"""Softmax / LogSoftmax: one warp per row; rows contiguous in memory when the axes are
innermost, else addressed through strides (``strided``)."""

from __future__ import annotations

import numpy as np

from pydla.backends.cuda.codegen import c_type, decompose, defines, offset
from pydla.backends.cuda.context import BindContext
from pydla.backends.cuda.layout import Placement
from pydla.backends.cuda.registry import Candidate, kernel
from pydla.errors import KernelError
from pydla.loadable.program import LayerInfo

_SOFTMAX = r"""
extern "C" __global__ void softmax(const TX* __restrict__ x, TY* __restrict__ y) {
  const int lane = threadIdx.x & 31;
  const i64 warps = ((i64)gridDim.x * blockDim.x) >> 5;
  for (i64 row = (blockIdx.x * (i64)blockDim.x + threadIdx.x) >> 5; row < ROWS; row += warps) {
    const TX* xr = x + row * L;
    TY* yr = y + row * L;
    float mx = -__int_as_float(0x7f800000);
    for (int i = lane; i < L; i += 32) mx = fmaxf(mx, ld(xr + i));
#pragma unroll
    for (int d = 16; d > 0; d >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, d));
    float sum = 0.f;
    for (int i = lane; i < L; i += 32) sum += expf(ld(xr + i) - mx);
#pragma unroll
    for (int d = 16; d > 0; d >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, d);
    for (int i = lane; i < L; i += 32) {
      const float v = ld(xr + i) - mx;
      st(yr + i, LOG ? v - logf(sum) : expf(v) / sum);
    }
  }
}
"""


_STRIDED = r"""
extern "C" __global__ void softmax(const TX* __restrict__ x, TY* __restrict__ y) {
  const int lane = threadIdx.x & 31;
  const i64 warps = ((i64)gridDim.x * blockDim.x) >> 5;
  for (i64 row = (blockIdx.x * (i64)blockDim.x + threadIdx.x) >> 5; row < ROWS; row += warps) {
ROW_COORDS
    const i64 xb = X_ROW, yb = Y_ROW;
    float mx = -__int_as_float(0x7f800000);
    for (i64 l = lane; l < L; l += 32) {
INNER_COORDS
      mx = fmaxf(mx, ld(x + xb + X_INNER));
    }
#pragma unroll
    for (int d = 16; d > 0; d >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, d));
    float sum = 0.f;
    for (i64 l = lane; l < L; l += 32) {
INNER_COORDS
      sum += expf(ld(x + xb + X_INNER) - mx);
    }
#pragma unroll
    for (int d = 16; d > 0; d >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, d);
    for (i64 l = lane; l < L; l += 32) {
INNER_COORDS
      const float v = ld(x + xb + X_INNER) - mx;
      st(y + yb + Y_INNER, LOG ? v - logf(sum) : expf(v) / sum);
    }
  }
}
"""


def _strided(ctx: BindContext, layer: LayerInfo, x: Placement, out: Placement,
             axes: list[int]) -> Candidate:
    """Axes anywhere in memory (e.g. the last logical axis of a channels-last tensor)."""
    kept = [d for d in range(len(x.shape)) if d not in axes]
    rows = int(np.prod([x.shape[d] for d in kept], dtype=np.int64))
    length = int(np.prod([x.shape[d] for d in axes], dtype=np.int64))
    rc, ic = [f"o{i}" for i in range(len(kept))], [f"i{i}" for i in range(len(axes))]
    values = {"TX": c_type(x.dtype, layer.name), "TY": c_type(out.dtype, layer.name),
              "ROWS": rows, "L": length, "LOG": int(layer.op == "LogSoftmax")}
    source = defines(values) + (
        _STRIDED.replace("ROW_COORDS", "\n".join(decompose("row", [x.shape[d] for d in kept],
                                                            "o", "    ")))
        .replace("INNER_COORDS", "\n".join(decompose("l", [x.shape[d] for d in axes], "i",
                                                      "      ")))
        .replace("X_ROW", offset(rc, [x.strides[d] for d in kept]))
        .replace("Y_ROW", offset(rc, [out.strides[d] for d in kept]))
        .replace("X_INNER", f"({offset(ic, [x.strides[d] for d in axes])})")
        .replace("Y_INNER", f"({offset(ic, [out.strides[d] for d in axes])})"))
    launch = ctx.kernel_launch(source, "softmax", rows * 32,
                               [np.uint64(x.ptr), np.uint64(out.ptr)])
    return Candidate("strided", launch)


@kernel("Softmax", "LogSoftmax")
def bind_softmax(ctx: BindContext, layer: LayerInfo) -> list[Candidate]:
    x, out = ctx.place(layer.inputs[0]), ctx.place(layer.outputs[0])
    axes = sorted(int(a) % len(x.shape) for a in layer.attrs["axes"])
    innermost = sorted(x.physical_order()[len(x.shape) - len(axes):])
    if innermost != axes or out.strides != x.strides:
        if len(x.shape) == 0:
            raise KernelError(layer.name, layer.op, "softmax of a scalar")
        return [_strided(ctx, layer, x, out, axes)]
    length = int(np.prod([x.shape[a] for a in axes]))
    rows = x.size // length
    values = {"TX": c_type(x.dtype, layer.name), "TY": c_type(out.dtype, layer.name),
              "ROWS": rows, "L": length, "LOG": int(layer.op == "LogSoftmax")}
    source = "".join(f"#define {k} {v}\n" for k, v in values.items()) + _SOFTMAX
    launch = ctx.kernel_launch(source, "softmax", rows * 32,
                               [np.uint64(x.ptr), np.uint64(out.ptr)])
    return [Candidate("warp", launch)]
