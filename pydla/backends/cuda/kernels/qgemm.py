"""QGemm on the GPU (QLinearMatMul, MatMulInteger, com.microsoft QGemm and folded QDQ
MatMul/Gemm): exact int32 accumulation, then the CPU reference kernel's output arithmetic
step for step (``pydla.backends.cpu.kernels.qlinear_reference``), so the outputs match it
bit for bit.

One thread per output element (grid-stride, in the output's memory order) accumulates
``Σ_k (a - a_zp[row]) · (b[k, n] - b_zp[n]) + bias[n]`` in int32, then writes the raw
accumulator (int32 output), ``float32(acc) · x_scale · w_scale[n]`` (float output without
y_scale, plus a float residual, clipped by a folded activation), or requantizes:
``clamp(rint(float32(acc) · (x_scale · w_scale[n] / y_scale) [+ residual term]) + y_zp,
lo, hi)`` — stored as an integer, or dequantized again for a float output. Scales and zero
points may be run-time tensors (DynamicQuantizeLinear's), so every scale product is taken
in the kernel, in the reference's float32 order. Batch dimensions broadcast as MatMul's.

This is the simple exact form (no tensor cores): the corpus' int8 recurrent models multiply
small matrices; cuBLASLt int8 GEMMs for large ones are issue 26's item 3.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pydla.backends.cuda.codegen import decompose, defines, f32, offset, storage_type
from pydla.backends.cuda.context import BindContext
from pydla.backends.cuda.kernels.matmul import _batch_strides
from pydla.backends.cuda.layout import Placement, broadcast_strides
from pydla.backends.cuda.registry import Candidate, kernel
from pydla.dtypes import DType
from pydla.errors import KernelError
from pydla.loadable.program import LayerInfo
from pydla.ops import QUANTIZED_INPUTS

X, X_SCALE, X_ZP, W, W_SCALE, W_ZP, Y_SCALE, Y_ZP, BIAS, RESIDUAL = range(len(QUANTIZED_INPUTS))
_INT_RANGES = {DType.INT8: (-128, 127), DType.UINT8: (0, 255)}

_QGEMM = r"""
__device__ __forceinline__ float clampf(float v, float lo, float hi) {
  return v < lo ? lo : (v > hi ? hi : v);  /* NaN stays NaN, as np.clip */
}
/* a folded activation's real bound in the quantized domain, as QuantizeLinear rounds it */
__device__ __forceinline__ float qbound(float bound, float ys, float zp) {
  return clampf(rintf(bound / ys) + zp, QMIN, QMAX);
}
extern "C" __global__ void qgemm(const TA* __restrict__ a, const TB* __restrict__ b,
    const TAZ* __restrict__ azp, const TBZ* __restrict__ bzp, const int* __restrict__ bias,
    const TXS* __restrict__ xs, const TWS* __restrict__ ws, const TYS* __restrict__ ys,
    const TYZ* __restrict__ yzp, const TR* __restrict__ res, TY* __restrict__ y) {
  for (i64 e = blockIdx.x * (i64)blockDim.x + threadIdx.x; e < TOTAL;
       e += (i64)gridDim.x * blockDim.x) {
COORDS
    const int az = HAS_AZP ? (int)ld(azp + (AZP_ROWS ? ROW : 0)) : 0;
    const int bz = HAS_BZP ? (int)ld(bzp + (BZP_COLS ? COL : 0)) : 0;
    const TA* ap = a + A_OFF;
    const TB* bp = b + B_OFF;
    int acc = 0;
    for (int k = 0; k < K; ++k)
      acc += ((int)ld(ap + (i64)k * ASK) - az) * ((int)ld(bp + (i64)k * BSK) - bz);
    if (HAS_BIAS) acc += bias[BIAS_COLS ? COL : 0];
#if OUT_INT32
    y[Y_OFF] = acc;
#else
    const float mult = (float)ld(xs) * (float)ld(ws + (WS_COLS ? COL : 0));
#if HAS_YS
    const float ysv = (float)ld(ys);
    const float zp = HAS_YZP ? (float)ld(yzp) : 0.f;
    float q = (float)acc * (mult / ysv);
    if (HAS_RES) q += ((float)ld(res + R_OFF) - RZP) * (RSCALE / ysv);
    q = rintf(q) + zp;
    q = clampf(q, HAS_CLIP_LO ? fmaxf(QMIN, qbound(CLIP_LO, ysv, zp)) : QMIN,
               HAS_CLIP_HI ? fminf(QMAX, qbound(CLIP_HI, ysv, zp)) : QMAX);
#if OUT_FLOAT
    st(y + Y_OFF, (q - zp) * ysv);
#else
    st(y + Y_OFF, (TY)f2i32(q));
#endif
#else
    float real = (float)acc * mult;
    if (HAS_RES) real += (float)ld(res + R_OFF);
    if (HAS_CLIP_LO) real = real < CLIP_LO ? CLIP_LO : real;
    if (HAS_CLIP_HI) real = real > CLIP_HI ? CLIP_HI : real;
    st(y + Y_OFF, real);
#endif
#endif
  }
}
"""


def _input(ctx: BindContext, layer: LayerInfo, i: int) -> Placement | None:
    index = layer.inputs[i] if i < len(layer.inputs) else -1
    return ctx.place(index) if index >= 0 else None


def _elements(layer: LayerInfo, p: Placement | None, what: str, allowed: tuple[int, ...]
              ) -> bool:
    """Whether ``p`` holds one value per row/column (else one in all); refuses other sizes."""
    if p is None or p.size == 1:
        return False
    if p.size not in allowed:
        raise KernelError(layer.name, layer.op, f"{what} has {p.size} elements; expected "
                          f"{' or '.join(str(a) for a in (1, *allowed))}")
    return True


@kernel("QGemm")
def bind_qgemm(ctx: BindContext, layer: LayerInfo) -> list[Candidate]:
    where = layer.name
    p = [_input(ctx, layer, i) for i in range(len(QUANTIZED_INPUTS))]
    a, b, y = p[X], p[W], ctx.place(layer.outputs[0])
    if a is None or b is None or len(a.shape) < 2 or len(b.shape) < 2 or \
            a.shape[-1] != b.shape[-2]:
        raise KernelError(where, layer.op, f"A {a and a.shape} and B {b and b.shape} do not "
                          "multiply")
    rows, depth, cols = a.shape[-2], a.shape[-1], b.shape[-1]
    batch = y.shape[:-2]
    out_int32 = y.dtype is DType.INT32
    if not out_int32 and (p[X_SCALE] is None or p[W_SCALE] is None):
        raise KernelError(where, layer.op, "a scaled output needs x_scale and w_scale")
    for i, what in ((X_SCALE, "x_scale"), (Y_SCALE, "y_scale"), (Y_ZP, "y_zero_point")):
        if p[i] is not None and p[i].size != 1:  # type: ignore[union-attr]
            raise KernelError(where, layer.op, f"{what} must have one element")
    has_ys = p[Y_SCALE] is not None
    if y.dtype in _INT_RANGES:
        qtype = y.dtype
    elif has_ys:
        qtype = p[Y_ZP].dtype if p[Y_ZP] is not None else DType.UINT8  # type: ignore[union-attr]
    else:
        qtype = DType.UINT8  # unused: no requantization
    if qtype not in _INT_RANGES:
        raise KernelError(where, layer.op, f"requantizes to int8/uint8, not "
                          f"{qtype.name.lower()}")
    clip = layer.attrs.get("clip")
    lo, hi = (float(clip[0]), float(clip[1])) if clip else (-np.inf, np.inf)
    residual = layer.attrs.get("residual") or {}

    order = y.physical_order()
    walk = decompose("e", [y.shape[d] for d in order], "c_", "    ")
    walk += [f"    const i64 c{d} = c_{i};" for i, d in enumerate(order)]
    coords = [f"c{d}" for d in range(len(y.shape))]
    row, col = coords[-2], coords[-1]
    try:
        a_batch, b_batch = _batch_strides(a, batch), _batch_strides(b, batch)
    except ValueError as e:
        raise KernelError(where, layer.op, str(e)) from None
    a_off = offset(coords[:-2] + [row], [*a_batch, a.strides[-2]])
    b_off = offset(coords[:-2] + [col], [*b_batch, b.strides[-1]])
    res = p[RESIDUAL]
    r_off = offset(coords, broadcast_strides(res, y.shape)) if res is not None else "0"

    def t(i: int, default: str = "float") -> str:
        return storage_type(p[i].dtype, where) if p[i] is not None else default  # type: ignore[union-attr]

    values: dict[str, Any] = {
        "TA": storage_type(a.dtype, where), "TB": storage_type(b.dtype, where),
        "TAZ": t(X_ZP, "unsigned char"), "TBZ": t(W_ZP, "unsigned char"), "TXS": t(X_SCALE),
        "TWS": t(W_SCALE), "TYS": t(Y_SCALE), "TYZ": t(Y_ZP, "unsigned char"),
        "TR": t(RESIDUAL), "TY": storage_type(y.dtype, where), "TOTAL": y.size, "K": depth,
        "ASK": a.strides[-1], "BSK": b.strides[-2], "ROW": row, "COL": col,
        "HAS_AZP": int(p[X_ZP] is not None),
        "AZP_ROWS": int(_elements(layer, p[X_ZP], "a_zero_point", (rows,))),
        "HAS_BZP": int(p[W_ZP] is not None),
        "BZP_COLS": int(_elements(layer, p[W_ZP], "b_zero_point", (cols,))),
        "HAS_BIAS": int(p[BIAS] is not None),
        "BIAS_COLS": int(_elements(layer, p[BIAS], "bias", (cols,))),
        "WS_COLS": int(_elements(layer, p[W_SCALE], "w_scale", (cols,))),
        "OUT_INT32": int(out_int32), "OUT_FLOAT": int(y.dtype not in _INT_RANGES),
        "HAS_YS": int(has_ys), "HAS_YZP": int(p[Y_ZP] is not None),
        "HAS_RES": int(res is not None),
        "RZP": f32(float(residual.get("zero_point", 0))),
        "RSCALE": f32(float(residual.get("scale", 1.0))),
        "QMIN": f32(_INT_RANGES[qtype][0]), "QMAX": f32(_INT_RANGES[qtype][1]),
        "HAS_CLIP_LO": int(np.isfinite(lo)), "HAS_CLIP_HI": int(np.isfinite(hi)),
        "CLIP_LO": f32(lo if np.isfinite(lo) else 0.0),
        "CLIP_HI": f32(hi if np.isfinite(hi) else 0.0)}
    if p[BIAS] is not None and p[BIAS].dtype is not DType.INT32:  # type: ignore[union-attr]
        raise KernelError(where, layer.op, "the bias must be int32")
    source = defines(values) + (
        _QGEMM.replace("COORDS", "\n".join(walk)).replace("A_OFF", a_off)
        .replace("B_OFF", b_off).replace("R_OFF", r_off)
        .replace("Y_OFF", offset(coords, y.strides)))
    args = [np.uint64(v.ptr if v is not None else 0) for v in
            (a, b, p[X_ZP], p[W_ZP], p[BIAS], p[X_SCALE], p[W_SCALE], p[Y_SCALE], p[Y_ZP], res,
             y)]
    return [Candidate("nvrtc", ctx.kernel_launch(source, "qgemm", y.size, args))]
