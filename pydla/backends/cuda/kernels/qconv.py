"""QConv on the GPU (QLinearConv, ConvInteger and folded DQ→Conv→[Add]→[Relu/Clip]→Q
layers), 1-D and 2-D: exact int32 accumulation with ``__dp4a``, then the CPU reference
kernel's output arithmetic step for step (``qgemm.py``'s, which follows
``pydla.backends.cpu.kernels.qlinear_reference``), so the outputs match it bit for bit.

Why not cuDNN: its int8 convolutions read int8 and write int8 (or float) only, with its own
rounding of the scale; the exact int32 accumulator with onnxruntime's requantization (float32
product, round half to even, per-channel scales, an 8-bit residual at its own scale) needs
our own epilogue, so the whole layer is one NVRTC kernel.

One thread computes ``OCB`` consecutive output channels of one output pixel; consecutive
threads take consecutive channel blocks of the same pixel, so they read the same input words
and neighbouring weight words, and write neighbouring bytes (channels-last outputs).
The weights are repacked at bind as ``[group][kh][kw][c][m]`` (m the output channel in its
group, fastest), offset by their zero points (``w' = w - w_zp``). Two inner loops:

- ``dp4a``: channels contiguous in the input (channels-last rank-4 activations), C/group and
  the input's pixel strides multiples of 4 and ``w'`` within int8: four channels per
  ``__dp4a`` of the input bytes (uint8 ones shifted to int8 by xor 0x80) with 4 packed
  weights. Padding reads the zero point (a real zero), shifted the same way.
- ``bytes``: channels contiguous but C/group not a multiple of 4 (a stem's 3 colours):
  the same words gathered byte by byte, weights past C/group zero.
- ``scalar`` (any other layout, depthwise, weights offset beyond int8): one multiply-add
  per channel, ``w'`` as int16.

With ``OFF`` the shift (128 for uint8 on the dp4a path, else 0) and ``x_zp`` the activation
zero point (read at run time): ``Σ (x - x_zp)·w' = Σ (x - OFF)·w' + (OFF - x_zp)·Σ w'``,
``Σ w'`` per output channel computed at bind (``colsum``); wrapping int32 arithmetic, as
the CPU's.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pydla.backends.cuda.codegen import defines, f32, storage_type
from pydla.backends.cuda.context import BindContext
from pydla.backends.cuda.kernels.qconv_mma import mma_candidate
from pydla.backends.cuda.kernels.qgemm import (
    _INT_RANGES,
    BIAS,
    RESIDUAL,
    W_SCALE,
    W_ZP,
    X_SCALE,
    X_ZP,
    Y_SCALE,
    Y_ZP,
    W,
    X,
    _elements,
    _input,
)
from pydla.backends.cuda.layout import broadcast_strides
from pydla.backends.cuda.registry import Candidate, kernel
from pydla.dtypes import DType
from pydla.errors import KernelError
from pydla.loadable.program import LayerInfo
from pydla.ops import QUANTIZED_INPUTS

EPILOGUE = r"""
__device__ __forceinline__ float clampf(float v, float lo, float hi) {
  return v < lo ? lo : (v > hi ? hi : v);  /* NaN stays NaN, as np.clip */
}
/* a folded activation's real bound in the quantized domain, as QuantizeLinear rounds it */
__device__ __forceinline__ float qbound(float bound, float ys, float zp) {
  return clampf(rintf(bound / ys) + zp, QMIN, QMAX);
}
/* output channel oc of pixel (n, oh, ow) from its raw sum acc = Σ (x - OFF)·w' */
__device__ __forceinline__ void finish(int acc, int oc, i64 n, i64 oh, i64 ow, int xz,
    const int* __restrict__ base, const int* __restrict__ colsum,
    const TXS* __restrict__ xs, const TWS* __restrict__ ws, const TYS* __restrict__ ys,
    const TYZ* __restrict__ yzp, const TR* __restrict__ res, TY* __restrict__ y) {
  const int a = (int)((unsigned)acc + (unsigned)base[oc] - (unsigned)xz * (unsigned)colsum[oc]);
  const i64 yo = n * YSN + oc * YSC + oh * YSH + ow * YSW;
#if OUT_INT32
  y[yo] = a;
#else
  const i64 ro = n * RSN + oc * RSC + oh * RSH + ow * RSW;
  const float xsv = HAS_XS ? (float)ld(xs) : 1.f;
  const float mult = __fmul_rn(xsv, (float)ld(ws + (WS_CHANNELS ? oc : 0)));
#if HAS_YS
  const float ysv = (float)ld(ys);
  const float zp = HAS_YZP ? (float)ld(yzp) : 0.f;
  float q = __fmul_rn((float)a, __fdiv_rn(mult, ysv));
  if (HAS_RES) q = __fadd_rn(q, __fmul_rn((float)ld(res + ro) - RZP, __fdiv_rn(RSCALE, ysv)));
  q = rintf(q) + zp;
  q = clampf(q, HAS_CLIP_LO ? fmaxf(QMIN, qbound(CLIP_LO, ysv, zp)) : QMIN,
             HAS_CLIP_HI ? fminf(QMAX, qbound(CLIP_HI, ysv, zp)) : QMAX);
#if OUT_FLOAT
  st(y + yo, __fmul_rn(q - zp, ysv));
#else
  st(y + yo, (TY)f2i32(q));
#endif
#else
  float real = __fmul_rn((float)a, mult);
  if (HAS_RES) real = __fadd_rn(real, (float)ld(res + ro));
  if (HAS_CLIP_LO) real = real < CLIP_LO ? CLIP_LO : real;
  if (HAS_CLIP_HI) real = real > CLIP_HI ? CLIP_HI : real;
  st(y + yo, real);
#endif
#endif
}
"""

_DIRECT = r"""
__device__ __forceinline__ int dot(int x, int w, int acc) {
#if DP4A || PACKED
  return __dp4a(x, w, acc);
#else
  return acc + x * w;
#endif
}
extern "C" __global__ void qconv(const TX* __restrict__ x, const WT* __restrict__ w,
    const int* __restrict__ base, const int* __restrict__ colsum,
    const TXZ* __restrict__ xzp, const TXS* __restrict__ xs, const TWS* __restrict__ ws,
    const TYS* __restrict__ ys, const TYZ* __restrict__ yzp, const TR* __restrict__ res,
    TY* __restrict__ y) {
  const int xz = HAS_XZP ? (int)ld(xzp) : 0;
#if DP4A || PACKED
  const int pad = (int)(((unsigned)(xz - OFF) & 0xffu) * 0x01010101u);
#else
  const int pad = xz;
#endif
  for (i64 e = blockIdx.x * (i64)blockDim.x + threadIdx.x; e < TOTAL;
       e += (i64)gridDim.x * blockDim.x) {
    i64 r = e;
    const int ob = (int)(r % OBLOCKS); r /= OBLOCKS;
    const i64 ow = r % OW; r /= OW;
    const i64 oh = r % OH;
    const i64 n = r / OH;
    const int oc0 = ob * OCB;
    const int g = oc0 / MG;
    int acc[OCB];
#pragma unroll
    for (int j = 0; j < OCB; ++j) acc[j] = 0;
    for (int kh = 0; kh < KH; ++kh) {
      const i64 ih = oh * SH - PT + kh * DH;
      const bool row_in = ih >= 0 && ih < IH;
      for (int kw = 0; kw < KW; ++kw) {
        const i64 iw = ow * SW - PL + kw * DW;
        const bool inside = row_in && iw >= 0 && iw < IW;
        const TX* xp = x + n * XSN + ih * XSH + iw * XSW + (i64)g * CG * XSC;
        const WT* wp = w + ((i64)(g * KH + kh) * KW + kw) * CW * MG + (oc0 - g * MG);
        for (int c = 0; c < CW; ++c) {
#if DP4A
          const int xv = inside ? (*(const int*)(xp + 4 * c) ^ FLIPWORD) : pad;
#elif PACKED
          /* C/group not a multiple of 4: the word's bytes past it meet zero weights */
          int xv = pad;
          if (inside) {
            unsigned u = 0;
#pragma unroll
            for (int b = 0; b < 4; ++b)
              if (4 * c + b < CG)
                u |= ((unsigned)(unsigned char)ld(xp + 4 * c + b) ^ (FLIPWORD & 0xffu)) << (8 * b);
            xv = (int)u;
          }
#else
          const int xv = inside ? (int)ld(xp + (i64)c * XSC) : pad;
#endif
          const WT* wc = wp + (i64)c * MG;
#pragma unroll
          for (int j = 0; j < OCB; ++j) acc[j] = dot(xv, (int)wc[j], acc[j]);
        }
      }
    }
#pragma unroll
    for (int j = 0; j < OCB; ++j)
      finish(acc[j], oc0 + j, n, oh, ow, xz, base, colsum, xs, ws, ys, yzp, res, y);
  }
}
"""


def _const(ctx: BindContext, layer: LayerInfo, i: int, what: str) -> np.ndarray | None:
    index = layer.inputs[i] if i < len(layer.inputs) else -1
    if index < 0:
        return None
    if not ctx.is_weight(index):
        raise KernelError(layer.name, layer.op, f"{what} computed at run time: the CUDA int8 "
                          "convolution repacks it at bind and needs a constant")
    return np.asarray(ctx.host(index))


def pack_weights(w: np.ndarray, w_zp: np.ndarray | None, group: int
                 ) -> tuple[np.ndarray, np.ndarray, bool]:
    """(``w - w_zp`` as ``[group][kh][kw][C/group][M/group]``, int32 ``Σ`` of it per output
    channel, whether it fits int8); ``w`` is (M, C/group, kh, kw) int8/uint8."""
    m = w.shape[0]
    offset = w.astype(np.int32)
    if w_zp is not None:
        offset -= w_zp.astype(np.int32).reshape((-1,) + (1,) * (w.ndim - 1)) \
            if w_zp.size > 1 else int(w_zp.reshape(-1)[0])
    colsum = offset.reshape(m, -1).sum(axis=1, dtype=np.int64).astype(np.int32)
    mg, cg, kh, kw = m // group, w.shape[1], w.shape[2], w.shape[3]
    packed = offset.reshape(group, mg, cg, kh, kw).transpose(0, 3, 4, 2, 1)
    fits = bool(packed.size == 0 or (packed.min() >= -128 and packed.max() <= 127))
    return np.ascontiguousarray(packed), colsum, fits


def dp4a_words(packed: np.ndarray) -> np.ndarray:
    """``[g][kh][kw][C/group][m]`` int8-range values → ``[g][kh][kw][C/group/4][m]`` int32,
    four consecutive channels per word (lowest byte first, as ``__dp4a`` pairs them with
    the input's bytes)."""
    g, kh, kw, cg, mg = packed.shape
    b = packed.astype(np.int8).reshape(g, kh, kw, cg // 4, 4, mg).transpose(0, 1, 2, 3, 5, 4)
    return np.ascontiguousarray(b).view(np.int32).reshape(g, kh, kw, cg // 4, mg)


def _block(mg: int, widest: int) -> int:
    for ocb in (8, 4, 2, 1):
        if ocb <= widest and mg % ocb == 0:
            return ocb
    return 1


@kernel("QConv")
def bind_qconv(ctx: BindContext, layer: LayerInfo) -> list[Candidate]:
    where, op = layer.name, layer.op
    p = [_input(ctx, layer, i) for i in range(len(QUANTIZED_INPUTS))]
    x, y = p[X], ctx.place(layer.outputs[0])
    if x is None or p[W] is None or len(x.shape) not in (3, 4) or len(y.shape) != len(x.shape):
        raise KernelError(where, op, f"needs a 1-D or 2-D image and weights; got x "
                          f"{x and x.shape}, output {y.shape} (3-D int8 convolutions run on "
                          "the CPU only)")
    w = _const(ctx, layer, W, "the weights")
    assert w is not None
    w_zp = _const(ctx, layer, W_ZP, "w_zero_point")
    bias = _const(ctx, layer, BIAS, "the bias")
    attrs = layer.attrs
    group = int(attrs.get("group", 1))
    nd = len(x.shape) - 2
    strides, dilations, pads = list(attrs["strides"]), list(attrs["dilations"]), \
        list(attrs["pads"])
    batch, channels = x.shape[:2]
    m = int(w.shape[0])
    if w.ndim != nd + 2 or channels != w.shape[1] * group or m % group or \
            y.shape[:2] != (batch, m):
        raise KernelError(where, op, f"x {x.shape}, weights {w.shape} (group {group}) and "
                          f"the output {y.shape} do not agree")
    # 1-D as 2-D with a unit height
    in_hw = (1, x.shape[2]) if nd == 1 else x.shape[2:]
    out_hw = (1, y.shape[2]) if nd == 1 else y.shape[2:]
    k_hw = (1, w.shape[2]) if nd == 1 else w.shape[2:]
    w4 = w.reshape(m, w.shape[1], *k_hw)
    if nd == 1:
        strides, dilations, pads = [1, *strides], [1, *dilations], [0, pads[0], 0, pads[1]]
    natural = [(i + pads[d] + pads[d + 2] - (k - 1) * dl - 1) // s + 1 for d, (i, k, dl, s)
               in enumerate(zip(in_hw, k_hw, dilations, strides))]
    if natural != list(out_hw):
        raise KernelError(where, op, f"the output {y.shape} is not what x {x.shape} with "
                          f"kernel {tuple(w.shape[2:])}, strides, pads and dilations {dict(attrs)} "
                          "give")
    for i, what in ((X_SCALE, "x_scale"), (X_ZP, "x_zero_point"), (Y_SCALE, "y_scale"),
                    (Y_ZP, "y_zero_point")):
        if p[i] is not None and p[i].size != 1:  # type: ignore[union-attr]
            raise KernelError(where, op, f"{what} must have one element")
    if x.dtype not in _INT_RANGES or w.dtype not in (np.int8, np.uint8):
        raise KernelError(where, op, f"reads int8/uint8 activations and weights; got "
                          f"{x.dtype.name.lower()} and {w.dtype}")
    out_int32 = y.dtype is DType.INT32
    if not out_int32 and (p[X_SCALE] is None or p[W_SCALE] is None):
        raise KernelError(where, op, "a scaled output needs x_scale and w_scale")
    if w_zp is not None and w_zp.size not in (1, m):
        raise KernelError(where, op, f"w_zero_point has {w_zp.size} elements; expected 1 or "
                          f"{m}")
    if bias is not None and (bias.dtype != np.int32 or bias.size not in (1, m)):
        raise KernelError(where, op, f"the bias must be int32 with 1 or {m} elements; got "
                          f"{bias.dtype} {bias.shape}")
    has_ys = p[Y_SCALE] is not None
    if y.dtype in _INT_RANGES:
        qtype = y.dtype
    elif has_ys:
        qtype = p[Y_ZP].dtype if p[Y_ZP] is not None else DType.UINT8  # type: ignore[union-attr]
    else:
        qtype = DType.UINT8  # unused: no requantization
    if qtype not in _INT_RANGES:
        raise KernelError(where, op, f"requantizes to int8/uint8, not {qtype.name.lower()}")

    packed, colsum, fits = pack_weights(w4, w_zp, group)
    cg, mg = channels // group, m // group
    xs4 = (x.strides[0], x.strides[1], *((0, x.strides[2]) if nd == 1 else x.strides[2:]))
    ys4 = (y.strides[0], y.strides[1], *((0, y.strides[2]) if nd == 1 else y.strides[2:]))
    # whole aligned words of 4 channels at every pixel
    dp4a = fits and xs4[1] == 1 and cg % 4 == 0 and x.ptr % 4 == 0 and \
        all(s % 4 == 0 for s in (xs4[0], xs4[2], xs4[3]))
    # channels contiguous but not in aligned words (a stem's 3): gathered bytes, zero
    # weights past C/group; depthwise (1 channel) gains nothing from a word
    bytewise = not dp4a and fits and xs4[1] == 1 and cg >= 3
    shift = 128 if (dp4a or bytewise) and x.dtype is DType.UINT8 else 0
    if dp4a:
        weights, cw, wt = dp4a_words(packed), cg // 4, "int"
    elif bytewise:
        cw = -(-cg // 4)
        whole = np.zeros(packed.shape[:3] + (4 * cw, mg), packed.dtype)
        whole[:, :, :, :cg] = packed
        weights, wt = dp4a_words(whole), "int"
    else:
        weights, cw, wt = packed.astype(np.int16), cg, "short"
    ocb = _block(mg, 8)
    bias_m = np.zeros(m, np.int64) if bias is None else \
        np.broadcast_to(bias.reshape(-1).astype(np.int64), (m,))
    base = ((bias_m + shift * colsum.astype(np.int64) + 2**31) % 2**32 - 2**31).astype(np.int32)

    clip = attrs.get("clip")
    lo, hi = (float(clip[0]), float(clip[1])) if clip else (-np.inf, np.inf)
    residual = attrs.get("residual") or {}
    res = p[RESIDUAL]
    try:
        rs = broadcast_strides(res, y.shape) if res is not None else (0,) * len(y.shape)
    except ValueError as e:
        raise KernelError(where, op, f"residual: {e}") from None
    rs4 = (rs[0], rs[1], *((0, rs[2]) if nd == 1 else rs[2:]))

    def t(i: int, default: str = "float") -> str:
        return storage_type(p[i].dtype, where) if p[i] is not None else default  # type: ignore[union-attr]

    total = batch * out_hw[0] * out_hw[1] * (m // ocb)
    values: dict[str, Any] = {
        "DP4A": int(dp4a), "PACKED": int(bytewise), "OFF": shift,
        "FLIPWORD": "0x80808080" if shift else "0",
        "TX": storage_type(x.dtype, where), "WT": wt, "TXZ": t(X_ZP, "unsigned char"),
        "TXS": t(X_SCALE), "TWS": t(W_SCALE), "TYS": t(Y_SCALE),
        "TYZ": t(Y_ZP, "unsigned char"), "TR": t(RESIDUAL), "TY": storage_type(y.dtype, where),
        "TOTAL": total, "OBLOCKS": m // ocb, "OCB": ocb, "MG": mg, "CG": cg, "CW": cw,
        "OH": out_hw[0], "OW": out_hw[1], "IH": in_hw[0], "IW": in_hw[1],
        "KH": k_hw[0], "KW": k_hw[1], "SH": strides[0], "SW": strides[1],
        "DH": dilations[0], "DW": dilations[1], "PT": pads[0], "PL": pads[1],
        "XSN": xs4[0], "XSC": xs4[1], "XSH": xs4[2], "XSW": xs4[3],
        "YSN": ys4[0], "YSC": ys4[1], "YSH": ys4[2], "YSW": ys4[3],
        "RSN": rs4[0], "RSC": rs4[1], "RSH": rs4[2], "RSW": rs4[3],
        "HAS_XZP": int(p[X_ZP] is not None), "HAS_XS": int(p[X_SCALE] is not None),
        "WS_CHANNELS": int(_elements(layer, p[W_SCALE], "w_scale", (m,))),
        "OUT_INT32": int(out_int32), "OUT_FLOAT": int(y.dtype not in _INT_RANGES),
        "HAS_YS": int(has_ys), "HAS_YZP": int(p[Y_ZP] is not None),
        "HAS_RES": int(res is not None),
        "RZP": f32(float(residual.get("zero_point", 0))),
        "RSCALE": f32(float(residual.get("scale", 1.0))),
        "QMIN": f32(_INT_RANGES[qtype][0]), "QMAX": f32(_INT_RANGES[qtype][1]),
        "HAS_CLIP_LO": int(np.isfinite(lo)), "HAS_CLIP_HI": int(np.isfinite(hi)),
        "CLIP_LO": f32(lo if np.isfinite(lo) else 0.0),
        "CLIP_HI": f32(hi if np.isfinite(hi) else 0.0)}
    if out_int32 and res is not None:
        raise KernelError(where, op, "an int32 (raw accumulator) output takes no residual")
    args = [np.uint64(v) for v in (
        x.ptr, ctx.upload(weights), ctx.upload(base), ctx.upload(colsum),
        *(q.ptr if q is not None else 0 for q in (p[X_ZP], p[X_SCALE], p[W_SCALE], p[Y_SCALE],
                                                   p[Y_ZP], res)), y.ptr)]
    source = defines(values) + EPILOGUE
    candidates = []
    # tensor cores: whole 32-channel chunks, 16-byte aligned at every pixel
    if dp4a and group == 1 and cg % 32 == 0 and x.ptr % 16 == 0 and \
            all(s % 16 == 0 for s in (xs4[0], xs4[2], xs4[3])) and ctx.wants("nvrtc_mma"):
        mma = mma_candidate(ctx, source, packed, batch * out_hw[0] * out_hw[1], m, args)
        if mma is not None:
            candidates.append(mma)
    name = f"nvrtc_{'dp4a' if dp4a else 'bytes' if bytewise else 'scalar'}"
    if ctx.wants(name) or not candidates:
        candidates.append(Candidate(name, ctx.kernel_launch(source + _DIRECT, "qconv", total,
                                                            args)))
    return candidates
