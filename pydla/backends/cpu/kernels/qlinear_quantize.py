"""The fast tactic of QuantizeLinear and DequantizeLinear: one pass over the tensor, split
over the threads, for float32 per-tensor and per-axis quantization.

A quantized network that the int8 layers do not wholly absorb (onnxruntime's QDQ models
keep float BatchNormalization, HardSwish, Transpose … between Q/DQ pairs) runs hundreds of
these layers. The reference (quantize.py) is numpy: four to five passes over the tensor
with temporaries, ≈ 1 ns an element — measured on a ResNet-50 QDQ model (open_nsfw), its
370 Q and 373 DQ layers took 43 ms of a 68 ms run.

Semantics are the reference's, operation for operation in float32: ``q = clamp(rint(x /
scale) + zp, lo, hi)`` (a division, not a multiplication by the reciprocal: the two round
differently) and ``x = (float32(q) - float32(zp)) · scale``. Blocked scales, other
precisions (a float16 quotient) and non-float32 tensors stay on the reference.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
from numba import njit

from pydla.backends.base import LayerSpec, RunFn
from pydla.backends.cpu import threads
from pydla.backends.cpu.fork import fork_call
from pydla.backends.cpu.kernels.int8.thunk import bound
from pydla.backends.cpu.registry import tactic
from pydla.backends.cpu.steps import PreboundKernel
from pydla.dtypes import DType

Inputs = Sequence[np.ndarray | None]
Thunk = Callable[[], object]
_QUANT = (DType.UINT8, DType.INT8, DType.UINT16, DType.INT16)


@njit(cache=True, error_model="numpy", boundscheck=False)
def quantize_task(t: int, nthreads: int, x: np.ndarray, out: np.ndarray, scale: np.ndarray,
                  zp: np.ndarray, channels: int, inner: int, lo: np.float32,
                  hi: np.float32) -> None:  # pragma: no cover
    """Thread t's share of x (flat, float32) → out: row r (inner elements) has scale and
    zero point [r % channels]."""
    total = x.size
    start = t * total // nthreads
    end = (t + 1) * total // nthreads
    i = start
    while i < end:
        row = i // inner
        stop = min(end, (row + 1) * inner)
        s = scale[row % channels]
        z = zp[row % channels]
        src, dst = x[i:stop], out[i:stop]  # indices from 0: no negative-index wrap, so
        for j in range(stop - i):           # LLVM vectorizes the loop
            v = np.rint(src[j] / s) + z
            v = lo if v < lo else v
            v = hi if v > hi else v
            dst[j] = v
        i = stop


@njit(cache=True, error_model="numpy", boundscheck=False)
def dequantize_task(t: int, nthreads: int, x: np.ndarray, out: np.ndarray, scale: np.ndarray,
                    zp: np.ndarray, channels: int, inner: int) -> None:  # pragma: no cover
    """Thread t's share of x (flat, integer) → out (float32), rows as in quantize_task."""
    total = x.size
    start = t * total // nthreads
    end = (t + 1) * total // nthreads
    i = start
    while i < end:
        row = i // inner
        stop = min(end, (row + 1) * inner)
        s = scale[row % channels]
        z = zp[row % channels]
        src, dst = x[i:stop], out[i:stop]
        for j in range(stop - i):
            dst[j] = (np.float32(src[j]) - z) * s
        i = stop


def _per_axis(spec: LayerSpec) -> tuple[int, int]:
    """(channels, inner): the scale's length and the elements each of its values covers."""
    shape = spec.inputs[0].shape
    if int(np.prod(spec.inputs[1].shape, dtype=np.int64)) == 1:
        return 1, max(1, int(np.prod(shape, dtype=np.int64)))
    axis = int(spec.attrs["axis"]) % len(shape)
    return int(shape[axis]), max(1, int(np.prod(shape[axis + 1:], dtype=np.int64)))


def _applies(spec: LayerSpec, quantize: bool) -> bool:
    x, scale, y = spec.inputs[0], spec.inputs[1], spec.outputs[0]
    if x is None or scale is None or scale.dtype is not DType.FLOAT32 or \
            int(spec.attrs.get("block_size", 0)):
        return False
    if quantize:
        return (x.dtype is DType.FLOAT32 and y.dtype in _QUANT
                and int(spec.attrs.get("precision", DType.FLOAT32)) == int(DType.FLOAT32))
    return x.dtype in (*_QUANT, DType.INT32) and y.dtype is DType.FLOAT32


class _QDQLayer(PreboundKernel):
    def __init__(self, spec: LayerSpec, quantize: bool) -> None:
        super().__init__()
        self.spec = spec
        self.quantize = quantize
        self.channels, self.inner = _per_axis(spec)

    def _params(self, inputs: Inputs) -> tuple[np.ndarray, np.ndarray]:
        scale = np.ascontiguousarray(np.broadcast_to(
            np.asarray(inputs[1], np.float32).reshape(-1), (self.channels,)))
        zp_in = inputs[2] if len(inputs) > 2 else None
        zp = np.zeros(self.channels, np.float32) if zp_in is None else np.ascontiguousarray(
            np.broadcast_to(zp_in.reshape(-1).astype(np.float32), (self.channels,)))
        return scale, zp

    def prebind(self, inputs: Inputs, outputs: Sequence[np.ndarray]) -> Thunk:
        if any(a is not None and a.flags.writeable for a in inputs[1:]):
            return lambda: self._bind(inputs, outputs)()  # network inputs: read every run
        return self._bind(inputs, outputs)

    def _bind(self, inputs: Inputs, outputs: Sequence[np.ndarray]) -> Thunk:
        x, out = inputs[0], outputs[0]
        assert x is not None
        scale, zp = self._params(inputs)
        flat_x, flat_out = x.reshape(-1), out.reshape(-1)
        n = threads.configure() if threads.parallel_pays(x.size) else 1
        if self.quantize:
            info = np.iinfo(out.dtype)
            call = fork_call(quantize_task, n, n, flat_x, flat_out, scale, zp, self.channels,
                             self.inner, np.float32(info.min), np.float32(info.max))
        else:
            call = fork_call(dequantize_task, n, n, flat_x, flat_out, scale, zp,
                             self.channels, self.inner)
        return bound((call,), (scale, zp, flat_x, flat_out))


@tactic("QuantizeLinear", "fast", applies=lambda spec: _applies(spec, True), priority=10)
def bind_quantize_fast(spec: LayerSpec) -> RunFn:
    return _QDQLayer(spec, True)


@tactic("DequantizeLinear", "fast", applies=lambda spec: _applies(spec, False), priority=10)
def bind_dequantize_fast(spec: LayerSpec) -> RunFn:
    return _QDQLayer(spec, False)
