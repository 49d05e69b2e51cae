"""LSTM on the GPU: the input projection of every time step and direction is one GEMM
(``matmul_launch``, both biases folded into its epilogue), then one fused kernel per time
step runs both directions: a thread per (direction, batch row, hidden unit) takes the
small recurrent GEMM (h_{t-1}·Rᵀ, Rᵀ stored so that neighbouring threads read neighbouring
weights), adds peepholes, applies the gates and updates the cell and hidden states.

States are float32 in scratch buffers (hidden states of every step, and one cell state per
row updated in place: only its own thread reads it), whatever the tensors' types; Y, Y_h
and Y_c are written through their strides as the steps produce them. ONNX's default
activations (sigmoid, tanh, tanh), ``clip``, ``input_forget`` and peepholes are supported;
sequence lengths other than the full length are refused. ``quantize_hidden``
(com.microsoft DynamicQuantizeLSTM) passes each step's h_{t-1} through a dynamic uint8
round trip before the recurrent product, as the CPU backend does: a range kernel per step
folds each direction's (min, max) of h_{t-1} (``quantize.RANGE_FOLD``), and the step kernel
quantizes every h_{t-1}[k] it reads on that grid.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pydla.backends.cuda.codegen import c_type, defines, f32
from pydla.backends.cuda.context import BindContext
from pydla.backends.cuda.kernels.epilogue import NO_EPILOGUE, make_epilogue
from pydla.backends.cuda.kernels.matmul import MatmulShape, matmul_launch, matmul_variants
from pydla.backends.cuda.kernels.quantize import RANGE_FOLD
from pydla.backends.cuda.layout import LINEAR, Placement
from pydla.backends.cuda.registry import Candidate, Launch, chain, kernel
from pydla.dtypes import DType
from pydla.errors import KernelError
from pydla.loadable.program import LayerInfo

_STEP = r"""
__device__ __forceinline__ float sigm(float x) { return 0.5f * (tanhf(0.5f * x) + 1.f); }
__device__ __forceinline__ float clip(float x) {
  return CLIP > 0.f ? fminf(fmaxf(x, -CLIP), CLIP) : x;
}
/* h_{t-1}[k] of (d, bb): the initial state (or zero) at step 0, else the previous step's */
__device__ __forceinline__ float h_prev(const TH0* h0, const float* hseq, int s, int d, int bb,
                                        int k) {
  if (s == 0) return HAS_H0 ? ld(h0 + (i64)d * H0D + (i64)bb * H0B + (i64)k * H0H) : 0.f;
  const int tp = ((REVERSE >> d) & 1) ? T - s : s - 1;
  return hseq[(((i64)tp * D + d) * B + bb) * HS + k];
}
__device__ __forceinline__ float clamp255(float v) {
  return v < 0.f ? 0.f : (v > 255.f ? 255.f : v);
}
/* quantize_hidden: v through DynamicQuantizeLinear's uint8 grid over range (lo, hi), as
   the CPU backend's dynamic_uint8_round_trip */
__device__ __forceinline__ float round_trip(float v, const float* range) {
  const float lo = range[0], hi = range[1];
  const float scale = hi == lo ? 1.f : (hi - lo) / 255.f;
  const float zero = clamp255(rintf(0.f - lo / scale));
  return (clamp255(rintf(v / scale) + zero) - zero) * scale;
}
extern "C" __global__ void lstm_range_reset(float* __restrict__ ranges) {
  for (i64 i = blockIdx.x * (i64)blockDim.x + threadIdx.x; i < (i64)T * D * 2;
       i += (i64)gridDim.x * blockDim.x) ranges[i] = 0.f;
}
/* the range of each direction's h_{t-1} at step s (one (lo, hi) pair per step and direction) */
extern "C" __global__ void lstm_range(const TH0* __restrict__ h0,
    const float* __restrict__ hseq, float* __restrict__ ranges, int s) {
  float lo[2] = {0.f, 0.f}, hi[2] = {0.f, 0.f};
  for (i64 idx = blockIdx.x * (i64)blockDim.x + threadIdx.x; idx < (i64)D * B * HS;
       idx += (i64)gridDim.x * blockDim.x) {
    const int d = (int)(idx / ((i64)HS * B));
    const float v = h_prev(h0, hseq, s, d, (int)((idx / HS) % B), (int)(idx % HS));
    lo[d] = pick(lo[d], v, true);
    hi[d] = pick(hi[d], v, false);
  }
  for (int d = 0; d < D; ++d) {
    fold(ranges + ((i64)s * D + d) * 2, lo[d], true);
    fold(ranges + ((i64)s * D + d) * 2 + 1, hi[d], false);
  }
}
extern "C" __global__ void lstm_step(const float* __restrict__ g, const float* __restrict__ rt,
    const float* __restrict__ p, const TH0* __restrict__ h0, const TC0* __restrict__ c0,
    float* __restrict__ hseq, float* __restrict__ cst, TY* __restrict__ y,
    TYH* __restrict__ yh, TYC* __restrict__ yc, const float* __restrict__ ranges, int s) {
  for (i64 idx = blockIdx.x * (i64)blockDim.x + threadIdx.x; idx < (i64)D * B * HS;
       idx += (i64)gridDim.x * blockDim.x) {
  const int j = (int)(idx % HS);
  const int bb = (int)((idx / HS) % B);
  const int d = (int)(idx / ((i64)HS * B));
  const int rev = (REVERSE >> d) & 1;
  const int t = rev ? T - 1 - s : s;
  const float* gp = g + ((i64)t * B + bb) * (D * 4 * HS) + (i64)d * 4 * HS;
  float gi = gp[j], go = gp[HS + j], gf = gp[2 * HS + j], gc = gp[3 * HS + j];
  const float* rtd = rt + (i64)d * HS * 4 * HS;
  const float* range = ranges + ((i64)s * D + d) * 2;
  for (int k = 0; k < HS; ++k) {
    float hk = h_prev(h0, hseq, s, d, bb, k);
    if (QUANTIZE_HIDDEN) hk = round_trip(hk, range);
    const float* row = rtd + (i64)k * 4 * HS;
    gi = fmaf(hk, row[j], gi);
    go = fmaf(hk, row[HS + j], go);
    gf = fmaf(hk, row[2 * HS + j], gf);
    gc = fmaf(hk, row[3 * HS + j], gc);
  }
  float cp;
  if (s == 0) cp = HAS_C0 ? ld(c0 + (i64)d * C0D + (i64)bb * C0B + (i64)j * C0H) : 0.f;
  else cp = cst[((i64)d * B + bb) * HS + j];
  if (HAS_P) {
    gi += p[d * 3 * HS + j] * cp;
    gf += p[d * 3 * HS + 2 * HS + j] * cp;
  }
  const float i_g = sigm(clip(gi));
  const float f_g = INPUT_FORGET ? 1.f - i_g : sigm(clip(gf));
  const float c = f_g * cp + i_g * tanhf(clip(gc));
  if (HAS_P) go += p[d * 3 * HS + HS + j] * c;
  const float o_g = sigm(clip(go));
  const float h = o_g * tanhf(c);
  cst[((i64)d * B + bb) * HS + j] = c;
  hseq[(((i64)t * D + d) * B + bb) * HS + j] = h;
  if (HAS_Y) st(y + (i64)t * YT + (i64)d * YD + (i64)bb * YB + (i64)j * YH, h);
  if (s == T - 1) {
    if (HAS_YH) st(yh + (i64)d * YHD + (i64)bb * YHB + (i64)j * YHH, h);
    if (HAS_YC) st(yc + (i64)d * YCD + (i64)bb * YCB + (i64)j * YCH, c);
  }
  }
}
"""


def optional_input(layer: LayerInfo, i: int) -> int:
    return layer.inputs[i] if i < len(layer.inputs) else -1


def state_strides(p: Placement | None, layout: int) -> tuple[int, int, int]:
    """(direction, batch, hidden) strides of an initial or final state."""
    if p is None:
        return 0, 0, 0
    s = p.strides
    return (s[1], s[0], s[2]) if layout else (s[0], s[1], s[2])


def sequence_strides(y: Placement | None, layout: int) -> tuple[int, ...]:
    """(step, direction, batch, hidden) strides of the Y output (zeros when absent)."""
    if y is None:
        return 0, 0, 0, 0
    ys = y.strides
    return (ys[1], ys[2], ys[0], ys[3]) if layout else tuple(ys)


def recurrence_values(steps: int, batch: int, hidden: int, dirs: int, direction: str,
                      clip: Any) -> dict[str, Any]:  # noqa: ANN401
    """The step kernels' shared defines (an LSTM's and a GRU's)."""
    return {"T": steps, "B": batch, "HS": hidden, "D": dirs,
            "REVERSE": 1 if direction == "reverse" else (2 if dirs == 2 else 0),
            "CLIP": f32(float(clip)) if clip is not None else "0.f"}


@kernel("LSTM")
def bind_lstm(ctx: BindContext, layer: LayerInfo) -> list[Candidate]:
    a = layer.attrs
    where = layer.name
    hidden = int(a["hidden_size"])
    direction = a.get("direction", "forward")
    dirs = 2 if direction == "bidirectional" else 1
    layout = int(a.get("layout", 0))
    quantize = bool(a.get("quantize_hidden", 0))
    acts = [str(x).lower() for x in a.get("activations") or ["sigmoid", "tanh", "tanh"] * dirs]
    if acts != ["sigmoid", "tanh", "tanh"] * dirs:
        raise KernelError(where, layer.op, f"the CUDA LSTM runs the default activations "
                          f"(sigmoid, tanh, tanh), not {acts}")
    x = ctx.place(layer.inputs[0])
    steps, batch = (x.shape[1], x.shape[0]) if layout else (x.shape[0], x.shape[1])
    for i in (1, 2):
        if not ctx.is_weight(layer.inputs[i]):
            raise KernelError(where, layer.op, "the CUDA LSTM needs constant W and R")
    w = ctx.host(layer.inputs[1]).astype(np.float32)  # [D, 4H, I]
    r = ctx.host(layer.inputs[2]).astype(np.float32)  # [D, 4H, H]
    b_index, lens_index = optional_input(layer, 3), optional_input(layer, 4)
    if lens_index >= 0:
        lens = ctx.host(lens_index) if ctx.is_weight(lens_index) else None
        if lens is None or np.any(lens != steps):
            raise KernelError(where, layer.op, "the CUDA LSTM runs full-length sequences only "
                              "(sequence_lens must be a constant equal to the sequence length)")
    bias = np.zeros((dirs, 4 * hidden), np.float32)
    if b_index >= 0:
        if not ctx.is_weight(b_index):
            raise KernelError(where, layer.op, "the CUDA LSTM needs a constant B")
        bb = ctx.host(b_index).astype(np.float32)
        bias = bb[:, :4 * hidden] + bb[:, 4 * hidden:]
    p_index = optional_input(layer, 7)
    peep = None
    if p_index >= 0:
        if not ctx.is_weight(p_index):
            raise KernelError(where, layer.op, "the CUDA LSTM needs constant peepholes")
        peep = ctx.host(p_index).astype(np.float32)
    h0 = ctx.place(optional_input(layer, 5)) if optional_input(layer, 5) >= 0 else None
    c0 = ctx.place(optional_input(layer, 6)) if optional_input(layer, 6) >= 0 else None
    outs = [ctx.place(o) if o >= 0 else None for o in
            list(layer.outputs) + [-1] * (3 - len(layer.outputs))]
    y, yh, yc = outs[:3]

    # The input projection: G[t, b, (d, gate, j)] = x[t, b]·W[d]ᵀ + Wb + Rb, in float32.
    g_ptr, projections = input_projection(ctx, x, layout, w, bias if b_index >= 0 else None,
                                          where)

    # The recurrence.
    rt = np.ascontiguousarray(r.transpose(0, 2, 1))  # [D, H_in, 4H]
    rt_ptr = ctx.upload(rt)
    p_ptr = ctx.upload(peep) if peep is not None else 0
    hseq = ctx.scratch(steps * dirs * batch * hidden * 4)
    cst = ctx.scratch(dirs * batch * hidden * 4)
    f32_t = DType.FLOAT32
    y_strides = sequence_strides(y, layout)
    h0s, c0s = state_strides(h0, layout), state_strides(c0, layout)
    yhs, ycs = state_strides(yh, layout), state_strides(yc, layout)
    values: dict[str, Any] = {
        **recurrence_values(steps, batch, hidden, dirs, direction, a.get("clip")),
        "INPUT_FORGET": int(bool(a.get("input_forget", 0))), "HAS_P": int(peep is not None),
        "QUANTIZE_HIDDEN": int(quantize),
        "HAS_H0": int(h0 is not None), "HAS_C0": int(c0 is not None),
        "HAS_Y": int(y is not None), "HAS_YH": int(yh is not None),
        "HAS_YC": int(yc is not None),
        "TH0": c_type(h0.dtype if h0 is not None else f32_t, where),
        "TC0": c_type(c0.dtype if c0 is not None else f32_t, where),
        "TY": c_type(y.dtype if y is not None else f32_t, where),
        "TYH": c_type(yh.dtype if yh is not None else f32_t, where),
        "TYC": c_type(yc.dtype if yc is not None else f32_t, where),
        "H0D": h0s[0], "H0B": h0s[1], "H0H": h0s[2], "C0D": c0s[0], "C0B": c0s[1],
        "C0H": c0s[2], "YT": y_strides[0], "YD": y_strides[1], "YB": y_strides[2],
        "YH": y_strides[3], "YHD": yhs[0], "YHB": yhs[1], "YHH": yhs[2], "YCD": ycs[0],
        "YCB": ycs[1], "YCH": ycs[2]}
    source = defines(values) + RANGE_FOLD + _STEP

    def ptr(p: Placement | None) -> np.uint64:
        return np.uint64(p.ptr if p is not None else 0)

    units = dirs * batch * hidden
    ranges = np.uint64(ctx.scratch(steps * dirs * 2 * 4) if quantize else 0)
    step_launches = [ctx.kernel_launch(source, "lstm_range_reset", steps * dirs * 2, [ranges])
                     ] if quantize else []
    for s in range(steps):
        if quantize:
            step_launches.append(ctx.kernel_launch(source, "lstm_range", units,
                                                   [ptr(h0), np.uint64(hseq), ranges,
                                                    np.int32(s)]))
        step_launches.append(ctx.kernel_launch(
            source, "lstm_step", units,
            [np.uint64(g_ptr), np.uint64(rt_ptr), np.uint64(p_ptr), ptr(h0), ptr(c0),
             np.uint64(hseq), np.uint64(cst), ptr(y), ptr(yh), ptr(yc), ranges, np.int32(s)],
            block=128))
    return [Candidate(name, chain(projection, *step_launches), fallback=name == SIMPLE)
            for name, projection in projections]


SIMPLE = "simple"  # the fallback projection's candidate name
_PROJECT = r"""
extern "C" __global__ void project(const TX* __restrict__ x, const float* __restrict__ w,
    const float* __restrict__ bias, float* __restrict__ g) {
  for (i64 idx = blockIdx.x * (i64)blockDim.x + threadIdx.x; idx < (i64)T * B * N;
       idx += (i64)gridDim.x * blockDim.x) {
    const int n = (int)(idx % N);
    const i64 tb = idx / N;
    const TX* row = x + (tb / B) * XT + (tb % B) * XB;
    float acc = HAS_BIAS ? bias[n] : 0.f;
    for (int k = 0; k < K; ++k) acc = fmaf(ld(row + (i64)k * XK), w[(i64)n * K + k], acc);
    g[idx] = acc;
  }
}
"""


def input_projection(ctx: BindContext, x: Placement, layout: int, w: np.ndarray,
                     bias: np.ndarray | None, where: str) -> tuple[int, list[tuple[str, Launch]]]:
    """The input projection of a recurrent layer, G[t, b, n] = x[t, b]·W[n]ᵀ + bias[n] for
    every time step at once, in float32 (W [dirs, gates·hidden, input] flattened to its n
    rows): the scratch address of G and one launch per GEMM variant the context wants,
    the last a plain thread-per-output kernel (``SIMPLE``: a fallback, and what the host
    emulator can run)."""
    f32_t = DType.FLOAT32
    steps, batch = (x.shape[1], x.shape[0]) if layout else (x.shape[0], x.shape[1])
    size = x.shape[2]
    n_all = w.shape[0] * w.shape[1]
    g_ptr = ctx.scratch(steps * batch * n_all * 4)
    w_ptr = ctx.upload(w.reshape(n_all, size))
    bias_ptr = ctx.upload(bias.reshape(n_all)) if bias is not None else 0
    g_p = Placement(g_ptr, (steps, batch, n_all), f32_t, LINEAR)
    add = [{"op": "Add", "in": [0, 1], "attrs": {}, "shape": list(g_p.shape),
            "dtype": "float32"}]
    epilogue = NO_EPILOGUE if bias is None else make_epilogue(
        add, [Placement(bias_ptr, (n_all,), f32_t, LINEAR)], g_p, where)
    xs = x.strides
    t_stride, b_stride = (xs[1], xs[0]) if layout else (xs[0], xs[1])
    shape = MatmulShape((steps,), (t_stride,), (0,), (batch * n_all,), batch, n_all, size,
                        b_stride, xs[2], 1, size, n_all, 1)
    launches = [(variant, matmul_launch(ctx, shape, x.ptr, w_ptr, g_ptr,
                                        (x.dtype, f32_t, f32_t), epilogue, variant, where))
                for variant in matmul_variants(shape) if ctx.wants(variant)]
    if ctx.wants(SIMPLE):
        values = {"TX": c_type(x.dtype, where), "T": steps, "B": batch, "N": n_all, "K": size,
                  "XT": t_stride, "XB": b_stride, "XK": xs[2], "HAS_BIAS": int(bias is not None)}
        launches.append((SIMPLE, ctx.kernel_launch(
            defines(values) + _PROJECT, "project", steps * batch * n_all,
            [np.uint64(x.ptr), np.uint64(w_ptr), np.uint64(bias_ptr), np.uint64(g_ptr)],
            lazy=True)))
    return g_ptr, launches
