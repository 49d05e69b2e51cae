"""2-D convolution, NHWC, with bias and epilogue (1-D: through height-1 staging copies;
3-D: ``conv3d.py``, or as 2-D through staging copies when the depth is trivial).

Candidates per layer:
- ``cudnn/p``: a cuDNN frontend graph running the convolution, the bias and the first p
  epilogue steps; an NVRTC kernel runs the rest in place;
- ``depthwise``: the backend's own kernel for one filter per channel (cuDNN's depthwise
  engines are slow in NHWC), the whole epilogue fused, 16-byte channel vectors;
- ``direct``: a plain loop over the window, any group count; the fallback when nothing
  else builds.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from pydla.backends.cuda.codegen import c_type
from pydla.backends.cuda.context import BindContext, vec_width
from pydla.backends.cuda.kernels.cudnn_graphs import (
    ConvGeometry,
    conv_graph,
    expand_relu_clip,
    fusable_prefix,
    split_is_valid,
    suffix_program,
)
from pydla.backends.cuda.kernels.epilogue import Epilogue, make_epilogue
from pydla.backends.cuda.kernels.pointwise import Operand, copy_program, elementwise_launch
from pydla.backends.cuda.layout import NHWC, Placement
from pydla.backends.cuda.registry import Candidate, Launch, chain, kernel
from pydla.errors import KernelError
from pydla.loadable.program import LayerInfo


def _geometry(layer: LayerInfo, rank: int) -> ConvGeometry:
    if rank != 4:
        raise KernelError(layer.name, layer.op, "the CUDA backend runs 2-D convolutions only")
    attrs = layer.attrs
    pads = [int(p) for p in attrs.get("pads", [0, 0, 0, 0])]
    return ConvGeometry((pads[0], pads[1]), (pads[2], pads[3]),
                        tuple(int(s) for s in attrs.get("strides", [1, 1])),  # type: ignore[arg-type]
                        tuple(int(d) for d in attrs.get("dilations", [1, 1])))  # type: ignore[arg-type]


def _suffix_launch(ctx: BindContext, program: Any, extras: list[Placement], out: Placement,
                   where: str) -> Launch:
    operands = [Operand(out.ptr, out.dtype, out.strides)]
    from pydla.backends.cuda.layout import broadcast_strides

    operands += [Operand(p.ptr, p.dtype, broadcast_strides(p, out.shape)) for p in extras]
    target = Operand(out.ptr, out.dtype, out.strides)
    return elementwise_launch(ctx, out.shape, out.physical_order(), operands, target, program,
                              where)


def cudnn_candidates(ctx: BindContext, layer: LayerInfo, x: Placement, w_ptr: int,
                     w_dims: list[int], w_strides: list[int], w_dtype: Any,
                     bias: Placement | None, program: list[Any], extras: list[Placement],
                     out: Placement, geometry: ConvGeometry) -> tuple[list[Candidate], list[str]]:
    """One candidate per epilogue split that cuDNN builds; also the reasons of failures."""
    found: list[Candidate] = []
    failures: list[str] = []
    if ctx.cudnn is None:
        return found, ["the cuDNN frontend is not installed"]
    program = expand_relu_clip(program, len(extras))
    top = fusable_prefix(program, extras, out)
    for p in range(top, -1, -1):
        if not split_is_valid(program, len(extras), p) or not ctx.wants(f"cudnn/{p}"):
            continue
        try:
            main = conv_graph(ctx, x, w_ptr, w_dims, w_strides, w_dtype, bias, program[:p],
                              extras, out, geometry)
        except Exception as e:  # noqa: BLE001  (cuDNN reports unsupported graphs many ways)
            failures.append(f"cudnn/{p}: {type(e).__name__}: {str(e)[:200]}")
            continue
        if p < len(program):
            rest = suffix_program(program, len(extras), p)
            main = chain(main, _suffix_launch(ctx, rest, extras, out, layer.name))
        found.append(Candidate(f"cudnn/{p}", main))
    return found, failures


_DEPTHWISE = r"""
extern "C" __global__ void depthwise(const TX* __restrict__ x, const TX* __restrict__ w,
    const TX* __restrict__ b, TY* __restrict__ y EXTRA_PARAMS) {
  const i64 total = (i64)N * OH * OW * (C / VEC);
  for (i64 t = blockIdx.x * (i64)blockDim.x + threadIdx.x; t < total;
       t += (i64)gridDim.x * blockDim.x) {
    const int cv = (int)(t % (C / VEC));
    i64 p = t / (C / VEC);
    const int ow = (int)(p % OW); p /= OW;
    const int oh = (int)(p % OH);
    const int n = (int)(p / OH);
    const int c0 = cv * VEC;
    float acc[VEC];
    if (HAS_BIAS) { ldv<TX, VEC>(b + c0, acc); }
    else {
#pragma unroll
      for (int j = 0; j < VEC; ++j) acc[j] = 0.f;
    }
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const int ih = oh * SH - PH + r * DH;
      if (ih < 0 || ih >= H) continue;
#pragma unroll
      for (int s = 0; s < S; ++s) {
        const int iw = ow * SW - PW + s * DW;
        if (iw < 0 || iw >= W) continue;
        float xv[VEC], wv[VEC];
        ldv<TX, VEC>(x + (((i64)n * H + ih) * W + iw) * C + c0, xv);
        ldv<TX, VEC>(w + (r * S + s) * C + c0, wv);
#pragma unroll
        for (int j = 0; j < VEC; ++j) acc[j] = fmaf(xv[j], wv[j], acc[j]);
      }
    }
    float res[VEC];
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      const int c = c0 + j;
      const float a = acc[j];
      EPILOGUE
      res[j] = RESULT;
    }
    stv<TY, VEC>(y + (((i64)n * OH + oh) * OW + ow) * C + c0, res);
  }
}
"""


def _specialise(template: str, values: dict[str, Any], epilogue: Epilogue, value: str,
                coords: list[str]) -> str:
    lines, result = epilogue.lines(value, coords)
    source = template.replace("EXTRA_PARAMS", "".join(", " + p for p in epilogue.params))
    source = source.replace("EPILOGUE", "\n      ".join(lines)).replace("RESULT", result)
    defines = "".join(f"#define {k} {v}\n" for k, v in values.items())
    undefs = "".join(f"#undef {k}\n" for k in values)
    return defines + source + undefs


def depthwise_source(x: Placement, out: Placement, r: int, s: int, geometry: ConvGeometry,
                     has_bias: bool, epilogue: Epilogue, where: str) -> tuple[str, int]:
    n, c, h, w = x.shape
    _, _, oh, ow = out.shape
    vec = vec_width(c, itemsize=x.dtype.itemsize)
    values = {"TX": c_type(x.dtype, where), "TY": c_type(out.dtype, where), "VEC": vec,
              "N": n, "C": c, "H": h, "W": w, "OH": oh, "OW": ow, "R": r, "S": s,
              "SH": geometry.stride[0], "SW": geometry.stride[1],
              "PH": geometry.pre_padding[0], "PW": geometry.pre_padding[1],
              "DH": geometry.dilation[0], "DW": geometry.dilation[1],
              "HAS_BIAS": int(has_bias)}
    source = _specialise(_DEPTHWISE, values, epilogue, "a", ["n", "c", "oh", "ow"])
    return source, n * oh * ow * (c // vec)


_DIRECT = r"""
extern "C" __global__ void direct(const TX* __restrict__ x, const TW* __restrict__ w,
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
      const int ih = oh * SH - PH + r * DH;
      if (ih < 0 || ih >= H) continue;
      for (int s = 0; s < S; ++s) {
        const int iw = ow * SW - PW + s * DW;
        if (iw < 0 || iw >= W) continue;
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


def direct_source(x: Placement, w_dtype: Any, bias: Placement | None, out: Placement, r: int,
                  s: int, groups: int, geometry: ConvGeometry, epilogue: Epilogue,
                  where: str) -> tuple[str, int]:
    n, c, h, w = x.shape
    _, k, oh, ow = out.shape
    has_bias = bias is not None
    values = {"TX": c_type(x.dtype, where), "TW": c_type(w_dtype, where),
              "TB": c_type(bias.dtype if bias is not None else w_dtype, where),
              "TY": c_type(out.dtype, where), "N": n, "C": c, "H": h, "W": w, "K": k,
              "OH": oh, "OW": ow, "R": r, "S": s, "G": groups, "CG": c // groups,
              "SH": geometry.stride[0], "SW": geometry.stride[1],
              "PH": geometry.pre_padding[0], "PW": geometry.pre_padding[1],
              "DH": geometry.dilation[0], "DW": geometry.dilation[1],
              "HAS_BIAS": int(has_bias)}
    source = _specialise(_DIRECT, values, epilogue, "a", ["n", "k", "oh", "ow"])
    return source, n * oh * ow * k


@kernel("Conv")
def bind_conv(ctx: BindContext, layer: LayerInfo) -> list[Candidate]:
    epi = layer.attrs.get("epilogue") or {"program": [], "inputs": 0}
    n_extra = int(epi["inputs"])
    own = layer.inputs[:len(layer.inputs) - n_extra]
    extras = [ctx.place(i) for i in layer.inputs[len(own):]]
    x, out = ctx.place(own[0]), ctx.place(layer.outputs[0])
    if not ctx.is_weight(own[1]):
        raise KernelError(layer.name, layer.op, "the CUDA backend needs constant weights")
    weights = ctx.host(own[1])
    w_dtype = ctx.program.tensors[own[1]].dtype
    bias = ctx.place(own[2]) if len(own) > 2 and own[2] >= 0 else None
    program = list(epi["program"])
    if len(x.shape) == 3:
        return _conv1d_candidates(ctx, layer, x, out, weights, w_dtype, bias, program, extras)
    if len(x.shape) == 5:
        return _conv3d_candidates(ctx, layer, x, out, weights, w_dtype, bias, program, extras)
    geometry = _geometry(layer, len(x.shape))
    return _conv2d_candidates(ctx, layer, x, out, weights, w_dtype, bias, program, extras,
                              geometry)


def _conv1d_candidates(ctx: BindContext, layer: LayerInfo, x: Placement, out: Placement,
                       weights: np.ndarray, w_dtype: Any, bias: Placement | None,
                       program: list[Any], extras: list[Placement]) -> list[Candidate]:
    attrs = layer.attrs
    pads = [int(p) for p in attrs.get("pads", [0, 0])]
    geometry = ConvGeometry((0, pads[0]), (0, pads[1]),
                            (1, int(attrs.get("strides", [1])[0])),
                            (1, int(attrs.get("dilations", [1])[0])))
    return height_one(ctx, layer, x, out, extras, lambda x4, out4, extras4: _conv2d_candidates(
        ctx, layer, x4, out4, weights[:, :, None, :], w_dtype, bias, program, extras4,
        geometry))


def _conv3d_candidates(ctx: BindContext, layer: LayerInfo, x: Placement, out: Placement,
                       weights: np.ndarray, w_dtype: Any, bias: Placement | None,
                       program: list[Any], extras: list[Placement]) -> list[Candidate]:
    """A 3-D convolution of depth 1 under a kernel depth of 1 is a 2-D one: every 2-D
    candidate through staging copies (the depth dropped), the direct 3-D kernel as the
    fallback; any other runs the direct 3-D kernel alone."""
    from pydla.backends.cuda.kernels.conv3d import direct3d_candidate

    attrs = layer.attrs
    pads = [int(p) for p in attrs.get("pads", [0] * 6)]
    flat = x.shape[2] == 1 and weights.shape[2] == 1 and pads[0] == pads[3] == 0
    epilogue = make_epilogue(program, extras, out, layer.name)
    direct = direct3d_candidate(ctx, layer, x, out, weights, w_dtype, bias, epilogue,
                                fallback=flat)
    if not flat:
        return [direct]
    geometry = ConvGeometry((pads[1], pads[2]), (pads[4], pads[5]),
                            tuple(int(s) for s in attrs.get("strides", [1, 1, 1])[1:]),  # type: ignore[arg-type]
                            tuple(int(d) for d in attrs.get("dilations", [1, 1, 1])[1:]))  # type: ignore[arg-type]

    def no_depth(p: Placement) -> Placement:  # [.., 1, H, W] → [.., H, W]: the same memory
        shape = p.shape[:-3] + p.shape[-2:] if len(p.shape) >= 3 else p.shape
        return Placement(p.ptr, shape, p.dtype, p.layout)

    return [*height_one(ctx, layer, x, out, extras, lambda x4, out4, extras4: _conv2d_candidates(
        ctx, layer, x4, out4, weights[:, :, 0], w_dtype, bias, program, extras4, geometry),
        view=no_depth), direct]


def height_one(ctx: BindContext, layer: LayerInfo, x: Placement, out: Placement,
               extras: list[Placement],
               bind_2d: Callable[[Placement, Placement, list[Placement]], list[Candidate]],
               view: Callable[[Placement], Placement] | None = None) -> list[Candidate]:
    """A 1-D layer as a 2-D one of height 1: the row-major [N, C, L] input is copied into a
    channels-last [N, C, 1, L] staging tensor, the 2-D candidates run, and their
    [N, K, 1, L'] result is copied back; extra epilogue inputs gain the unit height.
    ``view`` replaces that lift (a rank-5 tensor of depth 1 loses its depth instead)."""

    def lifted(p: Placement) -> Placement:  # [.., L] → [.., 1, L]: the same memory
        shape = p.shape[:-1] + (1,) + p.shape[-1:] if p.shape else p.shape
        return Placement(p.ptr, shape, p.dtype, p.layout)

    lift = view or lifted
    x4, out4 = lift(x), lift(out)
    x_stage = Placement(ctx.scratch(x.nbytes), x4.shape, x.dtype, NHWC)
    out_stage = Placement(ctx.scratch(out.nbytes), out4.shape, out.dtype, NHWC)
    copy_in = _copy(ctx, x4, x_stage, layer.name)
    copy_out = _copy(ctx, out_stage, out4, layer.name)
    inner = bind_2d(x_stage, out_stage, [lift(e) for e in extras])
    return [Candidate(c.name, chain(copy_in, c.launch, copy_out), c.fallback) for c in inner]


def _copy(ctx: BindContext, src: Placement, dst: Placement, where: str) -> Launch:
    return elementwise_launch(ctx, dst.shape, dst.physical_order(),
                              [Operand(src.ptr, src.dtype, src.strides)],
                              Operand(dst.ptr, dst.dtype, dst.strides),
                              copy_program(dst.dtype), where)


def _conv2d_candidates(ctx: BindContext, layer: LayerInfo, x: Placement, out: Placement,
                       weights: np.ndarray, w_dtype: Any, bias: Placement | None,
                       program: list[Any], extras: list[Placement],
                       geometry: ConvGeometry) -> list[Candidate]:
    if x.layout != NHWC or out.layout != NHWC:
        raise KernelError(layer.name, layer.op, "convolution tensors must be channels-last")
    k, cg, r, s = weights.shape
    groups = int(layer.attrs.get("group", 1))
    krsc = np.ascontiguousarray(weights.transpose(0, 2, 3, 1))
    w_ptr = ctx.upload(krsc)
    candidates, failures = cudnn_candidates(
        ctx, layer, x, w_ptr, [k, cg, r, s], [cg * r * s, 1, s * cg, cg], w_dtype, bias,
        program, extras, out, geometry)
    epilogue = make_epilogue(program, extras, out, layer.name)
    bias_ptr = np.uint64(bias.ptr if bias is not None else 0)
    c = x.shape[1]
    if groups == c == k and cg == 1 and (bias is None or bias.dtype is x.dtype) \
            and w_dtype is x.dtype and ctx.wants("depthwise"):
        rsc = ctx.upload(np.ascontiguousarray(weights.reshape(k, r * s).T))
        source, threads = depthwise_source(x, out, r, s, geometry, bias is not None,
                                           epilogue, layer.name)
        args = [np.uint64(x.ptr), np.uint64(rsc), bias_ptr, np.uint64(out.ptr), *epilogue.args]
        candidates.append(Candidate("depthwise", ctx.kernel_launch(source, "depthwise",
                                                                   threads, args)))
    source, threads = direct_source(x, w_dtype, bias, out, r, s, groups, geometry, epilogue,
                                    layer.name)
    args = [np.uint64(x.ptr), np.uint64(w_ptr), bias_ptr, np.uint64(out.ptr), *epilogue.args]
    candidates.append(Candidate("direct", ctx.kernel_launch(source, "direct", threads, args,
                                                            lazy=True), fallback=True))
    ctx.notes.extend(f"{layer.name}: {f}" for f in failures)
    return candidates
