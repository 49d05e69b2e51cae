"""Batched MatMul (numpy semantics, any layouts) with a fused epilogue: the backend's own
kernels, generated per layer (NVRTC).

CuPy's cuBLAS calls are refused inside a stream capture, and these GEMMs are small (attention
heads, token projections, recurrent input projections), so the backend times its own:

- ``tile32`` / ``tile64``: a block computes a 32×32 (64×64) output tile through shared
  memory, each thread a 2×2 (4×4) register block, float32 accumulation; operands are read
  through per-dimension strides, so transposed, broadcast (stride-0) and channels-last
  operands need no copy;
- ``warp``: a warp per output element, lanes striding over K; wins when M·N is tiny.

``matmul_launch`` is shared with the LSTM (its input projection of all time steps).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from pydla.backends.cuda.codegen import c_type, decompose, defines, offset
from pydla.backends.cuda.context import BindContext
from pydla.backends.cuda.kernels.epilogue import Epilogue, make_epilogue
from pydla.backends.cuda.layout import Placement
from pydla.backends.cuda.registry import Candidate, Launch, kernel
from pydla.dtypes import DType
from pydla.errors import KernelError
from pydla.loadable.program import LayerInfo


@dataclass(frozen=True)
class MatmulShape:
    """y[z, m, n] = Σ_k a[z, m, k]·b[z, k, n] over batch index z, all through strides."""

    batch: tuple[int, ...]  # batch dimensions of the output
    a_batch: tuple[int, ...]  # element strides of a, b and y along each batch dimension
    b_batch: tuple[int, ...]
    y_batch: tuple[int, ...]
    m: int
    n: int
    k: int
    sam: int
    sak: int
    sbk: int
    sbn: int
    sym: int
    syn: int


_TILE = r"""
extern "C" __global__ void __launch_bounds__(NT) matmul(const TA* __restrict__ a,
    const TB* __restrict__ b, TY* __restrict__ y EXTRA_PARAMS) {
  __shared__ float As[BK][BM + 1];
  __shared__ float Bs[BK][BN + 1];
  const int tiles_m = (M + BM - 1) / BM, tiles_n = (N + BN - 1) / BN;
  const i64 tiles = (i64)BATCH * tiles_m * tiles_n;
  const int tx = threadIdx.x % (BN / TN), ty = threadIdx.x / (BN / TN);
  for (i64 tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const int tn = (int)(tile % tiles_n);
    const i64 rest = tile / tiles_n;
    const int tm = (int)(rest % tiles_m);
    const i64 bi = rest / tiles_m;
BATCH_CODE
    float acc[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
      for (int j = 0; j < TN; ++j) acc[i][j] = 0.f;
    for (int k0 = 0; k0 < K; k0 += BK) {
      for (int e = threadIdx.x; e < BM * BK; e += NT) {
        const int kk = A_K_FAST ? e % BK : e / BM;
        const int mm = A_K_FAST ? e / BK : e % BM;
        const int m = tm * BM + mm, k = k0 + kk;
        As[kk][mm] = (m < M && k < K) ? ld(a + a_off + (i64)m * SAM + (i64)k * SAK) : 0.f;
      }
      for (int e = threadIdx.x; e < BN * BK; e += NT) {
        const int kk = B_K_FAST ? e % BK : e / BN;
        const int nn = B_K_FAST ? e / BK : e % BN;
        const int n = tn * BN + nn, k = k0 + kk;
        Bs[kk][nn] = (n < N && k < K) ? ld(b + b_off + (i64)k * SBK + (i64)n * SBN) : 0.f;
      }
      __syncthreads();
#pragma unroll
      for (int kk = 0; kk < BK; ++kk) {
        float av[TM], bv[TN];
#pragma unroll
        for (int i = 0; i < TM; ++i) av[i] = As[kk][ty + i * (BM / TM)];
#pragma unroll
        for (int j = 0; j < TN; ++j) bv[j] = Bs[kk][tx + j * (BN / TN)];
#pragma unroll
        for (int i = 0; i < TM; ++i)
#pragma unroll
          for (int j = 0; j < TN; ++j) acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
      }
      __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < TM; ++i) {
#pragma unroll
      for (int j = 0; j < TN; ++j) {
        const int m = tm * BM + ty + i * (BM / TM), n = tn * BN + tx + j * (BN / TN);
        if (m < M && n < N) {
          const float a0 = acc[i][j];
          EPILOGUE
          st(y + y_off + (i64)m * SYM + (i64)n * SYN, RESULT);
        }
      }
    }
  }
}
"""

_WARP = r"""
extern "C" __global__ void matmul(const TA* __restrict__ a, const TB* __restrict__ b,
    TY* __restrict__ y EXTRA_PARAMS) {
  const int lane = threadIdx.x & 31;
  const i64 warps = ((i64)gridDim.x * blockDim.x) >> 5;
  for (i64 o = (blockIdx.x * (i64)blockDim.x + threadIdx.x) >> 5; o < (i64)BATCH * M * N;
       o += warps) {
    const int n = (int)(o % N);
    const i64 rest = o / N;
    const int m = (int)(rest % M);
    const i64 bi = rest / M;
BATCH_CODE
    float acc = 0.f;
    for (int k = lane; k < K; k += 32)
      acc = fmaf(ld(a + a_off + (i64)m * SAM + (i64)k * SAK),
                 ld(b + b_off + (i64)k * SBK + (i64)n * SBN), acc);
#pragma unroll
    for (int d = 16; d > 0; d >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, d);
    if (lane == 0) {
      const float a0 = acc;
      EPILOGUE
      st(y + y_off + (i64)m * SYM + (i64)n * SYN, RESULT);
    }
  }
}
"""

TILES = {"tile32": (32, 2), "tile64": (64, 4)}  # name → (tile edge, per-thread block edge)


def _batch_code(shape: MatmulShape) -> tuple[list[str], list[str]]:
    """Statements giving the batch coordinates z0… and a_off, b_off, y_off."""
    coords = [f"z{d}" for d in range(len(shape.batch))]
    lines = decompose("bi", shape.batch, "z", "    ") if shape.batch else ["    (void)bi;"]
    for name, strides in (("a_off", shape.a_batch), ("b_off", shape.b_batch),
                          ("y_off", shape.y_batch)):
        lines.append(f"    const i64 {name} = {offset(coords, strides)};")
    return lines, coords


def matmul_source(shape: MatmulShape, types: tuple[DType, DType, DType], epilogue: Epilogue,
                  variant: str, where: str) -> tuple[str, int, int]:
    """(source, threads, block) of one candidate."""
    batch_lines, coords = _batch_code(shape)
    lines, result = epilogue.lines("a0", [*coords, "m", "n"])
    ta, tb, ty = types
    values: dict[str, object] = {
        "TA": c_type(ta, where), "TB": c_type(tb, where), "TY": c_type(ty, where),
        "BATCH": int(np.prod(shape.batch, dtype=np.int64)), "M": shape.m, "N": shape.n,
        "K": shape.k, "SAM": shape.sam, "SAK": shape.sak, "SBK": shape.sbk, "SBN": shape.sbn,
        "SYM": shape.sym, "SYN": shape.syn}
    total_batch = int(values["BATCH"])  # type: ignore[call-overload]
    if variant == "warp":
        template, block = _WARP, 256
        threads = total_batch * shape.m * shape.n * 32
    else:
        edge, per = TILES[variant]
        block = (edge // per) ** 2
        values.update({"BM": edge, "BN": edge, "BK": 16, "TM": per, "TN": per, "NT": block,
                       "A_K_FAST": int(shape.sak == 1), "B_K_FAST": int(shape.sbn != 1)})
        template = _TILE
        tiles = total_batch * -(-shape.m // edge) * -(-shape.n // edge)
        threads = tiles * block
    body = (template.replace("BATCH_CODE", "\n".join(batch_lines))
            .replace("EXTRA_PARAMS", "".join(", " + p for p in epilogue.params))
            .replace("EPILOGUE", "\n          ".join(lines)).replace("RESULT", result))
    return defines(values) + body, threads, block


def matmul_launch(ctx: BindContext, shape: MatmulShape, a_ptr: int, b_ptr: int, y_ptr: int,
                  types: tuple[DType, DType, DType], epilogue: Epilogue, variant: str,
                  where: str) -> Launch:
    source, threads, block = matmul_source(shape, types, epilogue, variant, where)
    args = [np.uint64(a_ptr), np.uint64(b_ptr), np.uint64(y_ptr), *epilogue.args]
    return ctx.kernel_launch(source, "matmul", threads, args, block=block)


def matmul_variants(shape: MatmulShape) -> list[str]:
    names = ["tile32", "warp"]
    if shape.m >= 64 and shape.n >= 64:
        names.insert(1, "tile64")
    return names


def _batch_strides(p: Placement, batch: Sequence[int]) -> tuple[int, ...]:
    """Strides of p's leading (batch) dimensions broadcast to ``batch`` (right-aligned)."""
    own_shape, own = p.shape[:-2], p.strides[:-2]
    skip = len(batch) - len(own_shape)
    out = []
    for d, size in enumerate(batch):
        if d < skip:
            out.append(0)
            continue
        mine = own_shape[d - skip]
        if mine not in (size, 1):
            raise ValueError(f"batch dimensions {p.shape[:-2]} do not broadcast to {batch}")
        out.append(own[d - skip] if mine == size and size > 1 else 0)
    return tuple(out)


@kernel("MatMul")
def bind_matmul(ctx: BindContext, layer: LayerInfo) -> list[Candidate]:
    epi = layer.attrs.get("epilogue") or {"program": [], "inputs": 0}
    n_extra = int(epi["inputs"])
    own = layer.inputs[:len(layer.inputs) - n_extra]
    extras = [ctx.place(i) for i in layer.inputs[len(own):]]
    a, b, out = ctx.place(own[0]), ctx.place(own[1]), ctx.place(layer.outputs[0])
    if len(a.shape) < 2 or len(b.shape) < 2:
        raise KernelError(layer.name, layer.op, "the CUDA backend's MatMul needs operands of "
                          "rank 2 or more")
    m, k = a.shape[-2:]
    k2, n = b.shape[-2:]
    batch = tuple(out.shape[:-2])
    if k != k2 or tuple(out.shape[-2:]) != (m, n):
        raise KernelError(layer.name, layer.op, f"shapes {a.shape} × {b.shape} → {out.shape} "
                          "do not agree")
    try:
        shape = MatmulShape(batch, _batch_strides(a, batch), _batch_strides(b, batch),
                            tuple(out.strides[:-2]), m, n, k, a.strides[-2], a.strides[-1],
                            b.strides[-2], b.strides[-1], out.strides[-2], out.strides[-1])
    except ValueError as e:
        raise KernelError(layer.name, layer.op, str(e)) from None
    epilogue = make_epilogue(list(epi["program"]), extras, out, layer.name)
    types = (a.dtype, b.dtype, out.dtype)
    return [Candidate(v, matmul_launch(ctx, shape, a.ptr, b.ptr, out.ptr, types, epilogue, v,
                                       layer.name))
            for v in matmul_variants(shape) if ctx.wants(v)]
