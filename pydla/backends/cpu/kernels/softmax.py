"""CPU kernels of Softmax, LogSoftmax and Hardmax over the canonical ``axes``: a contiguous
run of axes normalised as one (one axis from opset 13, the whole 2-D-coerced tail before)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from pydla.backends.base import LayerSpec, RunFn
from pydla.backends.cpu.registry import kernel


def _axes(spec: LayerSpec) -> tuple[int, ...]:
    return tuple(int(a) for a in spec.attrs["axes"])


@kernel("Softmax")
def bind_softmax(spec: LayerSpec) -> RunFn:
    axes = _axes(spec)

    def run(inputs: Sequence[np.ndarray | None], outputs: Sequence[np.ndarray]) -> None:
        x = inputs[0]
        assert x is not None
        y = outputs[0]
        np.subtract(x, np.max(x, axis=axes, keepdims=True), out=y)
        np.exp(y, out=y)
        y /= np.sum(y, axis=axes, keepdims=True)

    return run


@kernel("LogSoftmax")
def bind_log_softmax(spec: LayerSpec) -> RunFn:
    axes = _axes(spec)

    def run(inputs: Sequence[np.ndarray | None], outputs: Sequence[np.ndarray]) -> None:
        x = inputs[0]
        assert x is not None
        y = outputs[0]
        np.subtract(x, np.max(x, axis=axes, keepdims=True), out=y)
        y -= np.log(np.sum(np.exp(y), axis=axes, keepdims=True))

    return run


@kernel("Hardmax")
def bind_hardmax(spec: LayerSpec) -> RunFn:
    axes = _axes(spec)
    shape = spec.outputs[0].shape
    first = axes[0]
    # The normalised axes merged into one, so that argmax picks the first maximum of the run.
    merged = shape[:first] + (int(np.prod(shape[first:axes[-1] + 1], dtype=np.int64)),) + \
        shape[axes[-1] + 1:]

    def run(inputs: Sequence[np.ndarray | None], outputs: Sequence[np.ndarray]) -> None:
        x = inputs[0]
        assert x is not None
        y = outputs[0]
        y.fill(0)
        if y.size == 0:
            return
        hot = np.expand_dims(np.argmax(x.reshape(merged), axis=first), first)
        np.put_along_axis(y.reshape(merged), hot, 1, axis=first)

    return run
