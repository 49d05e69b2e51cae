"""3-D convolution on the GPU: a direct kernel, one thread per output element (grid-stride,
in the output's memory order), any groups, strides, pads and dilations, bias and epilogue
fused. Rank-5 tensors are row-major ([N, C, D, H, W]); the kernel addresses them through
their strides. ``conv.py`` binds a 3-D convolution that is a 2-D one in disguise (a depth
of 1 under a kernel depth of 1: RivaGAN's 1×11×11 filters) through every 2-D candidate
(cuDNN included) instead, and this kernel stays as its fallback.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pydla.backends.cuda.codegen import c_type
from pydla.backends.cuda.context import BindContext
from pydla.backends.cuda.kernels.epilogue import Epilogue
from pydla.backends.cuda.layout import Placement
from pydla.backends.cuda.registry import Candidate
from pydla.loadable.program import LayerInfo

_DIRECT3D = r"""
extern "C" __global__ void direct3d(const TX* __restrict__ x, const TW* __restrict__ w,
    const TB* __restrict__ b, TY* __restrict__ y EXTRA_PARAMS) {
  const i64 total = (i64)N * K * OD * OH * OW;
  for (i64 t = blockIdx.x * (i64)blockDim.x + threadIdx.x; t < total;
       t += (i64)gridDim.x * blockDim.x) {
    i64 p = t;
    const int ow = (int)(p % OW); p /= OW;
    const int oh = (int)(p % OH); p /= OH;
    const int od = (int)(p % OD); p /= OD;
    const int k = (int)(p % K);
    const int n = (int)(p / K);
    const int g = k / (K / G);
    float acc = HAS_BIAS ? ld(b + k) : 0.f;
    for (int c = 0; c < CG; ++c) {
      const TX* xc = x + (i64)n * XN + (i64)(g * CG + c) * XC;
      const TW* wc = w + ((i64)k * CG + c) * KD * KH * KW;
      for (int q = 0; q < KD; ++q) {
        const int id = od * SD - PD + q * DD;
        if (id < 0 || id >= D) continue;
        for (int r = 0; r < KH; ++r) {
          const int ih = oh * SH - PH + r * DH;
          if (ih < 0 || ih >= H) continue;
          for (int s = 0; s < KW; ++s) {
            const int iw = ow * SW - PW + s * DW;
            if (iw < 0 || iw >= W) continue;
            acc = fmaf(ld(xc + (i64)id * XD + (i64)ih * XH + (i64)iw * XW),
                       ld(wc + (q * KH + r) * KW + s), acc);
          }
        }
      }
    }
    const float a = acc;
    EPILOGUE
    st(y + (i64)n * YN + (i64)k * YC + (i64)od * YD + (i64)oh * YH + (i64)ow * YW, RESULT);
  }
}
"""


def direct3d_candidate(ctx: BindContext, layer: LayerInfo, x: Placement, out: Placement,
                       weights: np.ndarray, w_dtype: Any, bias: Placement | None,
                       epilogue: Epilogue, fallback: bool) -> Candidate:
    """The direct kernel over [N, C, D, H, W] input and weights [K, C/G, KD, KH, KW]."""
    from pydla.backends.cuda.kernels.conv import _specialise  # conv.py imports this module

    attrs = layer.attrs
    where = layer.name
    pads = [int(p) for p in attrs.get("pads", [0] * 6)]
    strides = [int(s) for s in attrs.get("strides", [1, 1, 1])]
    dilations = [int(d) for d in attrs.get("dilations", [1, 1, 1])]
    groups = int(attrs.get("group", 1))
    n, c, d, h, w = x.shape
    _, k, od, oh, ow = out.shape
    kd, kh, kw = weights.shape[2:]
    xs, ys = x.strides, out.strides
    values = {"TX": c_type(x.dtype, where), "TW": c_type(w_dtype, where),
              "TB": c_type(bias.dtype if bias is not None else w_dtype, where),
              "TY": c_type(out.dtype, where), "N": n, "D": d, "H": h, "W": w, "K": k,
              "OD": od, "OH": oh, "OW": ow, "KD": kd, "KH": kh, "KW": kw, "G": groups,
              "CG": c // groups, "SD": strides[0], "SH": strides[1], "SW": strides[2],
              "PD": pads[0], "PH": pads[1], "PW": pads[2], "DD": dilations[0],
              "DH": dilations[1], "DW": dilations[2], "HAS_BIAS": int(bias is not None),
              "XN": xs[0], "XC": xs[1], "XD": xs[2], "XH": xs[3], "XW": xs[4],
              "YN": ys[0], "YC": ys[1], "YD": ys[2], "YH": ys[3], "YW": ys[4]}
    source = _specialise(_DIRECT3D, values, epilogue, "a", ["n", "k", "od", "oh", "ow"])
    w_ptr = ctx.upload(np.ascontiguousarray(weights))
    args = [np.uint64(x.ptr), np.uint64(w_ptr), np.uint64(bias.ptr if bias is not None else 0),
            np.uint64(out.ptr), *epilogue.args]
    return Candidate("direct3d", ctx.kernel_launch(source, "direct3d", out.size, args,
                                                   lazy=fallback), fallback=fallback)
