"""CPU kernels of indexing ops: gathers, scatters, TopK, cumulative ops, OneHot,
ReverseSequence.

Index tensors are runtime data: every kernel checks them against the dimension they index
and raises a KernelError naming the layer, instead of reading or writing out of bounds.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from pydla.backends.base import LayerSpec, RunFn
from pydla.backends.cpu.registry import kernel, reference
from pydla.errors import KernelError

Inputs = Sequence[np.ndarray | None]
Outputs = Sequence[np.ndarray]


def checked_indices(spec: LayerSpec, idx: np.ndarray, dim: int, what: str) -> np.ndarray:
    """``idx`` as int64 in [0, dim): negative indices count from the end; others raise."""
    idx = np.asarray(idx).astype(np.int64, copy=False)
    if idx.size:
        bad = (idx < -dim) | (idx >= dim)
        if bad.any():
            raise KernelError(spec.name, spec.op,
                              f"index {int(idx[bad].reshape(-1)[0])} is out of range for "
                              f"{what} of size {dim} (valid: {-dim}..{dim - 1})")
    return np.where(idx < 0, idx + dim, idx)


@kernel("Gather")
def bind_gather(spec: LayerSpec) -> RunFn:
    axis = spec.attrs["axis"]
    dim = spec.inputs[0].shape[axis]

    def run(inputs: Inputs, outputs: Outputs) -> None:
        idx = checked_indices(spec, inputs[1], dim, f"axis {axis}")
        np.take(inputs[0], idx, axis=axis, out=outputs[0], mode="clip")

    return run


@reference("GatherElements")
def gather_elements(spec: LayerSpec, inputs: Inputs) -> list[np.ndarray]:
    x, idx = inputs[0], inputs[1]
    axis = spec.attrs["axis"]
    idx = checked_indices(spec, idx, x.shape[axis], f"axis {axis}")
    # ONNX lets the indices be shorter than the data off the axis: read that corner only
    # (take_along_axis would broadcast instead)
    x = x[tuple(slice(None) if i == axis else slice(0, e) for i, e in enumerate(idx.shape))]
    return [np.take_along_axis(x, idx, axis)]


def _nd_key(spec: LayerSpec, idx: np.ndarray, dims: Sequence[int]) -> tuple[np.ndarray, ...]:
    """Rows of ``idx`` (…, K) as a K-tuple of checked index arrays into ``dims``."""
    return tuple(checked_indices(spec, idx[..., j], dims[j], f"dimension {j}")
                 for j in range(idx.shape[-1]))


@reference("GatherND")
def gather_nd(spec: LayerSpec, inputs: Inputs) -> list[np.ndarray]:
    x, idx = inputs[0], inputs[1]
    b = spec.attrs["batch_dims"]
    batch = int(np.prod(x.shape[:b], dtype=np.int64))
    rows = int(np.prod(idx.shape[b:-1], dtype=np.int64))
    # Fold the batch dims into one so every row picks from its own batch entry.
    xb = x.reshape((batch,) + x.shape[b:])
    ib = idx.reshape(batch, rows, idx.shape[-1])
    key = (np.arange(batch)[:, None],) + _nd_key(spec, ib, x.shape[b:])
    return [xb[key].reshape(spec.outputs[0].shape)]


_SCATTER_UFUNCS: dict[str, np.ufunc] = {
    "add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum,
}


def _scatter(out: np.ndarray, key: tuple[np.ndarray, ...], updates: np.ndarray,
             reduction: str) -> None:
    if reduction == "none":
        out[key] = updates
    else:
        _SCATTER_UFUNCS[reduction].at(out, key, updates)  # duplicates accumulate


@reference("ScatterND")
def scatter_nd(spec: LayerSpec, inputs: Inputs) -> list[np.ndarray]:
    x, idx, upd = inputs[0], inputs[1], inputs[2]
    k = idx.shape[-1]
    out = x.copy()
    rows = idx.reshape(-1, k)
    _scatter(out, _nd_key(spec, rows, x.shape), upd.reshape((rows.shape[0],) + x.shape[k:]),
             spec.attrs["reduction"])
    return [out]


@reference("ScatterElements")
def scatter_elements(spec: LayerSpec, inputs: Inputs) -> list[np.ndarray]:
    x, idx, upd = inputs[0], inputs[1], inputs[2]
    axis = spec.attrs["axis"]
    key = list(np.indices(idx.shape, sparse=True))
    key[axis] = checked_indices(spec, idx, x.shape[axis], f"axis {axis}")
    out = x.copy()
    _scatter(out, tuple(key), upd, spec.attrs["reduction"])
    return [out]


@reference("TopK")
def top_k(spec: LayerSpec, inputs: Inputs) -> list[np.ndarray]:
    x = inputs[0]
    axis, k = spec.attrs["axis"], spec.attrs["k"]
    n = x.shape[axis]
    if spec.attrs["largest"]:
        # Descending with ties by lower index (as onnxruntime): a stable ascending sort of the
        # reversed axis, read backwards. Negating would break unsigned and minimum integers.
        order = (n - 1 - np.argsort(np.flip(x, axis), axis=axis, kind="stable"))
        order = np.flip(order, axis)
    else:
        order = np.argsort(x, axis=axis, kind="stable")
    order = np.take(order, np.arange(k), axis=axis)
    return [np.take_along_axis(x, order, axis), order.astype(np.int64)]


def _bind_cumulative(accumulate: Callable[..., np.ndarray], identity: int) -> Callable[
        [LayerSpec], RunFn]:
    def bind(spec: LayerSpec) -> RunFn:
        axis = spec.attrs["axis"]
        reverse, exclusive = spec.attrs["reverse"], spec.attrs["exclusive"]
        lead = (slice(None),) * axis

        def run(inputs: Inputs, outputs: Outputs) -> None:
            x, out = inputs[0], outputs[0]
            if reverse:  # accumulate the flipped input into a flipped view of the output
                x, out = np.flip(x, axis), np.flip(out, axis)
            if exclusive:
                out[lead + (slice(0, 1),)] = identity
                accumulate(x[lead + (slice(0, -1),)], axis=axis, dtype=out.dtype,
                           out=out[lead + (slice(1, None),)])
            else:
                accumulate(x, axis=axis, dtype=out.dtype, out=out)

        return run

    return bind


kernel("CumSum")(_bind_cumulative(np.cumsum, 0))
kernel("CumProd")(_bind_cumulative(np.cumprod, 1))


@reference("OneHot")
def one_hot(spec: LayerSpec, inputs: Inputs) -> list[np.ndarray]:
    idx, values = inputs[0], inputs[1].reshape(-1)
    axis, depth = spec.attrs["axis"], spec.attrs["depth"]
    # Float indices truncate; [-depth, depth) is valid, anything else gives an all-off row.
    idx = np.trunc(idx).astype(np.int64) if idx.dtype.kind == "f" else idx.astype(np.int64)
    idx = np.where(idx < 0, idx + depth, idx)
    classes = np.arange(depth).reshape((depth,) + (1,) * (idx.ndim - axis))
    hot = np.expand_dims(idx, axis) == classes
    return [np.where(hot, values[1], values[0])]


@reference("ReverseSequence")
def reverse_sequence(spec: LayerSpec, inputs: Inputs) -> list[np.ndarray]:
    x, lens = inputs[0], inputs[1].astype(np.int64)
    batch, time = spec.attrs["batch_axis"], spec.attrs["time_axis"]
    steps = x.shape[time]
    if lens.size and (lens.min() < 0 or lens.max() > steps):
        raise KernelError(spec.name, spec.op, f"sequence_lens {lens.tolist()} must lie in "
                          f"[0, {steps}] (the time axis size)")
    t = np.arange(steps)[None, :]
    n = lens[:, None]
    src = np.where(t < n, n - 1 - t, t)  # (batch, time): reversed prefix, rest in place
    shape = [1] * x.ndim
    shape[batch], shape[time] = x.shape[batch], steps
    src = (src if batch < time else src.T).reshape(shape)
    return [np.take_along_axis(x, np.broadcast_to(src, x.shape), time)]
