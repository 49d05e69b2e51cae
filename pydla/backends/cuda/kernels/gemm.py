"""Gemm (Y = alpha·A·B + beta·C, then the epilogue).

Candidates:
- ``cudnn/p``: the GEMM as a 1×1 convolution over [M, K, 1, 1] in cuDNN (B constant and
  stored as the [N, K] filter, alpha folded into it, beta·C folded into the bias), with the
  epilogue split as for convolutions;
- ``warp``: one warp per output element, lanes striding over K (coalesced when both A's
  rows and B's columns are contiguous), everything fused; it wins for small M.
"""

from __future__ import annotations

import numpy as np

from pydla.backends.cuda.codegen import c_type
from pydla.backends.cuda.context import BindContext
from pydla.backends.cuda.kernels.conv import cudnn_candidates
from pydla.backends.cuda.kernels.cudnn_graphs import ConvGeometry
from pydla.backends.cuda.kernels.epilogue import make_epilogue
from pydla.backends.cuda.layout import LINEAR, Placement
from pydla.backends.cuda.registry import Candidate, kernel
from pydla.dtypes import to_compute, to_storage
from pydla.errors import KernelError
from pydla.loadable.program import LayerInfo

_WARP = r"""
extern "C" __global__ void gemm(const TA* __restrict__ a, const TB* __restrict__ b,
    const TC* __restrict__ c, TY* __restrict__ y EXTRA_PARAMS) {
  const int lane = threadIdx.x & 31;
  const i64 warps = ((i64)gridDim.x * blockDim.x) >> 5;
  for (i64 o = (blockIdx.x * (i64)blockDim.x + threadIdx.x) >> 5; o < (i64)M * N; o += warps) {
    const int n = (int)(o % N);
    const int m = (int)(o / N);
    float acc = 0.f;
    for (int k = lane; k < K; k += 32)
      acc = fmaf(ld(a + (i64)m * SAM + (i64)k * SAK), ld(b + (i64)k * SBK + (i64)n * SBN), acc);
#pragma unroll
    for (int d = 16; d > 0; d >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, d);
    if (lane == 0) {
      float v = ALPHA * acc;
      if (HAS_C) v += BETA * ld(c + (i64)m * SCM + (i64)n * SCN);
      const float a0 = v;
      EPILOGUE
      st(y + o, RESULT);
    }
  }
}
"""


def _strides2(p: Placement, transposed: bool) -> tuple[int, int]:
    s0, s1 = p.strides
    return (s1, s0) if transposed else (s0, s1)


@kernel("Gemm")
def bind_gemm(ctx: BindContext, layer: LayerInfo) -> list[Candidate]:
    epi = layer.attrs.get("epilogue") or {"program": [], "inputs": 0}
    n_extra = int(epi["inputs"])
    own = layer.inputs[:len(layer.inputs) - n_extra]
    extras = [ctx.place(i) for i in layer.inputs[len(own):]]
    program = list(epi["program"])
    a, b, out = ctx.place(own[0]), ctx.place(own[1]), ctx.place(layer.outputs[0])
    c = ctx.place(own[2]) if len(own) > 2 and own[2] >= 0 else None
    if len(a.shape) != 2 or len(b.shape) != 2 or out.layout != LINEAR:
        raise KernelError(layer.name, layer.op, "Gemm takes 2-D operands")
    trans_a, trans_b = bool(layer.attrs.get("transA", 0)), bool(layer.attrs.get("transB", 0))
    alpha, beta = float(layer.attrs.get("alpha", 1.0)), float(layer.attrs.get("beta", 1.0))
    m, n = out.shape
    k = a.shape[0] if trans_a else a.shape[1]
    candidates: list[Candidate] = []
    b_const = ctx.is_weight(own[1])
    c_bias = c is None or (ctx.is_weight(own[2]) and c.size == n and c.shape[-1] == n)
    if b_const and c_bias and not trans_a and a.dtype is out.dtype and ctx.wants("cudnn/"):
        candidates += _cudnn(ctx, layer, a, own, c, trans_b, alpha, beta, program, extras, out)
    if not ctx.wants("warp"):
        return candidates
    # The warp kernel reads B as [N, K] rows: transpose a constant B once.
    if b_const and not trans_b:
        bt = np.ascontiguousarray(ctx.host(own[1]).T)
        b = Placement(ctx.upload(bt), bt.shape, b.dtype, LINEAR)
        trans_b = True
    sam, sak = _strides2(a, trans_a)
    sbk, sbn = _strides2(b, trans_b)
    scm = scn = 0
    if c is not None:
        from pydla.backends.cuda.layout import broadcast_strides

        scm, scn = broadcast_strides(c, (m, n))
    epilogue = make_epilogue(program, extras, out, layer.name)
    lines, result = epilogue.lines("a0", ["m", "n"])
    values = {"TA": c_type(a.dtype, layer.name), "TB": c_type(b.dtype, layer.name),
              "TC": c_type(c.dtype if c is not None else a.dtype, layer.name),
              "TY": c_type(out.dtype, layer.name), "M": m, "N": n, "K": k,
              "SAM": sam, "SAK": sak, "SBK": sbk, "SBN": sbn, "SCM": scm, "SCN": scn,
              "ALPHA": f"{alpha!r}f", "BETA": f"{beta!r}f", "HAS_C": int(c is not None)}
    source = "".join(f"#define {key} {v}\n" for key, v in values.items()) + _WARP.replace(
        "EXTRA_PARAMS", "".join(", " + p for p in epilogue.params)).replace(
        "EPILOGUE", "\n      ".join(lines)).replace("RESULT", result)
    args = [np.uint64(a.ptr), np.uint64(b.ptr), np.uint64(c.ptr if c is not None else 0),
            np.uint64(out.ptr), *epilogue.args]
    candidates.append(Candidate("warp", ctx.kernel_launch(source, "gemm", m * n * 32, args)))
    return candidates


def _cudnn(ctx: BindContext, layer: LayerInfo, a: Placement, own: tuple[int, ...],
           c: Placement | None, trans_b: bool, alpha: float, beta: float, program: list,
           extras: list[Placement], out: Placement) -> list[Candidate]:
    if any(p.shape != out.shape for p in extras):
        return []
    b_type = ctx.program.tensors[own[1]].dtype
    w = to_compute(ctx.host(own[1]), b_type)
    w = (w if trans_b else w.T) * np.float32(alpha)  # [N, K]
    n, k = w.shape
    w_ptr = ctx.upload(to_storage(np.ascontiguousarray(w, dtype=np.float32), b_type))
    bias = None
    if c is not None:
        c_type_ = ctx.program.tensors[own[2]].dtype
        cv = to_compute(ctx.host(own[2]), c_type_).reshape(n) * np.float32(beta)
        bias = Placement(ctx.upload(to_storage(cv.astype(np.float32), c_type_)), (n,), c_type_,
                         LINEAR)
    m = a.shape[0]
    x = Placement(a.ptr, (m, k, 1, 1), a.dtype, "nhwc")
    y = Placement(out.ptr, (m, n, 1, 1), out.dtype, "nhwc")
    extras4 = [Placement(p.ptr, (m, n, 1, 1), p.dtype, "nhwc") for p in extras]
    geometry = ConvGeometry((0, 0), (0, 0), (1, 1), (1, 1))
    found, failures = cudnn_candidates(ctx, layer, x, w_ptr, [n, k, 1, 1], [k, 1, k, k],
                                       b_type, bias, program, extras4, y, geometry)
    ctx.notes.extend(f"{layer.name}: {f}" for f in failures)
    return found

