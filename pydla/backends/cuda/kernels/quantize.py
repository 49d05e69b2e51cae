"""QuantizeLinear, DequantizeLinear and DynamicQuantizeLinear on the GPU (NVRTC), with the
CPU backend's arithmetic step for step (``pydla.backends.cpu.kernels.quantize``), so the
results are bit-identical.

Quantize: ``x / scale`` in float32 (float64 where the importer's ``precision`` says so; a
half precision rounds the quotient to it), rounded half to even (``rint``), plus the zero
point, saturated to the target's range, converted as numpy converts (NaN gives 0).
Dequantize: ``(x - zero_point)`` in float32 times the scale, rounded once to the output
type. Scale and zero point are per tensor, per axis or per block (``block_size``) of the
logical axis, whatever the tensors' layout. One thread per element, grid-stride.

DynamicQuantizeLinear takes the tensor's range first: a reset kernel zeroes it (the range
always holds 0), a range kernel folds each thread's minimum and maximum into it by
compare-and-swap (a NaN wins, as numpy's min and max propagate it), then the quantize kernel
derives scale and zero point from it as the CPU backend does (scale 1 for a constant
input) and its first thread writes them out. No thread waits on another, so the host
emulator runs all three.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pydla.backends.cuda.codegen import decompose, defines, offset, storage_type
from pydla.backends.cuda.context import BindContext
from pydla.backends.cuda.layout import Placement
from pydla.backends.cuda.registry import Candidate, chain, kernel
from pydla.dtypes import DType
from pydla.errors import KernelError
from pydla.loadable.program import LayerInfo

_RANGES = {DType.INT8: (-128, 127), DType.UINT8: (0, 255), DType.INT16: (-32768, 32767),
           DType.UINT16: (0, 65535)}
# the quotient's rounding to the division precision (float32 and float64: none)
_ROUND_TO = {DType.FLOAT16: "round_f16((float)(q))", DType.BFLOAT16: "round_bf16((float)(q))",
             DType.FLOAT32: "(q)", DType.FLOAT64: "(q)"}

_LINEAR = r"""
extern "C" __global__ void KERNEL(const TX* __restrict__ x, const TS* __restrict__ scale,
    const TZ* __restrict__ zp, TY* __restrict__ y) {
  for (i64 e = blockIdx.x * (i64)blockDim.x + threadIdx.x; e < TOTAL;
       e += (i64)gridDim.x * blockDim.x) {
COORDS
    const i64 p = PARAM;
    BODY
  }
}
"""
_QUANTIZE = """const CT q = ROUND_Q((CT)ld(x + X_OFF) / (CT)ld(scale + p));
    CT v = RINT(q);
    if (HAS_ZP) v += (CT)ld(zp + p);
    v = v < (CT)LO ? (CT)LO : (v > (CT)HI ? (CT)HI : v);  /* NaN stays NaN, as np.clip */
    st(y + Y_OFF, (TY)f2i32((float)v));"""
_DEQUANTIZE = """float d = (float)ld(x + X_OFF);
    if (HAS_ZP) d -= (float)ld(zp + p);
    st(y + Y_OFF, d * (float)ld(scale + p));"""

# A tensor's range folded from every thread into one (lo, hi) pair in global memory by
# compare-and-swap (no thread waits on another); DynamicQuantizeLinear's and the LSTM's
# ``quantize_hidden`` round trip (recurrent.py) start from (0, 0): the range holds 0.
RANGE_FOLD = r"""
/* a NaN wins, as numpy's min and max propagate it */
__device__ __forceinline__ float pick(float cur, float v, bool lower) {
  if (cur != cur || v != v) return cur != cur ? cur : v;
  return (lower ? v < cur : v > cur) ? v : cur;
}
__device__ __forceinline__ void fold(float* at, float v, bool lower) {
  unsigned* word = reinterpret_cast<unsigned*>(at);
  unsigned old = *word;
  while (true) {
    const unsigned want = __float_as_uint(pick(__uint_as_float(old), v, lower));
    if (want == old) return;
    const unsigned seen = atomicCAS(word, old, want);
    if (seen == old) return;
    old = seen;
  }
}
"""
_DYNAMIC = RANGE_FOLD + r"""
extern "C" __global__ void dq_reset(float* __restrict__ range) {
  if (blockIdx.x == 0 && threadIdx.x == 0) { range[0] = 0.f; range[1] = 0.f; }
}
extern "C" __global__ void dq_range(const TX* __restrict__ x, float* __restrict__ range) {
  float lo = 0.f, hi = 0.f;
  for (i64 e = blockIdx.x * (i64)blockDim.x + threadIdx.x; e < TOTAL;
       e += (i64)gridDim.x * blockDim.x) {
COORDS
    const float v = ld(x + X_OFF);
    lo = pick(lo, v, true);
    hi = pick(hi, v, false);
  }
  fold(range, lo, true);
  fold(range + 1, hi, false);
}
extern "C" __global__ void dq_quantize(const TX* __restrict__ x,
    const float* __restrict__ range, TY* __restrict__ y, TS* __restrict__ y_scale,
    unsigned char* __restrict__ y_zp) {
  const float lo = range[0], hi = range[1];
  const float scale = hi == lo ? 1.f : (hi - lo) / 255.f;
  float zp = 0.f - lo / scale;
  zp = rintf(zp < 0.f ? 0.f : (zp > 255.f ? 255.f : zp));
  for (i64 e = blockIdx.x * (i64)blockDim.x + threadIdx.x; e < TOTAL;
       e += (i64)gridDim.x * blockDim.x) {
COORDS
    float v = rintf(ld(x + X_OFF) / scale) + zp;
    v = v < 0.f ? 0.f : (v > 255.f ? 255.f : v);
    st(y + Y_OFF, (unsigned char)f2i32(v));
  }
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    st(y_scale, scale);
    *y_zp = (unsigned char)f2i32(zp);
  }
}
"""
_RANGE_THREADS = 64 * 256  # few enough that the compare-and-swap loops rarely collide


def _walk(x: Placement) -> tuple[str, list[str]]:
    """Statements splitting thread index ``e`` into x's logical coordinates (in its memory
    order, so neighbouring threads touch neighbouring elements), and the coordinates."""
    order = x.physical_order()
    lines = decompose("e", [x.shape[d] for d in order], "c_", "    ")
    lines += [f"    const i64 c{d} = c_{i};" for i, d in enumerate(order)]
    return "\n".join(lines), [f"c{d}" for d in range(len(x.shape))]


def _param_index(layer: LayerInfo, x: Placement, scale: Placement, coords: list[str]) -> str:
    """The scale's (and zero point's) element for the thread's coordinates."""
    if scale.size == 1:
        return "0"
    axis, block = int(layer.attrs["axis"]), int(layer.attrs.get("block_size", 0))
    if block <= 0:
        return coords[axis]
    # a blocked scale has the input's shape with the axis divided by the block (rounded up)
    sizes = list(scale.shape)
    rows = [f"({c}) / {block}" if d == axis else c for d, c in enumerate(coords)]
    strides = [int(np.prod(sizes[d + 1:], dtype=np.int64)) for d in range(len(sizes))]
    return offset(rows, strides)


def _params(ctx: BindContext, layer: LayerInfo) -> tuple[Placement, Placement, Placement,
                                                          Placement | None]:
    x, scale = ctx.place(layer.inputs[0]), ctx.place(layer.inputs[1])
    zp_index = layer.inputs[2] if len(layer.inputs) > 2 else -1
    zp = ctx.place(zp_index) if zp_index >= 0 else None
    return x, scale, ctx.place(layer.outputs[0]), zp


@kernel("QuantizeLinear", "DequantizeLinear")
def bind_linear(ctx: BindContext, layer: LayerInfo) -> list[Candidate]:
    x, scale, y, zp = _params(ctx, layer)
    where = layer.name
    if y.size == 0:
        return [Candidate("nvrtc", lambda stream: None)]
    walk, coords = _walk(x)
    values: dict[str, Any] = {
        "TX": storage_type(x.dtype, where), "TS": storage_type(scale.dtype, where),
        "TZ": storage_type(zp.dtype, where) if zp is not None else "unsigned char",
        "TY": storage_type(y.dtype, where), "TOTAL": x.size, "HAS_ZP": int(zp is not None)}
    if layer.op == "QuantizeLinear":
        if y.dtype not in _RANGES:
            raise KernelError(where, layer.op, f"quantizes to int8/uint8/int16/uint16, not "
                              f"{y.dtype.name.lower()}")
        precision = DType(int(layer.attrs.get("precision", int(DType.FLOAT32))))
        if precision not in _ROUND_TO:
            raise KernelError(where, layer.op, f"divides in float16/bfloat16/float32/"
                              f"float64, not {precision.name.lower()}")
        double = precision is DType.FLOAT64
        values.update({"CT": "double" if double else "float", "LO": _RANGES[y.dtype][0],
                       "HI": _RANGES[y.dtype][1], "RINT": "rint" if double else "rintf",
                       "ROUND_Q(q)": _ROUND_TO[precision]})
        body, name = _QUANTIZE, "quantize_linear"
    else:
        if y.dtype not in (DType.FLOAT32, DType.FLOAT16, DType.BFLOAT16):
            raise KernelError(where, layer.op, f"dequantizes to float32/float16/bfloat16, "
                              f"not {y.dtype.name.lower()}")
        body, name = _DEQUANTIZE, "dequantize_linear"
    body = (body.replace("X_OFF", offset(coords, x.strides))
            .replace("Y_OFF", offset(coords, y.strides)))
    source = defines(values) + (
        _LINEAR.replace("KERNEL", name).replace("COORDS", walk)
        .replace("PARAM", _param_index(layer, x, scale, coords)).replace("BODY", body))
    args = [np.uint64(x.ptr), np.uint64(scale.ptr), np.uint64(zp.ptr if zp else 0),
            np.uint64(y.ptr)]
    return [Candidate("nvrtc", ctx.kernel_launch(source, name, x.size, args))]


@kernel("DynamicQuantizeLinear")
def bind_dynamic_quantize(ctx: BindContext, layer: LayerInfo) -> list[Candidate]:
    x = ctx.place(layer.inputs[0])
    y, y_scale, y_zp = (ctx.place(o) for o in layer.outputs[:3])
    where = layer.name
    if (y.dtype, y_zp.dtype) != (DType.UINT8, DType.UINT8) or y_scale.dtype not in (
            DType.FLOAT32, DType.FLOAT16, DType.BFLOAT16):
        raise KernelError(where, layer.op, "writes uint8 values and zero point and a float "
                          f"scale, not {y.dtype.name.lower()}, {y_zp.dtype.name.lower()} and "
                          f"{y_scale.dtype.name.lower()}")
    walk, coords = _walk(x)
    # the scale is computed in float32 and stored in its tensor's type (fp16 builds)
    values = {"TX": storage_type(x.dtype, where), "TY": "unsigned char", "TOTAL": x.size,
              "TS": storage_type(y_scale.dtype, where)}
    source = defines(values) + (
        _DYNAMIC.replace("COORDS", walk).replace("X_OFF", offset(coords, x.strides))
        .replace("Y_OFF", offset(coords, y.strides)))
    range_ptr = np.uint64(ctx.scratch(8))
    return [Candidate("nvrtc", chain(
        ctx.kernel_launch(source, "dq_reset", 1, [range_ptr]),
        ctx.kernel_launch(source, "dq_range", min(x.size, _RANGE_THREADS),
                          [np.uint64(x.ptr), range_ptr]),
        ctx.kernel_launch(source, "dq_quantize", max(x.size, 1),
                          [np.uint64(x.ptr), range_ptr, np.uint64(y.ptr), np.uint64(y_scale.ptr),
                           np.uint64(y_zp.ptr)])))]
