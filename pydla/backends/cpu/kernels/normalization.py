"""CPU kernels of the normalizations: BatchNormalization, InstanceNormalization,
LayerNormalization, GroupNormalization, RMSNormalization, LpNormalization, LRN,
MeanVarianceNormalization.

Statistics are computed in the input's float type (float32 for widened half tensors, as
onnxruntime does) with a two-pass variance, which avoids E[x²]-E[x]² cancellation.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from pydla.backends.base import LayerSpec, RunFn
from pydla.backends.cpu.registry import kernel, reference


def _moments(x: np.ndarray, axes: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """Mean and (population) variance over ``axes``, kept as size-1 dims."""
    mean = np.mean(x, axis=axes, keepdims=True)
    d = x - mean
    return mean, np.mean(d * d, axis=axes, keepdims=True)


def _per_channel(p: np.ndarray, x_shape: tuple[int, ...]) -> np.ndarray:
    """A (C,) parameter shaped to broadcast over (N, C, spatial…)."""
    return p.reshape((-1,) + (1,) * (len(x_shape) - 2))


def _trailing(spec: LayerSpec) -> tuple[int, ...]:
    """The normalised axes of Layer/RMSNormalization: ``axis`` to the last."""
    x = spec.inputs[0]
    assert x is not None
    return tuple(range(int(spec.attrs["axis"]), len(x.shape)))


@kernel("BatchNormalization")
def bind_batch_normalization(spec: LayerSpec) -> RunFn:
    eps = float(spec.attrs.get("epsilon", 1e-5))
    shape = spec.outputs[0].shape

    def run(inputs: Sequence[np.ndarray | None], outputs: Sequence[np.ndarray]) -> None:
        x, scale, bias, mean, var = inputs[:5]
        assert x is not None and scale is not None and bias is not None
        assert mean is not None and var is not None
        y = outputs[0]
        ft = y.dtype
        inv = scale.astype(ft, copy=False) / np.sqrt(var.astype(ft, copy=False) + ft.type(eps))
        shift = bias.astype(ft, copy=False) - mean.astype(ft, copy=False) * inv
        np.multiply(x, _per_channel(inv, shape), out=y)
        y += _per_channel(shift, shape)

    return run


@kernel("InstanceNormalization")
def bind_instance_normalization(spec: LayerSpec) -> RunFn:
    eps = float(spec.attrs.get("epsilon", 1e-5))
    axes = tuple(range(2, len(spec.outputs[0].shape)))

    def run(inputs: Sequence[np.ndarray | None], outputs: Sequence[np.ndarray]) -> None:
        x, scale, bias = inputs[:3]
        assert x is not None and scale is not None and bias is not None
        y = outputs[0]
        mean, var = _moments(x, axes)
        inv = _per_channel(scale, x.shape) / np.sqrt(var + x.dtype.type(eps))
        np.multiply(x - mean, inv, out=y)
        y += _per_channel(bias, x.shape)

    return run


@reference("LayerNormalization")
def layer_normalization(spec: LayerSpec,
                        inputs: Sequence[np.ndarray | None]) -> list[np.ndarray]:
    x, scale, bias = (list(inputs) + [None])[:3]
    assert x is not None and scale is not None
    axes = _trailing(spec)
    mean, var = _moments(x, axes)
    inv_std = 1 / np.sqrt(var + x.dtype.type(spec.attrs.get("epsilon", 1e-5)))
    y = (x - mean) * inv_std * scale
    if bias is not None:
        y += bias
    return [y, mean, inv_std][:len(spec.outputs)]


@kernel("GroupNormalization")
def bind_group_normalization(spec: LayerSpec) -> RunFn:
    eps = float(spec.attrs.get("epsilon", 1e-5))
    groups = int(spec.attrs["num_groups"])
    shape = spec.outputs[0].shape
    channels = shape[1]

    def per_channel(p: np.ndarray) -> np.ndarray:
        # GroupNormalization-18 has one scale/bias per group, 21 one per channel.
        if p.size != channels:
            p = np.repeat(p.reshape(-1), channels // groups)
        return _per_channel(p, shape)

    def run(inputs: Sequence[np.ndarray | None], outputs: Sequence[np.ndarray]) -> None:
        x, scale, bias = inputs[:3]
        assert x is not None and scale is not None and bias is not None
        y = outputs[0]
        xg = x.reshape(shape[0], groups, -1)
        mean, var = _moments(xg, (2,))
        normed = ((xg - mean) / np.sqrt(var + x.dtype.type(eps))).reshape(shape)
        np.multiply(normed, per_channel(scale), out=y)
        y += per_channel(bias)

    return run


@kernel("RMSNormalization")
def bind_rms_normalization(spec: LayerSpec) -> RunFn:
    eps = float(spec.attrs.get("epsilon", 1e-5))
    axes = _trailing(spec)

    def run(inputs: Sequence[np.ndarray | None], outputs: Sequence[np.ndarray]) -> None:
        x, scale = inputs[:2]
        assert x is not None and scale is not None
        ms = np.mean(x * x, axis=axes, keepdims=True)
        np.multiply(x / np.sqrt(ms + x.dtype.type(eps)), scale, out=outputs[0])

    return run


@kernel("LpNormalization")
def bind_lp_normalization(spec: LayerSpec) -> RunFn:
    axis = int(spec.attrs["axis"])
    p = int(spec.attrs.get("p", 2))

    def run(inputs: Sequence[np.ndarray | None], outputs: Sequence[np.ndarray]) -> None:
        x = inputs[0]
        assert x is not None
        if p == 1:
            norm = np.sum(np.abs(x), axis=axis, keepdims=True)
        else:
            norm = np.sqrt(np.sum(x * x, axis=axis, keepdims=True))
        # A zero vector stays zero (0/0 would be NaN), as onnxruntime and ONNX's reference do.
        np.divide(x, norm, out=outputs[0], where=norm != 0)
        outputs[0][np.broadcast_to(norm == 0, x.shape)] = 0

    return run


@kernel("LRN")
def bind_lrn(spec: LayerSpec) -> RunFn:
    a = spec.attrs
    size = int(a["size"])
    alpha, beta, bias = float(a.get("alpha", 1e-4)), float(a.get("beta", 0.75)), \
        float(a.get("bias", 1.0))
    before = (size - 1) // 2  # channels below c in its window; the rest are above

    def run(inputs: Sequence[np.ndarray | None], outputs: Sequence[np.ndarray]) -> None:
        x = inputs[0]
        assert x is not None
        c = x.shape[1]
        sq = x * x
        padded = np.zeros((x.shape[0], c + size - 1) + x.shape[2:], x.dtype)
        padded[:, before:before + c] = sq
        total = np.zeros_like(sq)
        for i in range(size):  # one shifted channel slice per window position
            total += padded[:, i:i + c]
        y = outputs[0]
        np.multiply(total, x.dtype.type(alpha / size), out=y)
        y += x.dtype.type(bias)
        np.power(y, x.dtype.type(beta), out=y)
        np.divide(x, y, out=y)

    return run


@kernel("MeanVarianceNormalization")
def bind_mean_variance_normalization(spec: LayerSpec) -> RunFn:
    axes = tuple(int(v) for v in spec.attrs["axes"])

    def run(inputs: Sequence[np.ndarray | None], outputs: Sequence[np.ndarray]) -> None:
        x = inputs[0]
        assert x is not None
        mean, var = _moments(x, axes)
        # ONNX's function body: (X - mean) / (sqrt(var) + 1e-9).
        np.divide(x - mean, np.sqrt(var) + x.dtype.type(1e-9), out=outputs[0])

    return run
