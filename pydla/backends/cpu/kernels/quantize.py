"""CPU kernels of linear quantization (QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear)
and onnxruntime's QLinearSoftmax.

Quantization rounds half to even (``np.rint``) and saturates to the target's range. The
work is done in float32 (float64 when the importer asks for it): zero points and quantized
values of at most 16 bits are exact there.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from pydla.backends.base import LayerSpec, RunFn
from pydla.backends.cpu.registry import kernel
from pydla.dtypes import DType, bf16_to_f32, f32_to_bf16

Inputs = Sequence[np.ndarray | None]
Outputs = Sequence[np.ndarray]
Expand = Callable[[np.ndarray], np.ndarray]


def _expander(spec: LayerSpec) -> Expand:
    """Make a scale or zero point broadcastable against the input (per tensor/axis/block)."""
    x_shape = spec.inputs[0].shape
    p_shape = spec.inputs[1].shape
    axis = int(spec.attrs["axis"])
    block = int(spec.attrs["block_size"])
    if int(np.prod(p_shape, dtype=np.int64)) == 1:
        return lambda v: v.reshape(())
    if block:
        # Every scale covers `block` consecutive elements; the last block may be partial.
        keep = (slice(None),) * axis + (slice(0, x_shape[axis]),)
        return lambda v: np.repeat(v, block, axis=axis)[keep]
    shape = tuple(p_shape[0] if i == axis else 1 for i in range(len(x_shape)))
    return lambda v: v.reshape(shape)


def _round_to(q: np.ndarray, precision: DType) -> np.ndarray:
    """Round a float32 quotient to a half type, as a division in that type would."""
    if precision is DType.FLOAT16:
        return q.astype(np.float16).astype(np.float32)
    if precision is DType.BFLOAT16:
        return bf16_to_f32(f32_to_bf16(q))
    return q


@kernel("QuantizeLinear")
def bind_quantize(spec: LayerSpec) -> RunFn:
    expand = _expander(spec)
    precision = DType(int(spec.attrs["precision"]))
    ctype = np.float64 if precision is DType.FLOAT64 else np.float32
    info = np.iinfo(spec.outputs[0].dtype.np)
    lo, hi = float(info.min), float(info.max)

    def run(inputs: Inputs, outputs: Outputs) -> None:
        x, scale, zero_point = inputs[0], inputs[1], inputs[2]
        q = _round_to(np.divide(x.astype(ctype, copy=False), expand(scale).astype(ctype)),
                      precision)
        q = np.rint(q)
        if zero_point is not None:
            q += expand(zero_point).astype(ctype)
        np.clip(q, lo, hi, out=q)
        np.copyto(outputs[0], q, casting="unsafe")

    return run


@kernel("DequantizeLinear")
def bind_dequantize(spec: LayerSpec) -> RunFn:
    expand = _expander(spec)

    def run(inputs: Inputs, outputs: Outputs) -> None:
        x, scale, zero_point = inputs[0], inputs[1], inputs[2]
        d = x.astype(np.float32)
        if zero_point is not None:
            d -= expand(zero_point).astype(np.float32)
        np.multiply(d, expand(scale), out=outputs[0], casting="unsafe")

    return run


@kernel("DynamicQuantizeLinear")
def bind_dynamic_quantize(spec: LayerSpec) -> RunFn:
    def run(inputs: Inputs, outputs: Outputs) -> None:
        x = inputs[0].astype(np.float32, copy=False)
        # The range always includes 0 so that 0 is exactly representable.
        hi = np.float32(np.max(x, initial=0.0))
        lo = np.float32(np.min(x, initial=0.0))
        # A constant input has no range: onnxruntime then uses scale 1.
        scale = np.float32(1.0) if hi == lo else np.float32((hi - lo) / np.float32(255))
        zero_point = np.rint(np.clip(np.float32(0) - lo / scale, 0, 255))
        q = np.rint(x / scale)
        q += zero_point
        np.clip(q, 0, 255, out=q)
        np.copyto(outputs[0], q, casting="unsafe")
        outputs[1][...] = scale
        outputs[2][...] = zero_point

    return run


def _softmax_table(x_scale: float, reduce_len: int, signed: bool) -> np.ndarray:
    """onnxruntime's exp table: exp((i - 255 + shift)·x_scale) in double, stored as float32,
    where the shift keeps a row's sum of at most ``reduce_len`` values finite."""
    shift = math.log(float(np.finfo(np.float32).max) / reduce_len)
    shift = max(0.0, shift - 5.0) / x_scale
    table = np.empty(256, np.float32)
    for i in range(256):
        table[(i - 128) % 256 if signed else i] = math.exp((i - 255 + shift) * x_scale)
    return table


@kernel("QLinearSoftmax")
def bind_qlinear_softmax(spec: LayerSpec) -> RunFn:
    """com.microsoft QLinearSoftmax exactly as onnxruntime computes it (its quirks included:
    a lookup table of exp shifted by the row's maximum, a sequential float32 sum, the
    output scale taken as floor(1 / y_scale), x_zero_point unused)."""
    shape = spec.inputs[0].shape  # type: ignore[union-attr]
    axes = [int(a) for a in spec.attrs["axes"]]
    signed = spec.inputs[0].dtype is DType.INT8  # type: ignore[union-attr]
    reduce_len = int(np.prod([shape[a] for a in axes], dtype=np.int64))
    last = list(range(len(shape) - len(axes), len(shape)))

    def run(inputs: Inputs, outputs: Outputs) -> None:
        x, x_scale, y_scale = inputs[0], inputs[1], inputs[3]
        y_zp = inputs[4] if len(inputs) > 4 else None
        table = _softmax_table(float(x_scale.reshape(-1)[0]), reduce_len, signed)
        moved = np.moveaxis(x, axes, last)
        rows = moved.reshape(-1, reduce_len).astype(np.int32)
        top = rows.max(axis=1, keepdims=True)
        index = (rows + (127 - top)) % 256 if signed else rows + (255 - top)
        vt = table[index]
        vsum = np.add.accumulate(vt, axis=1, dtype=np.float32)[:, -1:]
        scale = np.float32(math.floor(np.float32(1.0) / np.float32(y_scale.reshape(-1)[0])))
        with np.errstate(divide="ignore", invalid="ignore"):
            vq = np.rint((vt * scale) / vsum)
        vq = np.where(vsum > 0, vq, 0).astype(np.int64)
        if y_zp is not None:
            vq += int(y_zp.reshape(-1)[0])
        vq = np.where(vq > 255, 255, vq)  # the only clamp onnxruntime applies
        y = vq.astype(np.uint8 if not signed else np.int64).astype(outputs[0].dtype)
        np.copyto(outputs[0], np.moveaxis(y.reshape(moved.shape), last, axes))

    return run
