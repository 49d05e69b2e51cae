"""Pooling over channels-last tensors: one thread per output vector of channels."""

from __future__ import annotations

import numpy as np

from pydla.backends.cuda.codegen import c_type, storage_type
from pydla.backends.cuda.context import BindContext, vec_width
from pydla.backends.cuda.layout import NHWC, Placement
from pydla.backends.cuda.registry import Candidate, Launch, kernel
from pydla.dtypes import DType
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


_BYTES = (DType.INT8, DType.UINT8)


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
    # an 8-bit MaxPool (between int8 layers) picks one of its inputs: exact through float
    typed = storage_type if layer.op == "MaxPool" and x.dtype in _BYTES and \
        out.dtype is x.dtype else c_type
    values = {"TX": typed(x.dtype, layer.name), "TY": typed(out.dtype, layer.name),
              "VEC": vec, "N": n, "C": c, "H": h, "W": w, "OH": oh, "OW": ow, "R": kh,
              "S": kw, "SH": strides[0], "SW": strides[1], "PH": pads[0], "PW": pads[1],
              "PE": pads[2], "PF": pads[3], "DH": dilations[0], "DW": dilations[1],
              "IS_MAX": int(layer.op == "MaxPool"),
              "COUNT_PAD": int(layer.attrs.get("count_include_pad", 0))}
    source = _defines(values) + _WINDOW
    launch = ctx.kernel_launch(source, "pool", n * oh * ow * (c // vec),
                               [np.uint64(x.ptr), np.uint64(out.ptr)])
    return [Candidate("nvrtc", launch)]


# Global pools reduce H·W pixels per (n, channel vector). On large maps with few channels a
# thread per output leaves the GPU idle (a 160×160×64 fp16 map is 8 threads looping over
# 25,600 pixels), so the block kernel gives each block one (n, channel chunk) and a range of
# pixels: lanes along the channel vectors (coalesced 16-byte loads), rows of the block
# striding over pixels, a shared-memory tree to combine rows. With SPLIT > 1 several blocks
# share one (n, chunk) and write float partials that a second kernel combines.
_POOL_COMMON = r"""
__device__ __forceinline__ float pool_init() {
  return IS_MAX ? -__int_as_float(0x7f800000) : 0.f;
}
__device__ __forceinline__ float pool_step(float a, float v) {
  return IS_MAX ? ((v > a || v != v) ? v : a) : a + v;
}
"""

_GLOBAL_THREAD = _POOL_COMMON + r"""
extern "C" __global__ void global_pool(const TX* __restrict__ x, TY* __restrict__ y) {
  const i64 total = (i64)N * (C / VEC);
  for (i64 t = blockIdx.x * (i64)blockDim.x + threadIdx.x; t < total;
       t += (i64)gridDim.x * blockDim.x) {
    const int cv = (int)(t % (C / VEC));
    const int n = (int)(t / (C / VEC));
    float acc[VEC];
#pragma unroll
    for (int j = 0; j < VEC; ++j) acc[j] = pool_init();
    const TX* base = x + (i64)n * HW * C + cv * VEC;
    for (int i = 0; i < HW; ++i) {
      float v[VEC];
      ldv<TX, VEC>(base + (i64)i * C, v);
#pragma unroll
      for (int j = 0; j < VEC; ++j) acc[j] = pool_step(acc[j], v[j]);
    }
    if (MEAN) {
#pragma unroll
      for (int j = 0; j < VEC; ++j) acc[j] *= (1.f / HW);
    }
    stv<TY, VEC>(y + (i64)n * C + cv * VEC, acc);
  }
}
"""

_GLOBAL_BLOCK = _POOL_COMMON + r"""
extern "C" __global__ void global_pool_block(const TX* __restrict__ x, TY* __restrict__ y,
                                             float* __restrict__ partial) {
  __shared__ float rows[ROWS][LANES * VEC];
  const int lane = threadIdx.x % LANES, row = threadIdx.x / LANES;
  const int split = blockIdx.x % SPLIT;
  const int chunk = (blockIdx.x / SPLIT) % CHUNKS;
  const int n = blockIdx.x / (SPLIT * CHUNKS);
  const int cv = chunk * LANES + lane;
  const bool live = cv < C / VEC;
  const int per = (HW + SPLIT - 1) / SPLIT;
  const int lo = split * per, hi = min(HW, lo + per);
  float acc[VEC];
#pragma unroll
  for (int j = 0; j < VEC; ++j) acc[j] = pool_init();
  if (live) {
    const TX* base = x + (i64)n * HW * C + cv * VEC;
    for (int i = lo + row; i < hi; i += ROWS) {
      float v[VEC];
      ldv<TX, VEC>(base + (i64)i * C, v);
#pragma unroll
      for (int j = 0; j < VEC; ++j) acc[j] = pool_step(acc[j], v[j]);
    }
  }
#pragma unroll
  for (int j = 0; j < VEC; ++j) rows[row][lane * VEC + j] = acc[j];
  __syncthreads();
  for (int s = ROWS / 2; s > 0; s >>= 1) {
    if (row < s) {
#pragma unroll
      for (int j = 0; j < VEC; ++j)
        rows[row][lane * VEC + j] = pool_step(rows[row][lane * VEC + j],
                                              rows[row + s][lane * VEC + j]);
    }
    __syncthreads();
  }
  if (row != 0 || !live) return;
#pragma unroll
  for (int j = 0; j < VEC; ++j) acc[j] = rows[0][lane * VEC + j];
  if (SPLIT > 1) {
#pragma unroll
    for (int j = 0; j < VEC; ++j) partial[((i64)n * SPLIT + split) * C + cv * VEC + j] = acc[j];
    return;
  }
  if (MEAN) {
#pragma unroll
    for (int j = 0; j < VEC; ++j) acc[j] *= (1.f / HW);
  }
  stv<TY, VEC>(y + (i64)n * C + cv * VEC, acc);
}

extern "C" __global__ void global_pool_finish(const float* __restrict__ partial,
                                              TY* __restrict__ y) {
  const i64 total = (i64)N * C;
  for (i64 t = blockIdx.x * (i64)blockDim.x + threadIdx.x; t < total;
       t += (i64)gridDim.x * blockDim.x) {
    const int c = (int)(t % C);
    const int n = (int)(t / C);
    float acc = pool_init();
    for (int s = 0; s < SPLIT; ++s) acc = pool_step(acc, partial[((i64)n * SPLIT + s) * C + c]);
    if (MEAN) acc *= (1.f / HW);
    y[t] = (TY)acc;
  }
}
"""

_THREADS = 256
_TARGET_BLOCKS = 2 * 132  # two waves of the H200's SMs
_MIN_ROWS_PER_THREAD = 8  # below this a split's partials cost more than its loads save


def block_geometry(n: int, c_vectors: int, hw: int) -> tuple[int, int, int, int]:
    """(lanes, rows, chunks, split) of the block kernel: lanes along channel vectors (a
    power of two up to 32), rows striding over pixels, and how many blocks share one
    (n, chunk) so that the grid fills the GPU without starving each block of pixels."""
    lanes = 1
    while lanes < min(c_vectors, 32):
        lanes *= 2
    rows = _THREADS // lanes
    chunks = -(-c_vectors // lanes)
    most = max(1, hw // (rows * _MIN_ROWS_PER_THREAD))
    split = max(1, min(-(-_TARGET_BLOCKS // (n * chunks)), most))
    return lanes, rows, chunks, split


@kernel("GlobalAveragePool", "GlobalMaxPool")
def bind_global_pool(ctx: BindContext, layer: LayerInfo) -> list[Candidate]:
    x, out = ctx.place(layer.inputs[0]), ctx.place(layer.outputs[0])
    if x.layout != NHWC:
        raise KernelError(layer.name, layer.op, "the CUDA backend pools 2-D channels-last "
                          "tensors only")
    is_max = layer.op == "GlobalMaxPool"
    return spatial_candidates(ctx, layer, x, out, is_max=is_max, mean=not is_max)


def spatial_candidates(ctx: BindContext, layer: LayerInfo, x: Placement, out: Placement,
                       is_max: bool, mean: bool, prefix: str = "") -> list[Candidate]:
    """Candidates reducing an NHWC [N, C, H, W] tensor over H and W into N·C contiguous
    values (a global pool, or ReduceMax/Mean/Sum over H, W): max, mean or sum; their names
    start with ``prefix``."""
    n, c, h, w = x.shape
    vec = vec_width(c, itemsize=x.dtype.itemsize)
    values = {"TX": c_type(x.dtype, layer.name), "TY": c_type(out.dtype, layer.name),
              "VEC": vec, "N": n, "C": c, "HW": h * w, "IS_MAX": int(is_max),
              "MEAN": int(mean)}
    args = [np.uint64(x.ptr), np.uint64(out.ptr)]
    found = []
    if ctx.wants(prefix + "thread"):
        source = _defines(values) + _GLOBAL_THREAD
        found.append(Candidate(prefix + "thread", ctx.kernel_launch(
            source, "global_pool", n * (c // vec), args)))
    lanes, rows, chunks, split = block_geometry(n, c // vec, h * w)
    for name, s in (("block", 1), ("split", split)):
        if (name == "split" and s == 1) or not ctx.wants(prefix + name):
            continue
        found.append(Candidate(prefix + name, _block_launch(ctx, values, lanes, rows, chunks, s,
                                                   args)))
    return found


def _block_launch(ctx: BindContext, values: dict[str, object], lanes: int, rows: int,
                  chunks: int, split: int, args: list[np.uint64]) -> Launch:
    n, c = int(values["N"]), int(values["C"])  # type: ignore[call-overload]
    source = _defines({**values, "LANES": lanes, "ROWS": rows, "CHUNKS": chunks,
                       "SPLIT": split}) + _GLOBAL_BLOCK
    partial = np.uint64(ctx.scratch(4 * n * split * c) if split > 1 else 0)
    reduce = ctx.function(source, "global_pool_block")
    grid = n * chunks * split
    finish = ctx.kernel_launch(source, "global_pool_finish", n * c, [partial, args[1]]) \
        if split > 1 else None

    def launch(stream: object) -> None:
        reduce((grid,), (lanes * rows,), (*args, partial), stream=stream)
        if finish is not None:
            finish(stream)

    return launch
