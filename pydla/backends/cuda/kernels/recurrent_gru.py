"""GRU on the GPU, as the LSTM (``recurrent.py``): the input projection of every time step
and direction is one GEMM (``input_projection``: the biases that add to it folded into its
epilogue), then fused kernels per time step run both directions, a thread per (direction,
batch row, hidden unit) reading Rᵀ so that neighbouring threads read neighbouring weights.

With ``linear_before_reset`` one kernel per step takes the three recurrent products
(h_{t-1}·R_zᵀ, h_{t-1}·R_rᵀ, h_{t-1}·R_hᵀ + Rb_h) and the gates. Without it the candidate
multiplies (r ⊙ h_{t-1})·R_hᵀ, which needs every unit's reset gate first: a gate kernel
writes z and r ⊙ h_{t-1} to scratch, a second kernel takes the product and the update.

``sequence_lens`` (a constant or a run-time int32/int64 tensor) follows the CPU backend and
onnxruntime: a row's steps past its length keep its state and write zeros to Y, a reverse
direction runs backwards within the row's own length, and an empty row ends with a zero
Y_h; lengths are clamped to 0…T. The hidden state is float32 in two scratch buffers used in
turn (step s reads the one step s - 1 wrote), whatever the tensors' types. ONNX's default
activations (sigmoid, tanh) and ``clip`` are supported; others are refused at bind.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pydla.backends.cuda.codegen import c_type, defines, storage_type
from pydla.backends.cuda.context import BindContext
from pydla.backends.cuda.kernels.recurrent import (
    SIMPLE,
    input_projection,
    optional_input,
    recurrence_values,
    sequence_strides,
    state_strides,
)
from pydla.backends.cuda.layout import LINEAR, Placement
from pydla.backends.cuda.registry import Candidate, Launch, chain, kernel
from pydla.dtypes import DType
from pydla.errors import KernelError
from pydla.loadable.program import LayerInfo

# What every step kernel starts with: its (direction, row, unit), whether the row is still
# running at step s, the time index it reads and writes, and h_{t-1} of a unit.
_COMMON = r"""
__device__ __forceinline__ float sigm(float x) { return 0.5f * (tanhf(0.5f * x) + 1.f); }
__device__ __forceinline__ float clip(float x) {
  return CLIP > 0.f ? fminf(fmaxf(x, -CLIP), CLIP) : x;
}
__device__ __forceinline__ int row_length(const TL* lens, int bb) {
  if (!HAS_LENS) return T;
  const long long n = (long long)ld(lens + bb);
  return n < 0 ? 0 : (n > T ? T : (int)n);
}
/* h_{t-1}[k] of (d, bb): the initial state (or zero) at step 0, else what step s - 1 wrote */
__device__ __forceinline__ float h_prev(const TH0* h0, const float* hst, int s, int d, int bb,
                                        int k) {
  if (s == 0) return HAS_H0 ? ld(h0 + (i64)d * H0D + (i64)bb * H0B + (i64)k * H0H) : 0.f;
  return hst[((i64)((s - 1) & 1) * D * B + (i64)d * B + bb) * HS + k];
}
#define UNIT_LOOP \
  for (i64 idx = blockIdx.x * (i64)blockDim.x + threadIdx.x; idx < (i64)D * B * HS; \
       idx += (i64)gridDim.x * blockDim.x) { \
  const int j = (int)(idx % HS); \
  const int bb = (int)((idx / HS) % B); \
  const int d = (int)(idx / ((i64)HS * B)); \
  const int len = row_length(lens, bb); \
  const int live = s < len; \
  const int t = ((REVERSE >> d) & 1) && live ? len - 1 - s : s; \
  (void)t;
"""

# The end of a step: the new state (kept past the row's length), Y and, at the last step, Y_h.
_UPDATE = r"""
__device__ __forceinline__ void finish(float h, float* hst, TY* y, TYH* yh, int s, int d,
                                       int bb, int j, int t, int live, int len) {
  hst[((i64)(s & 1) * D * B + (i64)d * B + bb) * HS + j] = h;
  if (HAS_Y) st(y + (i64)t * YT + (i64)d * YD + (i64)bb * YB + (i64)j * YH, live ? h : 0.f);
  if (HAS_YH && s == T - 1) st(yh + (i64)d * YHD + (i64)bb * YHB + (i64)j * YHH,
                               len ? h : 0.f);
}
"""

# linear_before_reset = 1: h~ = tanh(g_h + r ⊙ (h_{t-1}·R_hᵀ + Rb_h)), one kernel per step.
_STEP_BEFORE = r"""
extern "C" __global__ void gru_step(const float* __restrict__ g, const float* __restrict__ rt,
    const float* __restrict__ rbh, const TH0* __restrict__ h0, const TL* __restrict__ lens,
    float* __restrict__ hst, TY* __restrict__ y, TYH* __restrict__ yh, int s) {
  UNIT_LOOP
  const float hp = h_prev(h0, hst, s, d, bb, j);
  float h = hp;
  if (live) {
    const float* gp = g + ((i64)t * B + bb) * (D * 3 * HS) + (i64)d * 3 * HS;
    float gz = gp[j], gr = gp[HS + j], hh = rbh[d * HS + j];
    const float* rtd = rt + (i64)d * HS * 3 * HS;
    for (int k = 0; k < HS; ++k) {
      const float hk = h_prev(h0, hst, s, d, bb, k);
      const float* row = rtd + (i64)k * 3 * HS;
      gz = fmaf(hk, row[j], gz);
      gr = fmaf(hk, row[HS + j], gr);
      hh = fmaf(hk, row[2 * HS + j], hh);
    }
    const float z = sigm(clip(gz)), r = sigm(clip(gr));
    const float cand = tanhf(clip(gp[2 * HS + j] + r * hh));
    h = (1.f - z) * cand + z * hp;
  }
  finish(h, hst, y, yh, s, d, bb, j, t, live, len);
  }
}
"""

# linear_before_reset = 0: h~ = tanh(g_h + (r ⊙ h_{t-1})·R_hᵀ), the gates first (z and
# r ⊙ h_{t-1} to scratch), then the candidate and the update.
_STEP_AFTER = r"""
extern "C" __global__ void gru_gates(const float* __restrict__ g,
    const float* __restrict__ rt, const TH0* __restrict__ h0, const TL* __restrict__ lens,
    const float* __restrict__ hst, float* __restrict__ zs, float* __restrict__ rh, int s) {
  UNIT_LOOP
  if (live) {
    const float* gp = g + ((i64)t * B + bb) * (D * 3 * HS) + (i64)d * 3 * HS;
    float gz = gp[j], gr = gp[HS + j];
    const float* rtd = rt + (i64)d * HS * 3 * HS;
    for (int k = 0; k < HS; ++k) {
      const float hk = h_prev(h0, hst, s, d, bb, k);
      const float* row = rtd + (i64)k * 3 * HS;
      gz = fmaf(hk, row[j], gz);
      gr = fmaf(hk, row[HS + j], gr);
    }
    zs[idx] = sigm(clip(gz));
    rh[idx] = sigm(clip(gr)) * h_prev(h0, hst, s, d, bb, j);
  }
  }
}
extern "C" __global__ void gru_update(const float* __restrict__ g,
    const float* __restrict__ rt, const TH0* __restrict__ h0, const TL* __restrict__ lens,
    float* __restrict__ hst, const float* __restrict__ zs, const float* __restrict__ rh,
    TY* __restrict__ y, TYH* __restrict__ yh, int s) {
  UNIT_LOOP
  const float hp = h_prev(h0, hst, s, d, bb, j);
  float h = hp;
  if (live) {
    const float* gp = g + ((i64)t * B + bb) * (D * 3 * HS) + (i64)d * 3 * HS;
    float hh = gp[2 * HS + j];
    const float* rtd = rt + (i64)d * HS * 3 * HS;
    const float* rhd = rh + ((i64)d * B + bb) * HS;
    for (int k = 0; k < HS; ++k) hh = fmaf(rhd[k], rtd[(i64)k * 3 * HS + 2 * HS + j], hh);
    const float z = zs[idx];
    h = (1.f - z) * tanhf(clip(hh)) + z * hp;
  }
  finish(h, hst, y, yh, s, d, bb, j, t, live, len);
  }
}
"""


def _lengths(ctx: BindContext, layer: LayerInfo, steps: int) -> tuple[Placement | None,
                                                                      np.ndarray | None]:
    """sequence_lens as a run-time tensor, or as constant lengths to upload; (None, None)
    when every row runs the full length."""
    index = optional_input(layer, 4)
    if index < 0:
        return None, None
    if ctx.is_weight(index):
        lens = ctx.host(index).astype(np.int64)
        return None, (None if np.all(lens == steps) else lens.astype(np.int32))
    p = ctx.place(index)
    if p.dtype not in (DType.INT32, DType.INT64):
        raise KernelError(layer.name, layer.op, f"sequence_lens is {p.dtype.name.lower()}, "
                          "not int32/int64")
    return p, None


@kernel("GRU")
def bind_gru(ctx: BindContext, layer: LayerInfo) -> list[Candidate]:
    a = layer.attrs
    where = layer.name
    hidden = int(a["hidden_size"])
    direction = a.get("direction", "forward")
    dirs = 2 if direction == "bidirectional" else 1
    layout = int(a.get("layout", 0))
    acts = [str(x).lower() for x in a.get("activations") or ["sigmoid", "tanh"] * dirs]
    if acts != ["sigmoid", "tanh"] * dirs:
        raise KernelError(where, layer.op, f"the CUDA GRU runs the default activations "
                          f"(sigmoid, tanh), not {acts}")
    for i, what in ((1, "W"), (2, "R"), (3, "B")):
        if optional_input(layer, i) >= 0 and not ctx.is_weight(layer.inputs[i]):
            raise KernelError(where, layer.op, f"the CUDA GRU needs a constant {what}")
    x = ctx.place(layer.inputs[0])
    steps, batch = (x.shape[1], x.shape[0]) if layout else (x.shape[0], x.shape[1])
    w = ctx.host(layer.inputs[1]).astype(np.float32)  # [D, 3H, I], gates z, r, h
    r = ctx.host(layer.inputs[2]).astype(np.float32)  # [D, 3H, H]
    before = bool(int(a.get("linear_before_reset", 0)))
    b_index = optional_input(layer, 3)
    bias, rbh = None, np.zeros((dirs, hidden), np.float32)
    if b_index >= 0:
        bb = ctx.host(b_index).astype(np.float32)  # [D, 6H]: Wb z r h, Rb z r h
        bias = bb[:, :3 * hidden] + bb[:, 3 * hidden:]
        if before:  # Rb_h goes inside the reset product
            bias[:, 2 * hidden:] = bb[:, 2 * hidden:3 * hidden]
            rbh = np.ascontiguousarray(bb[:, 5 * hidden:])
    lens_p, lens_const = _lengths(ctx, layer, steps)
    if lens_const is not None:
        lens_p = Placement(ctx.upload(lens_const), (batch,), DType.INT32, LINEAR)
    h0 = ctx.place(optional_input(layer, 5)) if optional_input(layer, 5) >= 0 else None
    outs = [ctx.place(o) if o >= 0 else None for o in
            list(layer.outputs) + [-1] * (2 - len(layer.outputs))]
    y, yh = outs[:2]

    g_ptr, projections = input_projection(ctx, x, layout, w, bias, where)
    rt_ptr = ctx.upload(np.ascontiguousarray(r.transpose(0, 2, 1)))  # [D, H_in, 3H]
    units = dirs * batch * hidden
    hst = ctx.scratch(2 * units * 4)
    f32_t = DType.FLOAT32
    y_strides = sequence_strides(y, layout)
    h0s, yhs = state_strides(h0, layout), state_strides(yh, layout)
    values: dict[str, Any] = {
        **recurrence_values(steps, batch, hidden, dirs, direction, a.get("clip")),
        "HAS_H0": int(h0 is not None), "HAS_LENS": int(lens_p is not None),
        "HAS_Y": int(y is not None), "HAS_YH": int(yh is not None),
        "TH0": c_type(h0.dtype if h0 is not None else f32_t, where),
        "TL": storage_type(lens_p.dtype, where) if lens_p is not None else "int",
        "TY": c_type(y.dtype if y is not None else f32_t, where),
        "TYH": c_type(yh.dtype if yh is not None else f32_t, where),
        "H0D": h0s[0], "H0B": h0s[1], "H0H": h0s[2], "YT": y_strides[0],
        "YD": y_strides[1], "YB": y_strides[2], "YH": y_strides[3], "YHD": yhs[0],
        "YHB": yhs[1], "YHH": yhs[2]}
    source = defines(values) + _COMMON + _UPDATE + (_STEP_BEFORE if before else _STEP_AFTER)

    def ptr(p: Placement | None) -> np.uint64:
        return np.uint64(p.ptr if p is not None else 0)

    common = [np.uint64(g_ptr), np.uint64(rt_ptr)]
    steps_launches: list[Launch] = []
    if before:
        rbh_ptr = ctx.upload(rbh)
        for s in range(steps):
            steps_launches.append(ctx.kernel_launch(
                source, "gru_step", units,
                [*common, np.uint64(rbh_ptr), ptr(h0), ptr(lens_p), np.uint64(hst), ptr(y),
                 ptr(yh), np.int32(s)], block=128))
    else:
        zs, rh = ctx.scratch(units * 4), ctx.scratch(units * 4)
        for s in range(steps):
            steps_launches.append(ctx.kernel_launch(
                source, "gru_gates", units,
                [*common, ptr(h0), ptr(lens_p), np.uint64(hst), np.uint64(zs),
                 np.uint64(rh), np.int32(s)], block=128))
            steps_launches.append(ctx.kernel_launch(
                source, "gru_update", units,
                [*common, ptr(h0), ptr(lens_p), np.uint64(hst), np.uint64(zs),
                 np.uint64(rh), ptr(y), ptr(yh), np.int32(s)], block=128))
    return [Candidate(name, chain(projection, *steps_launches), fallback=name == SIMPLE)
            for name, projection in projections]
