"""The fast tactic of the int8 layers: QConv (2-D) and QGemm on pydla.backends.cpu.kernels.int8
(u8×s8→s32 vector kernels, the ISA path chosen when the layer is bound).

Those kernels take int8 weights with a zero weight zero point, per-channel float32 scales
and an int32 bias; this module derives them from the layer's inputs once per prebind (the
loadable's parameters are read-only; a writable one is a network input and is read again
on every run). Anything else the layer may hold — uint8 weights, a non-zero weight zero
point, a per-row activation zero point — runs the reference kernel, chosen at bind time.
The semantics are the reference's (qlinear_reference), which the tests hold both to.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

import numpy as np

from pydla.backends.base import LayerSpec, RunFn
from pydla.backends.cpu.kernels import int8
from pydla.backends.cpu.kernels.qlinear_reference import (
    BIAS,
    RESIDUAL,
    W_SCALE,
    W_ZP,
    X_SCALE,
    X_ZP,
    Y_SCALE,
    Y_ZP,
    W,
    X,
    bind_qconv,
    bind_qgemm,
    quantized_bounds,
)
from pydla.backends.cpu.registry import tactic
from pydla.backends.cpu.steps import PreboundKernel
from pydla.dtypes import DType

Inputs = Sequence[np.ndarray | None]
Thunk = Callable[[], object]
_OUT = (DType.UINT8, DType.INT8, DType.INT32, DType.FLOAT32)


def _applies(spec: LayerSpec, rank: int) -> bool:
    x, w, y = spec.inputs[X], spec.inputs[W], spec.outputs[0]
    return (x is not None and w is not None and x.dtype in (DType.UINT8, DType.INT8)
            and w.dtype is DType.INT8 and y.dtype in _OUT and len(w.shape) == rank
            and (len(x.shape) == rank if spec.op == "QConv" else len(x.shape) >= 2))


def _scalar(v: np.ndarray | None, default: float = 0.0) -> float:
    return default if v is None else float(v.reshape(-1)[0])


def _requant(spec: LayerSpec, inputs: Inputs, n: int) -> int8.Requant | None:
    """K's Requant for these parameters, or None when the fast kernels cannot run them."""
    w_zp, x_zp = inputs[W_ZP], inputs[X_ZP]
    if (w_zp is not None and np.any(w_zp)) or (x_zp is not None and x_zp.size != 1):
        return None
    y = spec.outputs[0].dtype
    bias_in = inputs[BIAS] if len(inputs) > BIAS else None
    bias = np.zeros(n, np.int32) if bias_in is None else \
        np.ascontiguousarray(bias_in.reshape(-1), np.int32)
    a_zp = int(_scalar(x_zp))
    if y is DType.INT32:
        return int8.Requant(a_zp, bias, np.ones(n, np.float32), 0, 0.0, 0.0, np.dtype(np.int32))
    x_scale, w_scale = inputs[X_SCALE], inputs[W_SCALE]
    if x_scale is None or w_scale is None:
        return None
    mult = np.float32(_scalar(x_scale)) * np.broadcast_to(
        w_scale.reshape(-1).astype(np.float32), (n,))
    clip = spec.attrs.get("clip")
    y_scale = inputs[Y_SCALE]
    if y_scale is None:  # float output: the clamp is in the real domain
        lo, hi = (float(clip[0]), float(clip[1])) if clip else (-np.inf, np.inf)
        return int8.Requant(a_zp, bias, mult.astype(np.float32), 0, lo, hi,
                            np.dtype(np.float32))
    ys = np.float32(_scalar(y_scale))
    y_zp = inputs[Y_ZP]
    zp = int(_scalar(y_zp))
    qtype = np.dtype(y.np) if y in (DType.UINT8, DType.INT8) else (
        y_zp.dtype if y_zp is not None else np.dtype(np.uint8))
    lo, hi = quantized_bounds(clip, np.iinfo(qtype), ys, zp)
    res = spec.attrs.get("residual") or {"scale": ys, "zero_point": 0}
    return int8.Requant(a_zp, bias, (mult / ys).astype(np.float32), zp, lo, hi, qtype,
                        int(res["zero_point"]), float(np.float32(res["scale"]) / ys))


class _Int8Layer(PreboundKernel):
    """Prebinds K's kernel (or the reference, for parameters it does not take)."""

    def __init__(self, spec: LayerSpec, reference: RunFn) -> None:
        super().__init__()
        self.spec = spec
        self.reference = reference
        self.packed: tuple[np.ndarray, int8.PackedWeights] | None = None

    def _weights(self, w: np.ndarray) -> int8.PackedWeights:
        if self.packed is None or self.packed[0] is not w or w.flags.writeable:
            if self.spec.op == "QConv":
                packed = int8.pack_weights(np.ascontiguousarray(w), int(
                    self.spec.attrs.get("group", 1)), self.spec.name)
            else:  # QGemm multiplies by (K, N); K's GEMM by w.T with w (N, K)
                packed = int8.pack_weights(np.ascontiguousarray(w.T), 1, self.spec.name)
            self.packed = (w, packed)
        return self.packed[1]

    def prebind(self, inputs: Inputs, outputs: Sequence[np.ndarray]) -> Thunk:
        params = [a for i, a in enumerate(inputs) if i != X and a is not None]
        if any(a.flags.writeable for a in params):  # network inputs: read them every run
            return lambda: self._bind(inputs, outputs)()
        return self._bind(inputs, outputs)

    def _bind(self, inputs: Inputs, outputs: Sequence[np.ndarray]) -> Thunk:
        x, w, out = inputs[X], inputs[W], outputs[0]
        assert x is not None and w is not None
        n = w.shape[0] if self.spec.op == "QConv" else w.shape[1]
        rq = _requant(self.spec, inputs, n)
        if rq is None or not x.flags.c_contiguous or not out.flags.c_contiguous:
            return lambda: self.reference(inputs, outputs)
        packed = self._weights(w)
        residual = inputs[RESIDUAL] if len(inputs) > RESIDUAL else None
        if residual is not None and not residual.flags.c_contiguous:
            return lambda: self.reference(inputs, outputs)
        if out.dtype == np.float32 and inputs[Y_SCALE] is not None:
            # DQ(Q(·)) in the kernel's epilogue: no second pass over the output
            rq = replace(rq, out_dtype=np.dtype(np.float32),
                         dequantize_scale=float(np.float32(_scalar(inputs[Y_SCALE]))))
        if self.spec.op == "QConv":
            a = self.spec.attrs
            return int8.bind_qconv2d(x, packed, rq, a["strides"], _pads(a["pads"]),
                                     a["dilations"], out, residual, name=self.spec.name)
        rows = x.reshape(-1, x.shape[-1])
        return int8.bind_qgemm(rows, packed, rq, out.reshape(-1, n),
                               None if residual is None else residual.reshape(-1, n),
                               name=self.spec.name)


def _pads(pads: Sequence[int]) -> tuple[int, int, int, int]:
    """ONNX's [top, left, bottom, right] is K's (top, left, bottom, right)."""
    return int(pads[0]), int(pads[1]), int(pads[2]), int(pads[3])


@tactic("QConv", "int8", applies=lambda spec: _applies(spec, 4), priority=10)
def bind_qconv_int8(spec: LayerSpec) -> RunFn:
    return _Int8Layer(spec, bind_qconv(spec))


@tactic("QGemm", "int8", applies=lambda spec: _applies(spec, 2), priority=10)
def bind_qgemm_int8(spec: LayerSpec) -> RunFn:
    return _Int8Layer(spec, bind_qgemm(spec))
