"""Importers of the signal-processing ops: DFT (opsets 17 and 20), STFT, the window
generators HannWindow, HammingWindow, BlackmanWindow, and MelWeightMatrix.

DFT's canonical attributes: ``axis`` (non-negative, counted over the input's rank including
the trailing complex axis), ``length`` (the resolved DFT size), ``inverse``, ``onesided``.
STFT's: ``frame_step``, ``frame_length`` and ``onesided``; its window stays a data input.
The generators' outputs depend only on parameter inputs, so they become constants here.
"""

from __future__ import annotations

import math

import numpy as np

from pydla.dtypes import DType, to_storage
from pydla.frontend.onnx.importer import ImportContext, OnnxNode
from pydla.frontend.onnx.registry import onnx_op
from pydla.ir import Value


def _scalar(ctx: ImportContext, v: Value | None, what: str) -> float:
    return ctx.const_value(v, what).reshape(-1)[0].item()


def _output_type(ctx: ImportContext, node: OnnxNode) -> DType:
    code = int(node.attrs_with_defaults().get("output_datatype", int(DType.FLOAT32)))
    try:
        return DType(code)
    except ValueError:
        raise ctx.error(f"output_datatype {code} is not supported") from None


@onnx_op("DFT", since=17)
def import_dft(ctx: ImportContext, node: OnnxNode) -> list[Value]:
    x = node.input(0)
    if x is None:
        raise ctx.error("input is required")
    a = node.attrs_with_defaults()
    rank = len(x.shape)
    if rank < 2 or x.shape[-1] not in (1, 2):
        raise ctx.error(f"input shape {x.shape} does not end in a complex axis of 1 or 2")
    if node.opset >= 20:
        axis_in = node.input(2)
        axis = -2 if axis_in is None else int(_scalar(ctx, axis_in, "DFT axis"))
    else:
        axis = int(a.get("axis", 1))
    if not -rank <= axis <= rank - 2 or axis == -1:
        raise ctx.error(f"axis {axis} is not a signal axis of a rank-{rank} input")
    axis %= rank
    inverse, onesided = int(a.get("inverse", 0)), int(a.get("onesided", 0))
    if onesided and not inverse and x.shape[-1] != 1:
        raise ctx.error("a one-sided forward DFT needs a real input")
    if onesided and inverse and x.shape[-1] != 2:
        raise ctx.error("a one-sided inverse DFT needs a complex input")
    size = x.shape[axis]
    length = 2 * (size - 1) if onesided and inverse else size
    if node.input(1) is not None:
        length = int(_scalar(ctx, node.input(1), "dft_length"))
    if length < 1:
        raise ctx.error(f"dft_length {length} must be positive")
    shape = list(x.shape)
    shape[axis] = length // 2 + 1 if onesided and not inverse else length
    shape[-1] = 1 if onesided and inverse else 2
    attrs = {"axis": axis, "length": length, "inverse": inverse, "onesided": onesided}
    return ctx.emit("DFT", [x], attrs, out_types=[(tuple(shape), x.dtype)])


@onnx_op("STFT", since=17)
def import_stft(ctx: ImportContext, node: OnnxNode) -> list[Value]:
    signal, window = node.input(0), node.input(2)
    if signal is None:
        raise ctx.error("signal is required")
    if len(signal.shape) != 3 or signal.shape[-1] not in (1, 2):
        raise ctx.error(f"signal shape {signal.shape} is not (batch, length, 1|2)")
    step = int(_scalar(ctx, node.input(1), "STFT frame_step"))
    if node.input(3) is not None:
        length = int(_scalar(ctx, node.input(3), "STFT frame_length"))
    else:
        length = signal.shape[1] if window is None else window.shape[0]
    if window is not None and window.shape != (length,):
        raise ctx.error(f"window shape {window.shape} does not match frame_length {length}")
    if step < 1 or not 1 <= length <= signal.shape[1]:
        raise ctx.error(f"frame_step {step} / frame_length {length} do not fit a signal of "
                        f"length {signal.shape[1]}")
    onesided = int(node.attrs_with_defaults().get("onesided", 1))
    frames = (signal.shape[1] - length) // step + 1
    bins = length // 2 + 1 if onesided else length
    attrs = {"frame_step": step, "frame_length": length, "onesided": onesided}
    return ctx.emit("STFT", [signal, window], attrs,
                    out_types=[((signal.shape[0], frames, bins, 2), signal.dtype)])


# Cosine-sum windows: w[n] = Σ_k c_k · cos(2πkn / N), with N = size (periodic) or size - 1.
_WINDOWS = {
    "HammingWindow": (25.0 / 46.0, -21.0 / 46.0),
    "BlackmanWindow": (0.42, -0.5, 0.08),
    "HannWindow": (0.5, -0.5),
}


@onnx_op("HannWindow", "HammingWindow", "BlackmanWindow", since=17)
def import_window(ctx: ImportContext, node: OnnxNode) -> list[Value]:
    size = int(_scalar(ctx, node.input(0), f"{node.op_type} size"))
    if size < 0:
        raise ctx.error(f"window size {size} is negative")
    periodic = int(node.attrs_with_defaults().get("periodic", 1))
    period = size if periodic else size - 1
    ctx.check_constant_size((size,), DType.FLOAT64, node.op_type)
    n = np.arange(size, dtype=np.float64)
    w = np.zeros(size)
    for k, c in enumerate(_WINDOWS[node.op_type]):
        w += c * np.cos(2 * math.pi * k * n / max(period, 1))
    dtype = _output_type(ctx, node)
    return [ctx.const(to_storage(w, dtype), dtype)]


@onnx_op("MelWeightMatrix", since=17)
def import_mel_weight_matrix(ctx: ImportContext, node: OnnxNode) -> list[Value]:
    bins = int(_scalar(ctx, node.input(0), "num_mel_bins"))
    dft_length = int(_scalar(ctx, node.input(1), "dft_length"))
    rate = int(_scalar(ctx, node.input(2), "sample_rate"))
    low = float(_scalar(ctx, node.input(3), "lower_edge_hertz"))
    high = float(_scalar(ctx, node.input(4), "upper_edge_hertz"))
    if bins < 1 or dft_length < 1 or rate < 1 or not 0 <= low < high:
        raise ctx.error("MelWeightMatrix needs positive sizes and 0 ≤ lower < upper edge")
    ctx.check_constant_size((dft_length // 2 + 1, bins), DType.FLOAT64, "MelWeightMatrix")
    # As ONNX's reference: band edges evenly spaced in mel, snapped to DFT bins.
    mel_low = 2595 * math.log10(1 + low / 700)
    mel_high = 2595 * math.log10(1 + high / 700)
    step = (mel_high - mel_low) / (bins + 2)
    hz = 700 * (10 ** ((np.arange(bins + 2) * step + mel_low) / 2595) - 1)
    edges = (((dft_length + 1) * hz) // rate).astype(np.int64)
    if edges.max() > dft_length // 2:
        raise ctx.error("upper_edge_hertz lies above the Nyquist frequency")
    out = np.zeros((dft_length // 2 + 1, bins))
    for i in range(bins):
        lo, mid, hi = edges[i], edges[i + 1], edges[i + 2]
        if mid == lo:
            out[mid, i] = 1
        else:
            out[lo:mid + 1, i] = (np.arange(lo, mid + 1) - lo) / (mid - lo)
        if hi > mid:
            out[mid:hi, i] = (hi - np.arange(mid, hi)) / (hi - mid)
    dtype = _output_type(ctx, node)
    return [ctx.const(to_storage(out, dtype), dtype)]
