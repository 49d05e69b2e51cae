"""2-D ConvTranspose (1-D as 2-D of height 1), channels-last, bias and epilogue fused: the
backend's own kernel in gather form (a thread per output element sums the input pixels
whose window covers it). Weights [C, K/G, R, S] are stored [K, R, S, C/G] so a thread reads
contiguous channels."""

from __future__ import annotations

from typing import Any

import numpy as np

from pydla.backends.cuda.codegen import c_type
from pydla.backends.cuda.context import BindContext
from pydla.backends.cuda.kernels.conv import _specialise, height_one
from pydla.backends.cuda.kernels.epilogue import make_epilogue
from pydla.backends.cuda.layout import NHWC, Placement
from pydla.backends.cuda.registry import Candidate, kernel
from pydla.errors import KernelError
from pydla.loadable.program import LayerInfo

_GATHER = r"""
extern "C" __global__ void deconv(const TX* __restrict__ x, const TW* __restrict__ w,
    const TB* __restrict__ b, TY* __restrict__ y EXTRA_PARAMS) {
  const i64 total = (i64)N * OH * OW * K;
  for (i64 t = blockIdx.x * (i64)blockDim.x + threadIdx.x; t < total;
       t += (i64)gridDim.x * blockDim.x) {
    const int k = (int)(t % K);
    i64 p = t / K;
    const int ow = (int)(p % OW); p /= OW;
    const int oh = (int)(p % OH);
    const int n = (int)(p / OH);
    const int g = k / (K / G);
    float acc = HAS_BIAS ? ld(b + k) : 0.f;
    for (int r = 0; r < R; ++r) {
      const int th = oh + PH - r * DH;
      if (th < 0 || th % SH) continue;
      const int ih = th / SH;
      if (ih >= H) continue;
      for (int s = 0; s < S; ++s) {
        const int tw = ow + PW - s * DW;
        if (tw < 0 || tw % SW) continue;
        const int iw = tw / SW;
        if (iw >= W) continue;
        const TX* xp = x + (((i64)n * H + ih) * W + iw) * C + g * CG;
        const TW* wp = w + (((i64)k * R + r) * S + s) * CG;
        for (int c = 0; c < CG; ++c) acc = fmaf(ld(xp + c), ld(wp + c), acc);
      }
    }
    const float a = acc;
    EPILOGUE
    st(y + t, RESULT);
  }
}
"""


@kernel("ConvTranspose")
def bind_conv_transpose(ctx: BindContext, layer: LayerInfo) -> list[Candidate]:
    epi = layer.attrs.get("epilogue") or {"program": [], "inputs": 0}
    n_extra = int(epi["inputs"])
    own = layer.inputs[:len(layer.inputs) - n_extra]
    extras = [ctx.place(i) for i in layer.inputs[len(own):]]
    x, out = ctx.place(own[0]), ctx.place(layer.outputs[0])
    if not ctx.is_weight(own[1]):
        raise KernelError(layer.name, layer.op, "the CUDA backend needs constant weights")
    weights = ctx.host(own[1])  # [C, K/G, R, S] ([C, K/G, S] in 1-D)
    w_dtype = ctx.program.tensors[own[1]].dtype
    bias = ctx.place(own[2]) if len(own) > 2 and own[2] >= 0 else None
    program = list(epi["program"])
    a = layer.attrs
    pads = [int(p) for p in a.get("pads") or [0] * (2 * (len(x.shape) - 2))]
    strides = [int(v) for v in a.get("strides") or [1] * (len(x.shape) - 2)]
    dilations = [int(v) for v in a.get("dilations") or [1] * (len(x.shape) - 2)]
    if len(x.shape) == 3:  # 1-D: height 1, through channels-last staging copies
        return height_one(ctx, layer, x, out, extras, lambda x4, out4, extras4: _deconv_2d(
            ctx, layer, x4, out4, weights[:, :, None, :], w_dtype, bias, program, extras4,
            [0, pads[0], 0, pads[1]], [1, strides[0]], [1, dilations[0]]))
    return _deconv_2d(ctx, layer, x, out, weights, w_dtype, bias, program, extras, pads,
                      strides, dilations)


def _deconv_2d(ctx: BindContext, layer: LayerInfo, x: Placement, out: Placement,
               weights: np.ndarray, w_dtype: Any, bias: Placement | None, program: list[Any],
               extras: list[Placement], pads: list[int], strides: list[int],
               dilations: list[int]) -> list[Candidate]:
    if len(x.shape) != 4 or x.layout != NHWC or out.layout != NHWC:
        raise KernelError(layer.name, layer.op, "the CUDA backend runs 1-D and 2-D "
                          "channels-last transposed convolutions only")
    c, kg, r, s = weights.shape
    groups = int(layer.attrs.get("group", 1))
    n, _, h, w = x.shape
    _, k, oh, ow = out.shape
    if c != x.shape[1] or k != kg * groups or c % groups:
        raise KernelError(layer.name, layer.op, f"weights {weights.shape} do not fit input "
                          f"{x.shape} and output {out.shape} in {groups} groups")
    cg = c // groups
    # [G, CG, KG, R, S] → [G, KG, R, S, CG] = [K, R, S, CG]
    krsc = np.ascontiguousarray(weights.reshape(groups, cg, kg, r, s).transpose(0, 2, 3, 4, 1)
                                .reshape(k, r, s, cg))
    w_ptr = ctx.upload(krsc)
    epilogue = make_epilogue(program, extras, out, layer.name)
    values = {"TX": c_type(x.dtype, layer.name), "TW": c_type(w_dtype, layer.name),
              "TB": c_type(bias.dtype if bias is not None else w_dtype, layer.name),
              "TY": c_type(out.dtype, layer.name), "N": n, "C": c, "H": h, "W": w, "K": k,
              "OH": oh, "OW": ow, "R": r, "S": s, "G": groups, "CG": cg,
              "SH": strides[0], "SW": strides[1], "PH": pads[0], "PW": pads[1],
              "DH": dilations[0], "DW": dilations[1], "HAS_BIAS": int(bias is not None)}
    source = _specialise(_GATHER, values, epilogue, "a", ["n", "k", "oh", "ow"])
    args = [np.uint64(x.ptr), np.uint64(w_ptr), np.uint64(bias.ptr if bias is not None else 0),
            np.uint64(out.ptr), *epilogue.args]
    return [Candidate("gather", ctx.kernel_launch(source, "deconv", n * oh * ow * k, args))]
