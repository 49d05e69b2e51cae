"""CPU kernels of the spectral ops DFT and STFT (numpy's FFT, at the input's precision as
ONNX's reference computes it).

Complex tensors are real tensors with a trailing axis of 2 (real, imaginary); a trailing
axis of 1 is a real signal. Canonical attributes carry the resolved lengths and axis.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from pydla.backends.base import LayerSpec
from pydla.backends.cpu.registry import reference

Inputs = Sequence[np.ndarray | None]


def _complex(x: np.ndarray) -> np.ndarray:
    """(…, 1|2) real storage → complex (…) of the same precision."""
    if x.shape[-1] == 1:
        return x[..., 0]
    c = np.empty(x.shape[:-1], np.complex128 if x.dtype == np.float64 else np.complex64)
    c.real, c.imag = x[..., 0], x[..., 1]
    return c


def _storage(c: np.ndarray) -> np.ndarray:
    return np.stack([c.real, c.imag], axis=-1)


@reference("DFT")
def dft(spec: LayerSpec, inputs: Inputs) -> list[np.ndarray]:
    a = spec.attrs
    c = _complex(inputs[0])
    axis, n = a["axis"], a["length"]
    if a["inverse"] and a["onesided"]:
        return [np.fft.irfft(c, n=n, axis=axis)[..., None]]
    if a["inverse"]:
        return [_storage(np.fft.ifft(c, n=n, axis=axis))]
    y = np.fft.fft(c, n=n, axis=axis)
    if a["onesided"]:
        y = np.take(y, np.arange(n // 2 + 1), axis=axis)
    return [_storage(y)]


@reference("STFT")
def stft(spec: LayerSpec, inputs: Inputs) -> list[np.ndarray]:
    a = spec.attrs
    signal = _complex(inputs[0])  # (B, L)
    window = inputs[1] if len(inputs) > 1 else None
    step, length = a["frame_step"], a["frame_length"]
    frames = spec.outputs[0].shape[1]
    idx = np.arange(frames)[:, None] * step + np.arange(length)[None, :]
    framed = signal[:, idx]  # (B, frames, length)
    if window is not None:
        framed = framed * window.astype(framed.real.dtype, copy=False)
    y = np.fft.fft(framed, n=length, axis=-1)
    if a["onesided"]:
        y = y[..., :length // 2 + 1]
    return [_storage(y)]
