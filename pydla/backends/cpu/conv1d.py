"""1-D convolutions run by the 2-D Conv tactics, as convolutions of height 1.

Every fast Conv tactic (pydla.backends.cpu.kernels.conv_fast) reads a 2-D geometry; a
1-D Conv ([N, C, L] * [M, C/g, K]) is the same computation on [N, C, 1, L] * [M, C/g, 1, K]
with strides (1, s), dilations (1, d) and pads (0, p0, 0, p1). The registry offers every
Conv tactic to 1-D layers through ``as_2d`` (the spec they see) and ``adapt`` (the arrays:
a unit axis inserted by ``np.expand_dims``, always a view, so outputs are written in
place). Without this a 1-D layer ran the reference kernel only: a sleep-spindle detector's
twelve 128→128 dilated 1-D convolutions took 205 of its 220 ms.

Tensors of rank ≥ 2 get the unit axis before their last one — x, w and the output at
axis 2, an epilogue's (OC, L) operand as (OC, 1, L) — so every broadcast stays aligned;
rank 0 and 1 tensors (a bias, a scalar) are unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from pydla.backends.base import LayerSpec, RunFn, TensorSpec
from pydla.backends.cpu.steps import PreboundKernel, Thunk, prebind


def is_1d(spec: LayerSpec) -> bool:
    """A Conv whose input and weights are rank 3 (one spatial axis), explicit pads."""
    if spec.op != "Conv" or len(spec.inputs) < 2 or not spec.outputs:
        return False
    x, w = spec.inputs[0], spec.inputs[1]
    a = spec.attrs
    sizes = {"strides": 1, "dilations": 1, "pads": 2, "kernel_shape": 1}
    return (x is not None and w is not None and len(x.shape) == 3 and len(w.shape) == 3
            and len(spec.outputs[0].shape) == 3
            and a.get("auto_pad", "NOTSET") in ("NOTSET", b"NOTSET")
            and not any(a.get("layouts") or ())
            # attributes of another rank: malformed, left to the tactics' own refusal
            and all(a.get(k) is None or len(a[k]) == n for k, n in sizes.items()))


def _axis(rank: int) -> int | None:
    return rank - 1 if rank >= 2 else None


def _shape(shape: tuple[int, ...]) -> tuple[int, ...]:
    axis = _axis(len(shape))
    return shape if axis is None else (*shape[:axis], 1, *shape[axis:])


def _spec(t: TensorSpec | None) -> TensorSpec | None:
    return None if t is None else TensorSpec(_shape(tuple(t.shape)), t.dtype)


def as_2d(spec: LayerSpec) -> LayerSpec:
    """The 2-D layer of height 1 that computes ``spec`` (``is_1d(spec)``)."""
    a = dict(spec.attrs)
    (s,) = a.get("strides") or (1,)
    (d,) = a.get("dilations") or (1,)
    p0, p1 = a.get("pads") or (0, 0)
    a.update(strides=[1, int(s)], dilations=[1, int(d)], pads=[0, int(p0), 0, int(p1)])
    if a.get("kernel_shape"):
        a["kernel_shape"] = [1, *a["kernel_shape"]]
    epi = a.get("epilogue")
    if epi:  # its steps' shapes take the unit axis too (the generic epilogue checks them)
        a["epilogue"] = {**epi, "program": [{**st, "shape": list(_shape(tuple(st["shape"])))}
                                            for st in epi["program"]]}
    return LayerSpec(spec.name, spec.op, a, tuple(_spec(t) for t in spec.inputs),
                     tuple(_spec(t) for t in spec.outputs), spec.tactic)


def _view(x: np.ndarray | None) -> np.ndarray | None:
    if x is None:
        return None
    axis = _axis(x.ndim)
    return x if axis is None else np.expand_dims(x, axis)


def adapt(run: RunFn) -> RunFn:
    """``run`` (bound to the 2-D spec) on the 1-D layer's arrays."""

    def bind(inputs: Sequence[np.ndarray | None], outputs: Sequence[np.ndarray]) -> Thunk:
        return prebind(run, [_view(x) for x in inputs], [_view(y) for y in outputs])

    return PreboundKernel(bind)
