"""Reduce* over any axes of tensors in any layout (NVRTC, generated per layer).

Candidates: ``thread`` (a thread per output element loops over the reduced elements; wins
for short reductions and many outputs) and ``warp`` (a warp per output element, lanes
striding over the reduced elements, shuffle combine; wins for long reductions). Both
accumulate in float32; an empty reduction gives the op's identity (ReduceMean: 0), as the
CPU backend does. ReduceMean, ReduceMax and ReduceSum over H and W of a channels-last map
also get the global pools' candidates (``pool-thread``, ``pool-block``, ``pool-split``:
coalesced channel vectors, pixel ranges split over blocks), which win on large maps.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from pydla.backends.cuda.codegen import c_type, decompose, defines, offset
from pydla.backends.cuda.context import BindContext
from pydla.backends.cuda.kernels.pooling import spatial_candidates
from pydla.backends.cuda.layout import NHWC
from pydla.backends.cuda.registry import Candidate, kernel
from pydla.errors import KernelError
from pydla.loadable.program import LayerInfo

_INF = "__int_as_float(0x7f800000)"
# op → (initial value, accumulate(acc, v), combine(a, b), finish(acc) with R elements)
_MAXF = "(({v}) > ({a}) || ({v}) != ({v}) ? ({v}) : ({a}))"
_MINF = "(({v}) < ({a}) || ({v}) != ({v}) ? ({v}) : ({a}))"
_OPS = {
    "ReduceSum": ("0.f", "{a} + {v}", "{a} + {v}", "{a}"),
    "ReduceMean": ("0.f", "{a} + {v}", "{a} + {v}", "(R ? {a} / (float)R : 0.f)"),
    "ReduceSumSquare": ("0.f", "{a} + {v} * {v}", "{a} + {v}", "{a}"),
    "ReduceL1": ("0.f", "{a} + fabsf({v})", "{a} + {v}", "{a}"),
    "ReduceL2": ("0.f", "{a} + {v} * {v}", "{a} + {v}", "sqrtf({a})"),
    "ReduceLogSum": ("0.f", "{a} + {v}", "{a} + {v}", "logf({a})"),
    "ReduceProd": ("1.f", "{a} * {v}", "{a} * {v}", "{a}"),
    "ReduceMax": (f"-{_INF}", _MAXF, _MAXF, "{a}"),
    "ReduceMin": (_INF, _MINF, _MINF, "{a}"),
}

_SPATIAL = ("ReduceMean", "ReduceMax", "ReduceSum")

_KERNEL = r"""
__device__ __forceinline__ float accumulate(float a, float v) { return ACCUMULATE; }
__device__ __forceinline__ float combine(float a, float v) { return COMBINE; }
extern "C" __global__ void reduce(const TX* __restrict__ x, TY* __restrict__ y) {
  const int lane = WARP ? (threadIdx.x & 31) : 0;
  const int width = WARP ? 32 : 1;
  const i64 workers = ((i64)gridDim.x * blockDim.x) / width;
  for (i64 o = (blockIdx.x * (i64)blockDim.x + threadIdx.x) / width; o < OUTS; o += workers) {
OUT_COORDS
    const i64 base = BASE;
    const i64 dst = DST;
    float acc = INIT;
    float shift = 0.f;
    if (LSE) {  // log-sum-exp: shift by the maximum first
      float mx = -__int_as_float(0x7f800000);
      for (i64 r = lane; r < R; r += width) {
RED_COORDS
        mx = fmaxf(mx, ld(x + base + RED_OFF));
      }
      if (WARP) {
#pragma unroll
        for (int d = 16; d > 0; d >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, d));
      }
      shift = (mx == mx && fabsf(mx) != __int_as_float(0x7f800000)) ? mx : 0.f;
    }
    for (i64 r = lane; r < R; r += width) {
RED_COORDS
      const float v = LSE ? expf(ld(x + base + RED_OFF) - shift) : ld(x + base + RED_OFF);
      acc = accumulate(acc, v);
    }
    if (WARP) {
#pragma unroll
      for (int d = 16; d > 0; d >>= 1) acc = combine(acc, __shfl_xor_sync(0xffffffffu, acc, d));
    }
    if (lane == 0) st(y + dst, LSE ? logf(acc) + shift : FINISH);
  }
}
"""


def reduce_source(op: str, x_shape: Sequence[int], x_strides: Sequence[int],
                  axes: Sequence[int], out_strides: Sequence[int], keepdims: bool,
                  tx: str, ty: str, warp: bool) -> tuple[str, int]:
    """(source, threads); ``out_strides`` index the output's own logical dimensions."""
    rank = len(x_shape)
    kept = [d for d in range(rank) if d not in axes]
    kept_sizes = [x_shape[d] for d in kept]
    red_sizes = [x_shape[d] for d in axes]
    # Output logical dimension of each kept input dimension.
    out_dim = {d: (d if keepdims else i) for i, d in enumerate(kept)}
    n_out = int(np.prod(kept_sizes, dtype=np.int64))
    n_red = int(np.prod(red_sizes, dtype=np.int64))
    out_lines = decompose("o", kept_sizes, "k", "    ")
    red_lines = decompose("r", red_sizes, "q", "        ")
    base = offset([f"k{i}" for i in range(len(kept))], [x_strides[d] for d in kept])
    dst = offset([f"k{i}" for i in range(len(kept))], [out_strides[out_dim[d]] for d in kept])
    red_off = offset([f"q{i}" for i in range(len(axes))], [x_strides[d] for d in axes])
    lse = op == "ReduceLogSumExp"
    init, acc, comb, finish = _OPS["ReduceSum" if lse else op]
    values = {"TX": tx, "TY": ty, "OUTS": n_out, "R": n_red, "WARP": int(warp),
              "LSE": int(lse)}
    body = (_KERNEL.replace("OUT_COORDS", "\n".join(out_lines))
            .replace("RED_COORDS", "\n".join(red_lines)).replace("RED_OFF", f"({red_off})")
            .replace("BASE", base).replace("DST", dst).replace("INIT", init)
            .replace("ACCUMULATE", acc.format(a="a", v="v"))
            .replace("COMBINE", comb.format(a="a", v="v")).replace("FINISH",
                                                                   finish.format(a="acc")))
    return defines(values) + body, n_out * (32 if warp else 1)


@kernel(*_OPS, "ReduceLogSumExp")
def bind_reduce(ctx: BindContext, layer: LayerInfo) -> list[Candidate]:
    x, out = ctx.place(layer.inputs[0]), ctx.place(layer.outputs[0])
    rank = len(x.shape)
    axes = sorted({int(a) % rank for a in layer.attrs["axes"]}) if rank else []
    keepdims = bool(layer.attrs.get("keepdims", 1))
    expected = tuple(1 if d in axes else s for d, s in enumerate(x.shape)) if keepdims else \
        tuple(s for d, s in enumerate(x.shape) if d not in axes)
    if tuple(out.shape) != expected:
        raise KernelError(layer.name, layer.op, f"output {out.shape} is not the reduction of "
                          f"{x.shape} over {axes}")
    tx, ty = c_type(x.dtype, layer.name), c_type(out.dtype, layer.name)
    candidates = []
    if layer.op in _SPATIAL and axes == [2, 3] and x.layout == NHWC and \
            list(out.strides[:2]) == [x.shape[1], 1]:
        # Over H and W of a channels-last map: the global pools' kernels (coalesced channel
        # vectors, pixel ranges split over blocks), timed with the generic ones below.
        candidates += spatial_candidates(ctx, layer, x, out, is_max=layer.op == "ReduceMax",
                                         mean=layer.op == "ReduceMean", prefix="pool-")
    for name, warp in (("thread", False), ("warp", True)):
        if not ctx.wants(name):
            continue
        source, threads = reduce_source(layer.op, x.shape, x.strides, axes, out.strides,
                                        keepdims, tx, ty, warp)
        candidates.append(Candidate(name, ctx.kernel_launch(
            source, "reduce", threads, [np.uint64(x.ptr), np.uint64(out.ptr)])))
    return candidates
