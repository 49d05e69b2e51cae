"""Kernels of the layers whose parameters are tensors: DynamicSlice and DynamicRange.

Inside a Loop body a Slice's starts or a Range's bounds may come from a loop-carried
counter (SLANet writes step ``i`` of its decoder through ``Slice(buf, i, min(501, i + 1))``
and ``Range(i, min(501, i + 1), 1)``). The builder fixes their output shapes from the
first iteration's values (pydla.frontend.onnx.ops.loop_dynamic); these kernels read the
parameters each run and refuse, naming the layer, when they would give another shape —
a loadable has one shape per tensor. Shape rules: pydla.loadable.rules_control.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from pydla.backends.base import LayerSpec, RunFn
from pydla.backends.cpu.registry import kernel
from pydla.errors import KernelError


def slice_bounds(dim: int, start: int, end: int, step: int) -> range:
    """ONNX Slice's clamping of one axis: the indices it takes from a ``dim``-long axis."""
    start, end = start + dim if start < 0 else start, end + dim if end < 0 else end
    if step > 0:
        start, end = min(max(start, 0), dim), min(max(end, 0), dim)
    else:
        start, end = min(max(start, 0), dim - 1), min(max(end, -1), dim - 1)
    return range(start, end, step)


def range_length(start: float, limit: float, delta: float, integer: bool) -> int:
    """ONNX Range's element count (exact for integers)."""
    if integer:
        return max(-((int(start) - int(limit)) // int(delta)), 0)
    return max(int(np.ceil((limit - start) / delta)), 0)


@kernel("DynamicSlice")
def bind_dynamic_slice(spec: LayerSpec) -> RunFn:
    axes = [int(a) for a in spec.attrs["axes"]]
    steps = [int(s) for s in spec.attrs["steps"]]
    planned = spec.outputs[0].shape
    rank = len(planned)

    def run(inputs: Sequence[np.ndarray | None], outputs: Sequence[np.ndarray]) -> None:
        x, starts, ends = inputs[0], inputs[1], inputs[2]
        assert x is not None and starts is not None and ends is not None
        index: list[slice] = [slice(None)] * rank
        for a, s, e, st in zip(axes, starts.reshape(-1), ends.reshape(-1), steps):
            r = slice_bounds(x.shape[a], int(s), int(e), st)
            if len(r) != planned[a]:
                raise KernelError(spec.name, spec.op, f"starts {starts.tolist()} and ends "
                                  f"{ends.tolist()} take {len(r)} elements of axis {a}, the "
                                  f"layer was planned with {planned[a]} (its shape is fixed "
                                  "from the first loop iteration)")
            stop = r.stop if r.stop >= 0 else None
            index[a] = slice(r.start, stop, st)
        np.copyto(outputs[0], x[tuple(index)])

    return run


@kernel("DynamicRange")
def bind_dynamic_range(spec: LayerSpec) -> RunFn:
    planned = spec.outputs[0].shape[0]
    dtype = spec.outputs[0].dtype
    integer = not dtype.is_float

    def run(inputs: Sequence[np.ndarray | None], outputs: Sequence[np.ndarray]) -> None:
        start, limit, delta = (x.reshape(-1)[0].item() for x in inputs)  # type: ignore[union-attr]
        if delta == 0:
            raise KernelError(spec.name, spec.op, "Range delta is 0")
        n = range_length(start, limit, delta, integer)
        if n != planned:
            raise KernelError(spec.name, spec.op, f"start {start}, limit {limit}, delta "
                              f"{delta} give {n} elements, the layer was planned with "
                              f"{planned} (its shape is fixed from the first loop iteration)")
        wide = np.int64 if integer else np.float64
        outputs[0][...] = start + np.arange(n, dtype=wide) * delta

    return run
