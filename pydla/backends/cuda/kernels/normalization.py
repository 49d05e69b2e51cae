"""LayerNormalization (a warp per normalized row, two-pass float32 statistics, scale and
bias fused, optional Mean/InvStdDev outputs) and standalone BatchNormalization (inference
form: folded on the host into a per-channel multiply-add, one pointwise kernel)."""

from __future__ import annotations

from typing import Any

import numpy as np

from pydla.backends.cuda.codegen import c_type, decompose, defines, f32, offset
from pydla.backends.cuda.context import BindContext
from pydla.backends.cuda.kernels.pointwise import program_launch
from pydla.backends.cuda.layout import LINEAR, Placement
from pydla.backends.cuda.registry import Candidate, kernel
from pydla.dtypes import DType
from pydla.errors import KernelError
from pydla.loadable.program import LayerInfo

_LAYERNORM = r"""
extern "C" __global__ void layernorm(const TX* __restrict__ x, const float* __restrict__ scale,
    const float* __restrict__ bias, TY* __restrict__ y, TM* __restrict__ mean_out,
    TM* __restrict__ inv_out) {
  const int lane = threadIdx.x & 31;
  const i64 warps = ((i64)gridDim.x * blockDim.x) >> 5;
  for (i64 row = (blockIdx.x * (i64)blockDim.x + threadIdx.x) >> 5; row < ROWS; row += warps) {
ROW_COORDS
    const i64 xb = X_ROW, yb = Y_ROW;
    float sum = 0.f;
    for (i64 l = lane; l < L; l += 32) {
INNER_COORDS
      sum += ld(x + xb + X_INNER);
    }
#pragma unroll
    for (int d = 16; d > 0; d >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, d);
    const float mean = sum / (float)L;
    float sq = 0.f;
    for (i64 l = lane; l < L; l += 32) {
INNER_COORDS
      const float v = ld(x + xb + X_INNER) - mean;
      sq = fmaf(v, v, sq);
    }
#pragma unroll
    for (int d = 16; d > 0; d >>= 1) sq += __shfl_xor_sync(0xffffffffu, sq, d);
    const float inv = 1.f / sqrtf(sq / (float)L + EPS);
    for (i64 l = lane; l < L; l += 32) {
INNER_COORDS
      float v = (ld(x + xb + X_INNER) - mean) * inv * scale[l];
      if (HAS_BIAS) v += bias[l];
      st(y + yb + Y_INNER, v);
    }
    if (lane == 0) {
      if (HAS_MEAN) st(mean_out + MEAN_ROW, mean);
      if (HAS_INV) st(inv_out + INV_ROW, inv);
    }
  }
}
"""


@kernel("LayerNormalization")
def bind_layernorm(ctx: BindContext, layer: LayerInfo) -> list[Candidate]:
    x, out = ctx.place(layer.inputs[0]), ctx.place(layer.outputs[0])
    rank = len(x.shape)
    axis = int(layer.attrs.get("axis", -1)) % rank
    outer, inner = list(x.shape[:axis]), list(x.shape[axis:])
    rows = int(np.prod(outer, dtype=np.int64))
    length = int(np.prod(inner, dtype=np.int64))

    def param(i: int, default: float) -> np.ndarray:
        if i >= len(layer.inputs) or layer.inputs[i] < 0:
            return np.full(inner, default, np.float32)
        if not ctx.is_weight(layer.inputs[i]):
            raise KernelError(layer.name, layer.op, "the CUDA backend needs constant scale "
                              "and bias")
        value = ctx.host(layer.inputs[i]).astype(np.float32)
        return np.ascontiguousarray(np.broadcast_to(value, inner))

    scale = ctx.upload(param(1, 1.0))
    has_bias = len(layer.inputs) > 2 and layer.inputs[2] >= 0
    bias = ctx.upload(param(2, 0.0))
    stats = [ctx.place(o) if o >= 0 else None for o in layer.outputs[1:3]]
    stats += [None] * (2 - len(stats))
    mean_p, inv_p = stats
    row_c = [f"o{d}" for d in range(len(outer))]
    in_c = [f"i{d}" for d in range(len(inner))]

    def row_off(p: Placement | None) -> str:
        return "0" if p is None else offset(row_c, p.strides[:axis])

    mt = next((p.dtype for p in stats if p is not None), DType.FLOAT32)
    values: dict[str, Any] = {
        "TX": c_type(x.dtype, layer.name), "TY": c_type(out.dtype, layer.name),
        "TM": c_type(mt, layer.name), "ROWS": rows, "L": length,
        "EPS": f32(float(layer.attrs.get("epsilon", 1e-5))), "HAS_BIAS": int(has_bias),
        "HAS_MEAN": int(mean_p is not None), "HAS_INV": int(inv_p is not None)}
    source = defines(values) + (
        _LAYERNORM.replace("ROW_COORDS", "\n".join(decompose("row", outer, "o", "    ")))
        .replace("INNER_COORDS", "\n".join(decompose("l", inner, "i", "      ")))
        .replace("X_ROW", row_off(x)).replace("Y_ROW", row_off(out))
        .replace("X_INNER", f"({offset(in_c, x.strides[axis:])})")
        .replace("Y_INNER", f"({offset(in_c, out.strides[axis:])})")
        .replace("MEAN_ROW", row_off(mean_p)).replace("INV_ROW", row_off(inv_p)))
    args = [np.uint64(x.ptr), np.uint64(scale), np.uint64(bias), np.uint64(out.ptr),
            np.uint64(mean_p.ptr if mean_p is not None else 0),
            np.uint64(inv_p.ptr if inv_p is not None else 0)]
    return [Candidate("warp", ctx.kernel_launch(source, "layernorm", rows * 32, args))]


@kernel("BatchNormalization")
def bind_batchnorm(ctx: BindContext, layer: LayerInfo) -> list[Candidate]:
    if len([o for o in layer.outputs if o >= 0]) > 1:
        raise KernelError(layer.name, layer.op, "training-mode BatchNormalization (running "
                          "statistics outputs) is not supported on CUDA")
    if not all(ctx.is_weight(i) for i in layer.inputs[1:5]):
        raise KernelError(layer.name, layer.op, "the CUDA backend needs constant scale, bias, "
                          "mean and variance")
    x, out = ctx.place(layer.inputs[0]), ctx.place(layer.outputs[0])
    scale, bias, mean, var = (ctx.host(i).astype(np.float32) for i in layer.inputs[1:5])
    eps = np.float32(layer.attrs.get("epsilon", 1e-5))
    mul = scale / np.sqrt(var + eps)
    add = bias - mean * mul
    tail = (1,) * (len(x.shape) - 2)
    shape = (x.shape[1],) + tail if len(x.shape) >= 2 else (1,)
    params = [Placement(ctx.upload(p.astype(np.float32).reshape(shape)), shape, DType.FLOAT32,
                        LINEAR) for p in (mul, add)]
    dtype = out.dtype.name.lower()
    program = [{"op": "Mul", "in": [0, 1], "attrs": {}, "shape": list(out.shape),
                "dtype": dtype},
               {"op": "Add", "in": [3, 2], "attrs": {}, "shape": list(out.shape),
                "dtype": dtype}]
    return [Candidate("nvrtc", program_launch(ctx, program, [x, *params], out, layer.name))]
