"""Reference CPU kernels of the int8 layers QConv and QGemm (pydla.ops.QUANTIZED_LAYERS).

Exact integer semantics, as onnxruntime's QLinearConv/QLinearMatMul compute them:
``acc = Σ (x - x_zp)(w - w_zp[n]) + bias[n]`` accumulates in int32; a quantized output is
``clamp(round_half_even(float32(acc) * scale[n]) + y_zp, lo, hi)`` with
``scale[n] = float32(x_scale * w_scale[n]) / y_scale`` in float32 (MLAS's order). The
clamp is the output type's range narrowed by a folded Relu/Clip (``clip`` attribute, in the
real domain: quantizing its bounds is exact because quantization is monotonic).
Outputs: int8/uint8 (requantized), int32 (the raw accumulator: ConvInteger/MatMulInteger),
or float — requantized then dequantized when ``y_scale`` is given (a layer whose int8 output
only fed DequantizeLinear), else ``float32(acc) * x_scale * w_scale[n]``.
A folded residual Add (input ``residual``) is added before the clamp: in float32 to a float
output; to a quantized output as ``float32(r - r_zp) * float32(r_scale / y_scale)`` before
the one rounding (attribute ``residual`` = {scale, zero_point}), as the int8 kernels do.

The fast tactics (pydla.backends.cpu.kernels.int8) are tested against these.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numba import njit

from pydla.backends.base import LayerSpec, RunFn
from pydla.backends.cpu.kernels.conv import pad_spatial, windows
from pydla.backends.cpu.registry import kernel
from pydla.errors import KernelError
from pydla.ops import QUANTIZED_INPUTS

Inputs = Sequence[np.ndarray | None]
X, X_SCALE, X_ZP, W, W_SCALE, W_ZP, Y_SCALE, Y_ZP, BIAS, RESIDUAL = range(len(QUANTIZED_INPUTS))


@njit(cache=True, nogil=True, error_model="numpy")
def _gemm_s32(w: np.ndarray, cols: np.ndarray, acc: np.ndarray) -> None:  # pragma: no cover
    """acc (N, P) += w (N, K) @ cols (K, P), int16 operands, int32 accumulation; the inner
    loop runs along P so LLVM widens it into vector multiply-adds."""
    n_rows, depth = w.shape
    width = cols.shape[1]
    for n in range(n_rows):
        for k in range(depth):
            wv = np.int32(w[n, k])
            if wv == 0:
                continue
            for p in range(width):
                acc[n, p] += wv * np.int32(cols[k, p])


def _offset(q: np.ndarray, zp: np.ndarray | None, shape: tuple[int, ...]) -> np.ndarray:
    """``q - zp`` in int16 (exact for 8-bit operands), ``zp`` broadcast as ``shape``."""
    out = q.astype(np.int16)
    if zp is not None:
        out -= zp.astype(np.int16).reshape(shape if zp.size > 1 else ())
    return out


def _per_channel(v: np.ndarray, n: int, what: str, spec: LayerSpec) -> np.ndarray:
    flat = v.reshape(-1)
    if flat.size not in (1, n):
        raise KernelError(spec.name, spec.op, f"{what} has {flat.size} elements; expected 1 or "
                          f"{n} (one per output channel)")
    return flat


class _Output:
    """Turns the int32 accumulator into the layer's output (see the module docstring)."""

    def __init__(self, spec: LayerSpec, channels: int, channel_axis: int) -> None:
        self.spec = spec
        self.channels = channels
        self.axis = channel_axis
        out = spec.outputs[0].dtype.np
        self.dtype = np.dtype(out)
        clip = spec.attrs.get("clip")
        self.clip = (float(clip[0]), float(clip[1])) if clip else None

    def _shape(self, ndim: int) -> tuple[int, ...]:
        axis = self.axis % ndim
        return tuple(self.channels if i == axis else 1 for i in range(ndim))

    def write(self, acc: np.ndarray, inputs: Inputs, out: np.ndarray) -> None:
        if self.dtype == np.int32:
            np.copyto(out, acc)
            return
        x_scale, w_scale, y_scale = inputs[X_SCALE], inputs[W_SCALE], inputs[Y_SCALE]
        if x_scale is None or w_scale is None:
            raise KernelError(self.spec.name, self.spec.op, "a scaled output needs x_scale and "
                              "w_scale")
        ws = _per_channel(w_scale, self.channels, "w_scale", self.spec).astype(np.float32)
        mult = np.float32(x_scale.reshape(-1)[0]) * ws
        shape = self._shape(acc.ndim)
        residual = inputs[RESIDUAL] if len(inputs) > RESIDUAL else None
        if y_scale is None:
            real = acc.astype(np.float32) * mult.reshape(shape if mult.size > 1 else ())
            if residual is not None:  # a float residual Add, before the activation
                real += residual.reshape(real.shape)
            if self.clip is not None:
                np.clip(real, np.float32(self.clip[0]), np.float32(self.clip[1]), out=real)
            np.copyto(out, real, casting="unsafe")
            return
        ys = np.float32(y_scale.reshape(-1)[0])
        y_zp = inputs[Y_ZP]
        zp = 0 if y_zp is None else int(y_zp.reshape(-1)[0])
        qtype = self.dtype if self.dtype.kind in "iu" else (
            y_zp.dtype if y_zp is not None else np.dtype(np.uint8))
        lo, hi = quantized_bounds(self.clip, np.iinfo(qtype), ys, zp)
        scale = (mult / ys).astype(np.float32)
        q = acc.astype(np.float32) * scale.reshape(shape if scale.size > 1 else ())
        if residual is not None:  # an int8 residual at its own scale: one rounding
            rq = self.spec.attrs["residual"]
            r_scale = np.float32(np.float32(rq["scale"]) / ys)
            q += (residual.reshape(q.shape).astype(np.float32)
                  - np.float32(rq["zero_point"])) * r_scale
        q = np.rint(q)
        q += np.float32(zp)
        np.clip(q, lo, hi, out=q)
        if self.dtype.kind in "iu":
            np.copyto(out, q, casting="unsafe")
        else:  # the output only fed DequantizeLinear: dequantize what was quantized
            np.copyto(out, (q - np.float32(zp)) * ys, casting="unsafe")


def quantized_bounds(clip: Sequence[float] | None, info: np.iinfo, ys: np.float32,
                     zp: int) -> tuple[float, float]:
    """The output clamp in the quantized domain: the type's range, narrowed by a folded
    activation's real bounds quantized as QuantizeLinear would."""
    lo, hi = float(info.min), float(info.max)
    if clip is not None:
        for i, bound in enumerate(clip):
            if np.isfinite(bound):
                q = float(np.clip(np.rint(np.float32(bound) / ys) + zp, info.min, info.max))
                lo, hi = (max(lo, q), hi) if i == 0 else (lo, min(hi, q))
    return lo, hi


def _bias(inputs: Inputs, channels: int, spec: LayerSpec) -> np.ndarray | None:
    b = inputs[BIAS] if len(inputs) > BIAS else None
    return None if b is None else _per_channel(b, channels, "bias", spec).astype(np.int32)


@kernel("QConv")
def bind_qconv(spec: LayerSpec) -> RunFn:
    x, w, y = spec.inputs[X], spec.inputs[W], spec.outputs[0]
    if x is None or w is None or len(x.shape) < 3 or len(w.shape) != len(x.shape):
        raise KernelError(spec.name, spec.op, "needs an N-D image X and weights W of its rank")
    nd = len(x.shape) - 2
    a = spec.attrs
    strides, dilations = list(a["strides"]), list(a["dilations"])
    pads = list(a["pads"])
    group = int(a.get("group", 1))
    batch, channels = x.shape[:2]
    m, cg = w.shape[:2]
    kernel_shape = list(w.shape[2:])
    out_sizes = list(y.shape[2:])
    natural = [(i + pads[d] + pads[d + nd] - (k - 1) * dl - 1) // s + 1 for d, (i, k, dl, s)
               in enumerate(zip(x.shape[2:], kernel_shape, dilations, strides))]
    if channels != cg * group or m % group or y.shape[:2] != (batch, m) or natural != out_sizes:
        raise KernelError(spec.name, spec.op, f"X {x.shape}, W {w.shape}, output {y.shape} "
                          f"and attributes {dict(a)} do not agree")
    taps = int(np.prod(kernel_shape, dtype=np.int64))
    pixels = int(np.prod(out_sizes, dtype=np.int64))
    output = _Output(spec, m, 1)

    def run(inputs: Inputs, outputs: Sequence[np.ndarray]) -> None:
        xq, wq = inputs[X], inputs[W]
        assert xq is not None and wq is not None
        x_zp = inputs[X_ZP]
        if x_zp is not None and x_zp.size != 1:
            raise KernelError(spec.name, spec.op, "x_zero_point must have one element")
        wzp = inputs[W_ZP]
        if wzp is not None:
            _per_channel(wzp, m, "w_zero_point", spec)
        w16 = _offset(wq, wzp, (m,) + (1,) * (nd + 1)).reshape(group, m // group, cg * taps)
        # Padding with x_zp is padding the offset input with zeros.
        x16 = pad_spatial(_offset(xq, x_zp, ()), pads[:nd], pads[nd:], 0)
        cols = windows(x16, kernel_shape, strides, dilations, out_sizes)
        cols = np.ascontiguousarray(cols).reshape(batch, group, cg * taps, pixels)
        acc = np.zeros((batch, group, m // group, pixels), np.int32)
        for n in range(batch):
            for g in range(group):
                _gemm_s32(np.ascontiguousarray(w16[g]), cols[n, g], acc[n, g])
        acc = acc.reshape(batch, m, pixels)
        bias = _bias(inputs, m, spec)
        if bias is not None:
            acc += bias.reshape(m, 1)
        output.write(acc, inputs, outputs[0].reshape(batch, m, pixels))

    return run


@kernel("QGemm")
def bind_qgemm(spec: LayerSpec) -> RunFn:
    """MatMul semantics: A (..., M, K) @ B (..., K, N), batch dimensions broadcast."""
    a, b, y = spec.inputs[X], spec.inputs[W], spec.outputs[0]
    if a is None or b is None or len(a.shape) < 2 or len(b.shape) < 2 or \
            a.shape[-1] != b.shape[-2]:
        raise KernelError(spec.name, spec.op, f"A {a and a.shape} and B {b and b.shape} do not "
                          "multiply")
    rows, depth, n = a.shape[-2], a.shape[-1], b.shape[-1]
    batch_shape = y.shape[:-2]
    output = _Output(spec, n, -1)

    def run(inputs: Inputs, outputs: Sequence[np.ndarray]) -> None:
        aq, bq = inputs[X], inputs[W]
        assert aq is not None and bq is not None
        a_zp, b_zp = inputs[X_ZP], inputs[W_ZP]
        if a_zp is not None and a_zp.size not in (1, rows):
            raise KernelError(spec.name, spec.op, f"a_zero_point has {a_zp.size} elements; "
                              f"expected 1 or {rows} (one per row)")
        if b_zp is not None:
            _per_channel(b_zp, n, "b_zero_point", spec)
        a16 = np.broadcast_to(_offset(aq, a_zp, (rows, 1)), batch_shape + (rows, depth))
        b16 = np.broadcast_to(_offset(bq, b_zp, (n,)), batch_shape + (depth, n))
        acc = np.zeros(batch_shape + (n, rows), np.int32)
        for idx in np.ndindex(*batch_shape):
            _gemm_s32(np.ascontiguousarray(b16[idx].T), np.ascontiguousarray(a16[idx].T),
                      acc[idx])
        acc = np.swapaxes(acc, -1, -2)
        bias = _bias(inputs, n, spec)
        if bias is not None:
            acc = acc + bias
        output.write(acc, inputs, outputs[0])

    return run
