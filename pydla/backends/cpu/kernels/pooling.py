"""CPU kernels of pooling: MaxPool (with Indices), AveragePool, LpPool, the global pools and
MaxUnpool.

Windowed pools loop over the kernel taps (a handful) and combine one strided slice of the
padded input per tap, vectorised over every output pixel. Canonical attributes:
``kernel_shape``, ``strides``, ``dilations``, explicit ``pads`` = [begin…, end…]; the output
spatial shape (ceil_mode already applied by the importer) is the planned output's.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from pydla.backends.base import LayerSpec, RunFn, TensorSpec
from pydla.backends.cpu.kernels.conv import pad_spatial
from pydla.backends.cpu.registry import kernel
from pydla.errors import KernelError


class _Windows:
    """The geometry of one pooling layer: padding and the strided slice of every tap."""

    def __init__(self, spec: LayerSpec) -> None:
        a = spec.attrs
        self.kernel = [int(k) for k in a["kernel_shape"]]
        nd = len(self.kernel)
        self.strides = list(a.get("strides") or [1] * nd)
        self.dilations = list(a.get("dilations") or [1] * nd)
        pads = list(a.get("pads") or [0] * (2 * nd))
        self.begin, self.end = pads[:nd], pads[nd:]
        in_spec = spec.inputs[0]
        assert in_spec is not None
        self.in_sizes = list(in_spec.shape[2:])
        self.out_sizes = list(spec.outputs[0].shape[2:])
        # Extent of padded input the windows reach (ceil_mode can reach past the end pad).
        reach = [(o - 1) * s + (k - 1) * d + 1 for o, s, k, d in
                 zip(self.out_sizes, self.strides, self.kernel, self.dilations)]
        self.pad_end = [max(0, r - i - b) for r, i, b in zip(reach, self.in_sizes, self.begin)]
        # Each kernel tap and the slice of the padded input it reads for every output.
        self.taps: list[tuple[tuple[int, ...], tuple[slice, ...]]] = [
            (tap, (slice(None), slice(None)) + tuple(
                slice(t * d, t * d + (o - 1) * s + 1, s)
                for t, d, o, s in zip(tap, self.dilations, self.out_sizes, self.strides)))
            for tap in np.ndindex(*self.kernel)]

    def pad(self, x: np.ndarray, value: float | int) -> np.ndarray:
        return pad_spatial(x, self.begin, self.pad_end, value)

    def count(self, include_pad: bool) -> np.ndarray:
        """How many taps of each output window lie inside the input (or its explicit pads)."""
        inside = np.zeros([1, 1] + [b + i + e for b, i, e in
                                    zip(self.begin, self.in_sizes, self.pad_end)], np.int64)
        if include_pad:
            lim = [b + i + e for b, i, e in zip(self.begin, self.in_sizes, self.end)]
            inside[(slice(None), slice(None)) + tuple(slice(0, v) for v in lim)] = 1
        else:
            inside[(slice(None), slice(None)) + tuple(
                slice(b, b + i) for b, i in zip(self.begin, self.in_sizes))] = 1
        total = np.zeros([1, 1] + self.out_sizes, np.int64)
        for _, sl in self.taps:
            total += inside[sl]
        return total


def _lowest(dtype: np.dtype) -> float | int:
    return -np.inf if dtype.kind == "f" else int(np.iinfo(dtype).min)


@kernel("MaxPool")
def bind_max_pool(spec: LayerSpec) -> RunFn:
    if "layouts" in spec.attrs:
        return _bind_blocked(spec)
    win = _Windows(spec)
    want_indices = len(spec.outputs) > 1
    if want_indices:
        # Per tap: its flat input index for each output pixel and whether it is inside.
        column_major = int(spec.attrs.get("storage_order", 0)) == 1
        nd = len(win.in_sizes)
        place = [int(np.prod(win.in_sizes[:i] if column_major else win.in_sizes[i + 1:]))
                 for i in range(nd)]
        grids = np.meshgrid(*[np.arange(o) * s - b for o, s, b in
                              zip(win.out_sizes, win.strides, win.begin)], indexing="ij")
        tap_index, tap_inside = [], []
        for tap, _ in win.taps:
            coords = [g + t * d for g, t, d in zip(grids, tap, win.dilations)]
            tap_index.append(sum(c * p for c, p in zip(coords, place)))
            tap_inside.append(np.logical_and.reduce(
                [(c >= 0) & (c < i) for c, i in zip(coords, win.in_sizes)]))
        plane = int(np.prod(win.in_sizes, dtype=np.int64))

    def run(inputs: Sequence[np.ndarray | None], outputs: Sequence[np.ndarray]) -> None:
        x = inputs[0]
        assert x is not None
        y = outputs[0]
        xp = win.pad(x, _lowest(x.dtype))
        np.copyto(y, xp[win.taps[0][1]])
        for _, sl in win.taps[1:]:
            np.maximum(y, xp[sl], out=y)
        if want_indices:
            idx = outputs[1]
            idx.fill(0)
            # Reverse tap order: the first tap holding the maximum is written last (ORT's tie).
            for k in range(len(win.taps) - 1, -1, -1):
                np.copyto(idx, tap_index[k], where=(xp[win.taps[k][1]] == y) & tap_inside[k])
            nc = np.arange(y.shape[0] * y.shape[1], dtype=np.int64) * plane
            idx += nc.reshape(y.shape[:2] + (1,) * len(win.kernel))

    return run


@kernel("AveragePool")
def bind_average_pool(spec: LayerSpec) -> RunFn:
    win = _Windows(spec)
    counted = win.count(bool(spec.attrs.get("count_include_pad", 0)))
    count = np.maximum(counted, 1).astype(spec.outputs[0].dtype.np)

    def run(inputs: Sequence[np.ndarray | None], outputs: Sequence[np.ndarray]) -> None:
        x = inputs[0]
        assert x is not None
        y = outputs[0]
        xp = win.pad(x, 0)
        y.fill(0)
        for _, sl in win.taps:
            y += xp[sl]
        y /= count

    return run


@kernel("LpPool")
def bind_lp_pool(spec: LayerSpec) -> RunFn:
    win = _Windows(spec)
    p = float(spec.attrs.get("p", 2))

    def run(inputs: Sequence[np.ndarray | None], outputs: Sequence[np.ndarray]) -> None:
        x = inputs[0]
        assert x is not None
        y = outputs[0]
        xp = win.pad(np.abs(x) ** p if p != 2 else x * x, 0)
        y.fill(0)
        for _, sl in win.taps:
            y += xp[sl]
        np.power(y, 1.0 / p, out=y)

    return run


@kernel("GlobalAveragePool")
def bind_global_average_pool(spec: LayerSpec) -> RunFn:
    axes = tuple(range(2, len(spec.outputs[0].shape)))

    def run(inputs: Sequence[np.ndarray | None], outputs: Sequence[np.ndarray]) -> None:
        x = inputs[0]
        assert x is not None
        np.mean(x, axis=axes, keepdims=True, out=outputs[0])

    return run


@kernel("GlobalMaxPool")
def bind_global_max_pool(spec: LayerSpec) -> RunFn:
    axes = tuple(range(2, len(spec.outputs[0].shape)))

    def run(inputs: Sequence[np.ndarray | None], outputs: Sequence[np.ndarray]) -> None:
        x = inputs[0]
        assert x is not None
        np.max(x, axis=axes, keepdims=True, out=outputs[0])

    return run


@kernel("MaxUnpool")
def bind_max_unpool(spec: LayerSpec) -> RunFn:
    # Indices address the unpadded unpool shape (attribute ``unpooled_shape``); a larger
    # planned output keeps that block in its leading corner, as ONNX's reference does.
    inner = tuple(int(d) for d in spec.attrs["unpooled_shape"])
    corner = tuple(slice(0, d) for d in inner)

    def run(inputs: Sequence[np.ndarray | None], outputs: Sequence[np.ndarray]) -> None:
        x, ind = inputs[0], inputs[1]
        assert x is not None and ind is not None
        y = outputs[0]
        block = np.zeros(inner, y.dtype)
        flat = ind.reshape(-1)
        # indices are runtime data: a negative one would wrap instead of failing
        if flat.size and (flat.min() < 0 or flat.max() >= block.size):
            bad = int(flat[(flat < 0) | (flat >= block.size)][0])
            raise KernelError(spec.name, spec.op, f"index {bad} is outside the unpooled "
                              f"shape {inner} ({block.size} elements)")
        block.reshape(-1)[flat] = x.reshape(-1)
        y.fill(0)
        y[corner] = block

    return run


def _bind_blocked(spec: LayerSpec) -> RunFn:
    """A max pool in the channel-blocked layout (pydla.plan.layouts): converted to planar
    around the plain kernel — the reference the blocked tactic is tested against."""
    from pydla.backends.cpu.kernels.reorder import to_blocked, to_planar

    x, y = spec.inputs[0], spec.outputs[0]
    if (x is None or len(x.shape) != 5 or len(y.shape) != 5 or x.shape[4] != 16
            or y.shape[:2] != x.shape[:2] or len(spec.outputs) != 1):
        raise KernelError(spec.name, spec.op, f"layouts {spec.attrs['layouts']!r} do not fit "
                          f"X {x and x.shape}, output {y.shape}")
    n, blocks = x.shape[:2]
    attrs = {k: v for k, v in spec.attrs.items() if k != "layouts"}
    plain = LayerSpec(spec.name, spec.op, attrs,
                      (TensorSpec((n, blocks * 16, *x.shape[2:4]), x.dtype),),
                      (TensorSpec((n, blocks * 16, *y.shape[2:4]), y.dtype),), spec.tactic)
    inner = bind_max_pool(plain)

    def run(inputs: Sequence[np.ndarray | None], outputs: Sequence[np.ndarray]) -> None:
        xs = inputs[0]
        assert xs is not None
        planar = np.empty(plain.outputs[0].shape, outputs[0].dtype)
        inner([to_planar(xs, blocks * 16)], [planar])
        np.copyto(outputs[0], to_blocked(planar))

    return run
