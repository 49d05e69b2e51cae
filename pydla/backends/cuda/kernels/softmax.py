"""Softmax / LogSoftmax over axes that are innermost in memory: one warp per row."""

from __future__ import annotations

import numpy as np

from pydla.backends.cuda.codegen import c_type
from pydla.backends.cuda.context import BindContext
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


@kernel("Softmax", "LogSoftmax")
def bind_softmax(ctx: BindContext, layer: LayerInfo) -> list[Candidate]:
    x, out = ctx.place(layer.inputs[0]), ctx.place(layer.outputs[0])
    axes = sorted(int(a) % len(x.shape) for a in layer.attrs["axes"])
    innermost = sorted(x.physical_order()[len(x.shape) - len(axes):])
    if innermost != axes or out.strides != x.strides:
        raise KernelError(layer.name, layer.op, "the CUDA backend's softmax needs its axes "
                          "innermost in memory")
    length = int(np.prod([x.shape[a] for a in axes]))
    rows = x.size // length
    values = {"TX": c_type(x.dtype, layer.name), "TY": c_type(out.dtype, layer.name),
              "ROWS": rows, "L": length, "LOG": int(layer.op == "LogSoftmax")}
    source = "".join(f"#define {k} {v}\n" for k, v in values.items()) + _SOFTMAX
    launch = ctx.kernel_launch(source, "softmax", rows * 32,
                               [np.uint64(x.ptr), np.uint64(out.ptr)])
    return [Candidate("warp", launch)]
