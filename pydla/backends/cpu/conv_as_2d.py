"""Convolutions of another spatial rank run by the 2-D Conv tactics, as 2-D ones.

Every fast Conv tactic (pydla.backends.cpu.kernels.conv_fast) reads a 2-D geometry. Two
kinds of layer are the same computation as a 2-D convolution, on views of their arrays:

- a **1-D** Conv ([N, C, L] * [M, C/g, K]) is [N, C, 1, L] * [M, C/g, 1, K] with strides
  (1, s), dilations (1, d) and pads (0, p0, 0, p1): a unit axis inserted. Without this a
  1-D layer ran the reference kernel only: a sleep-spindle detector's twelve 128→128
  dilated 1-D convolutions took 205 of its 220 ms.
- a **flat 3-D** Conv, whose input, kernel and output all have depth 1 and no depth pads
  ([N, C, 1, H, W] * [M, C/g, 1, kh, kw]), is the 2-D one with that axis removed. RivaGAN's
  watermark encoder is four such 11×11 convolutions on one video frame: on the 3-D
  reference kernel it ran 4.7× onnxruntime's time.

The registry offers every Conv tactic to these layers through ``as_2d`` (the spec they
see) and ``adapt`` (the arrays, always views, so outputs are written in place).

Tensors get the change at the axis the output's extra axis aligns with under ONNX
broadcasting: x, w and the output at axis 2, an epilogue's (OC, L) operand as (OC, 1, L),
a (OC, 1, 1, 1) one as (OC, 1, 1); tensors of lower rank (a bias, a scalar) are
unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from pydla.backends.base import LayerSpec, RunFn, TensorSpec
from pydla.backends.cpu.steps import PreboundKernel, Thunk, prebind


@dataclass(frozen=True)
class _Change:
    """Insert (1-D layers) or remove (flat 3-D layers) the unit axis that the output, of
    rank ``rank``, has at position 2."""

    rank: int
    insert: bool

    def axis(self, ndim: int) -> int | None:
        # the output's axis 2 aligns with axis ndim - (rank - 2) of a broadcast operand
        axis = ndim - (self.rank - 2)
        return axis if axis >= 0 and ndim >= 2 else None

    def shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        axis = self.axis(len(shape))
        if axis is None:
            return shape
        if self.insert:
            return (*shape[:axis], 1, *shape[axis:])
        return (*shape[:axis], *shape[axis + 1:])

    def view(self, x: np.ndarray | None) -> np.ndarray | None:
        axis = None if x is None else self.axis(x.ndim)
        if x is None or axis is None:
            return x
        return np.expand_dims(x, axis) if self.insert else np.squeeze(x, axis)


_1D, _FLAT_3D = _Change(3, insert=True), _Change(5, insert=False)
_SIZES = {"strides": 1, "dilations": 1, "pads": 2, "kernel_shape": 1}  # × spatial rank


def _plain_conv(spec: LayerSpec, rank: int) -> bool:
    if spec.op != "Conv" or len(spec.inputs) < 2 or not spec.outputs:
        return False
    x, w, a = spec.inputs[0], spec.inputs[1], spec.attrs
    spatial = rank - 2
    return (x is not None and w is not None and len(x.shape) == rank
            and len(w.shape) == rank and len(spec.outputs[0].shape) == rank
            and a.get("auto_pad", "NOTSET") in ("NOTSET", b"NOTSET")
            and not any(a.get("layouts") or ())
            # attributes of another rank: malformed, left to the tactics' own refusal
            and all(a.get(k) is None or len(a[k]) == n * spatial for k, n in _SIZES.items()))


def _change(spec: LayerSpec) -> _Change | None:
    if _plain_conv(spec, 3):
        return _1D
    if _plain_conv(spec, 5):
        pads = spec.attrs.get("pads") or (0,) * 6
        depths = (spec.inputs[0].shape[2], spec.inputs[1].shape[2],  # type: ignore[union-attr]
                  spec.outputs[0].shape[2])
        if depths == (1, 1, 1) and pads[0] == 0 and pads[3] == 0:
            return _FLAT_3D
    return None


def applies_to(spec: LayerSpec) -> bool:
    """A 1-D Conv, or a 3-D one with depth 1 throughout: the 2-D tactics can run it."""
    return _change(spec) is not None


def _attrs_2d(spec: LayerSpec, change: _Change) -> dict:
    a = dict(spec.attrs)
    if change.insert:  # 1-D: height 1 in front
        (s,) = a.get("strides") or (1,)
        (d,) = a.get("dilations") or (1,)
        p0, p1 = a.get("pads") or (0, 0)
        a.update(strides=[1, int(s)], dilations=[1, int(d)], pads=[0, int(p0), 0, int(p1)])
        if a.get("kernel_shape"):
            a["kernel_shape"] = [1, *a["kernel_shape"]]
    else:  # flat 3-D: the depth entry dropped (depth 1, no depth pads: stride irrelevant)
        for key in ("strides", "dilations", "kernel_shape"):
            if a.get(key):
                a[key] = [int(v) for v in a[key][1:]]
        if a.get("pads"):
            p = [int(v) for v in a["pads"]]
            a["pads"] = [p[1], p[2], p[4], p[5]]
    return a


def as_2d(spec: LayerSpec) -> LayerSpec:
    """The 2-D layer that computes ``spec`` (``applies_to(spec)``)."""
    change = _change(spec)
    assert change is not None, spec.name
    a = _attrs_2d(spec, change)
    epi = a.get("epilogue")
    if epi:  # its steps' shapes change with the tensors (the generic epilogue checks them)
        a["epilogue"] = {**epi, "program": [
            {**st, "shape": list(change.shape(tuple(st["shape"])))} for st in epi["program"]]}

    def tensor(t: TensorSpec | None) -> TensorSpec | None:
        return None if t is None else TensorSpec(change.shape(tuple(t.shape)), t.dtype)

    return LayerSpec(spec.name, spec.op, a, tuple(tensor(t) for t in spec.inputs),
                     tuple(tensor(t) for t in spec.outputs), spec.tactic)


def adapt(spec: LayerSpec, run: RunFn) -> RunFn:
    """``run`` (bound to ``as_2d(spec)``) on the layer's own arrays."""
    change = _change(spec)
    assert change is not None, spec.name

    def bind(inputs: Sequence[np.ndarray | None], outputs: Sequence[np.ndarray]) -> Thunk:
        return prebind(run, [change.view(x) for x in inputs],
                       [change.view(y) for y in outputs])  # type: ignore[misc]

    return PreboundKernel(bind)
