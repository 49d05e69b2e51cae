"""QConv on int8 tensor cores: an implicit GEMM with ``mma.sync.m16n8k32`` (s8·s8 → s32,
sm_80 and later) for the layers whose input channels come in whole 32-byte chunks
(channels-last, one group, C a multiple of 32, ``w - w_zp`` within int8). The epilogue is
qconv.py's (``finish``), so the outputs are the direct kernel's bit for bit: the int32
sums are exact either way.

GEMM view: rows are output pixels (``P = N·OH·OW``), columns output channels, the
reduction runs over taps × channels in steps of 32 channels of one tap. A block of 256
threads (8 warps) computes a 128 × BN tile (BN 128 or 64); each step it gathers the 128
pixels' 32 input bytes (the zero point where the tap falls in the padding, uint8 shifted
to int8 by xor 0x80) and BN channels' 32 weight bytes into shared memory (16-byte chunks
swizzled by bit 2 of the row so the fragment loads hit distinct banks), then every warp
runs its ``MT × NT`` mma tiles. Two shared buffers: the next step's global loads are in
flight (in registers) while the tensor cores work on this one, one barrier a step. Blocks
stride over the tiles (the grid is capped).
Weights are uploaded as ``[M][kh][kw][C]`` int8, each channel's reduction contiguous
(the mma's column-major B).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pydla.backends.cuda.codegen import defines
from pydla.backends.cuda.context import BindContext
from pydla.backends.cuda.registry import Candidate

BM = 128
THREADS = 256

_MMA = r"""
__device__ __forceinline__ void mma_s8(int* c, const int* a, const int* b) {
  asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 "
               "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
               : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
/* word q (0..3) of 16-byte chunk h (0, 1) of tile row r, chunks swizzled by bit 2 of r */
__device__ __forceinline__ int slot(int r, int h) { return r * 8 + ((h ^ ((r >> 2) & 1)) << 2); }
extern "C" __global__ void __launch_bounds__(256) qconv_mma(
    const unsigned char* __restrict__ x, const signed char* __restrict__ w,
    const int* __restrict__ base, const int* __restrict__ colsum,
    const TXZ* __restrict__ xzp, const TXS* __restrict__ xs, const TWS* __restrict__ ws,
    const TYS* __restrict__ ys, const TYZ* __restrict__ yzp, const TR* __restrict__ res,
    TY* __restrict__ y) {
  __shared__ __align__(16) int As[2][BM * 8];
  __shared__ __align__(16) int Bs[2][BN * 8];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wm = warp % WARPS_M, wn = warp / WARPS_M;
  const int g = lane >> 2, q = lane & 3;
  const int xz = HAS_XZP ? (int)ld(xzp) : 0;
  const int pad = (int)(((unsigned)(xz - OFF) & 0xffu) * 0x01010101u);
  const int arow = tid >> 1, ahalf = tid & 1;
  /* this thread's share of the B tile: chunk tid (BN·2 chunks of 16 bytes) */
  const int brow = tid >> 1, bhalf = tid & 1;
  const bool bload = tid < BN * 2;
  for (i64 tile = blockIdx.x; tile < (i64)PBLOCKS * NBLOCKS; tile += gridDim.x) {
    const i64 p0 = (tile % PBLOCKS) * BM;
    const int n0 = (int)(tile / PBLOCKS) * BN;
    const i64 ap = p0 + arow;
    const bool avalid = ap < MMA_P;
    i64 an = 0, aoh = 0, aow = 0;
    if (avalid) { i64 r = ap; aow = r % OW; r /= OW; aoh = r % OH; an = r / OH; }
    const unsigned char* xb = x + an * XSN + ahalf * 16;
    const bool bvalid = bload && n0 + brow < MMA_M;
    const signed char* wb = w + (i64)(n0 + brow) * KTOT + bhalf * 16;
    int acc[MT][NT][4];
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
      for (int j = 0; j < NT; ++j)
#pragma unroll
        for (int k = 0; k < 4; ++k) acc[i][j][k] = 0;
    int4 av, bv;
    /* step s: tap s / CHUNKS, channels (s % CHUNKS)·32; its global words into av, bv */
#define FETCH(s) do { \
      const int tap_ = (s) / CHUNKS, c0_ = ((s) % CHUNKS) * 32; \
      const int kh_ = tap_ / KW, kw_ = tap_ % KW; \
      const i64 ih_ = aoh * SH - PT + kh_ * DH, iw_ = aow * SW - PL + kw_ * DW; \
      av = make_int4(pad, pad, pad, pad); \
      if (avalid && ih_ >= 0 && ih_ < IH && iw_ >= 0 && iw_ < IW) { \
        av = *reinterpret_cast<const int4*>(xb + ih_ * XSH + iw_ * XSW + c0_); \
        av.x ^= FLIPWORD; av.y ^= FLIPWORD; av.z ^= FLIPWORD; av.w ^= FLIPWORD; \
      } \
      bv = make_int4(0, 0, 0, 0); \
      if (bvalid) bv = *reinterpret_cast<const int4*>(wb + (i64)tap_ * MMA_C + c0_); \
    } while (0)
#define STASH(buf) do { \
      *reinterpret_cast<int4*>(&As[buf][slot(arow, ahalf)]) = av; \
      if (bload) *reinterpret_cast<int4*>(&Bs[buf][slot(brow, bhalf)]) = bv; \
    } while (0)
    FETCH(0);
    STASH(0);
    __syncthreads();
    for (int s = 0; s < STEPS; ++s) {
      const int cur = s & 1;
      if (s + 1 < STEPS) FETCH(s + 1);  /* in flight while the tensor cores work */
      int a[MT][4], b[NT][2];
#pragma unroll
      for (int i = 0; i < MT; ++i) {
        const int r0 = wm * (MT * 16) + i * 16 + g;
        a[i][0] = As[cur][slot(r0, 0) + q]; a[i][1] = As[cur][slot(r0 + 8, 0) + q];
        a[i][2] = As[cur][slot(r0, 1) + q]; a[i][3] = As[cur][slot(r0 + 8, 1) + q];
      }
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        const int c = wn * (NT * 8) + j * 8 + g;
        b[j][0] = Bs[cur][slot(c, 0) + q]; b[j][1] = Bs[cur][slot(c, 1) + q];
      }
#pragma unroll
      for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int j = 0; j < NT; ++j) mma_s8(acc[i][j], a[i], b[j]);
      /* the other buffer was last read before the previous barrier: free to fill */
      if (s + 1 < STEPS) STASH(cur ^ 1);
      __syncthreads();
    }
#undef FETCH
#undef STASH
#pragma unroll
    for (int i = 0; i < MT; ++i) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const i64 p = p0 + wm * (MT * 16) + i * 16 + g + h * 8;
        if (p >= MMA_P) continue;
        i64 r = p;
        const i64 ow = r % OW; r /= OW;
        const i64 oh = r % OH;
        const i64 n = r / OH;
#pragma unroll
        for (int j = 0; j < NT; ++j) {
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int oc = n0 + wn * (NT * 8) + j * 8 + q * 2 + e;
            if (oc < MMA_M)
              finish(acc[i][j][h * 2 + e], oc, n, oh, ow, xz, base, colsum, xs, ws, ys, yzp,
                     res, y);
          }
        }
      }
    }
  }
}
"""


def mma_candidate(ctx: BindContext, source: str, packed: np.ndarray, pixels: int, m: int,
                  args: list[Any]) -> Candidate | None:
    """The tensor-core candidate over qconv.py's specialised ``source`` (its defines and
    epilogue) and kernel arguments (the weights, ``args[1]``, are replaced by this
    kernel's layout); ``packed`` is ``[1][kh][kw][C][M]`` within int8. None where NVRTC
    refuses it (a note says why)."""
    _, kh, kw, c, _ = packed.shape
    bn = 128 if m % 128 == 0 else 64
    warps_m, warps_n = (2, 4) if bn == 128 else (4, 2)
    pblocks, nblocks = -(-pixels // BM), -(-m // bn)
    weights = np.ascontiguousarray(packed[0].astype(np.int8).transpose(3, 0, 1, 2))
    values = {"BM": BM, "BN": bn, "WARPS_M": warps_m, "MT": BM // warps_m // 16,
              "NT": bn // warps_n // 8, "PBLOCKS": pblocks, "NBLOCKS": nblocks,
              "MMA_P": pixels, "MMA_M": m, "MMA_C": c, "KTOT": kh * kw * c,
              "CHUNKS": c // 32, "STEPS": kh * kw * (c // 32)}
    mine = list(args)
    mine[1] = np.uint64(ctx.upload(weights))
    try:
        launch = ctx.kernel_launch(defines(values) + source + _MMA, "qconv_mma",
                                   pblocks * nblocks * THREADS, mine, block=THREADS)
    except Exception as e:  # noqa: BLE001  (an NVRTC refusal: the direct kernel still runs)
        ctx.notes.append(f"int8 tensor-core convolution not built: {e}")
        return None
    return Candidate("nvrtc_mma", launch)
