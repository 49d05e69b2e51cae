"""CPU kernels of reductions (Reduce*, ArgMax, ArgMin).

The importer gives every reduction its axes explicitly: an empty list reduces over nothing
and only applies the elementwise part (numpy's ``axis=()``). A reduction over an empty set
of elements gives the op's identity (0, 1, ±inf), as onnxruntime does — ReduceMean included
(0 rather than NaN).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from pydla.backends.base import LayerSpec, RunFn
from pydla.backends.cpu.registry import kernel

Inputs = Sequence[np.ndarray | None]
Outputs = Sequence[np.ndarray]
Axes = tuple[int, ...]
# compute(x, axes, keepdims, out): writes the reduction of x into out.
Compute = Callable[[np.ndarray, Axes, bool, np.ndarray], None]


def _sum(x: np.ndarray, axes: Axes, keep: bool, out: np.ndarray) -> None:
    np.sum(x, axis=axes, keepdims=keep, out=out)


def _sum_square(x: np.ndarray, axes: Axes, keep: bool, out: np.ndarray) -> None:
    np.sum(np.square(x), axis=axes, keepdims=keep, out=out)


def _l1(x: np.ndarray, axes: Axes, keep: bool, out: np.ndarray) -> None:
    np.sum(np.abs(x), axis=axes, keepdims=keep, out=out)


def _float(x: np.ndarray) -> np.ndarray:
    """Integer inputs of sqrt/log/exp reductions compute in float64 (then truncate)."""
    return x if x.dtype.kind == "f" else x.astype(np.float64)


def _l2(x: np.ndarray, axes: Axes, keep: bool, out: np.ndarray) -> None:
    x = _float(x)
    np.copyto(out, np.sqrt(np.sum(x * x, axis=axes, keepdims=keep)), casting="unsafe")


def _log_sum(x: np.ndarray, axes: Axes, keep: bool, out: np.ndarray) -> None:
    np.copyto(out, np.log(np.sum(_float(x), axis=axes, keepdims=keep)), casting="unsafe")


def _log_sum_exp(x: np.ndarray, axes: Axes, keep: bool, out: np.ndarray) -> None:
    # Shift by the maximum so exp cannot overflow; infinite maxima shift by 0.
    x = _float(x)
    m = np.max(x, axis=axes, keepdims=True)
    m = np.where(np.isfinite(m), m, 0).astype(x.dtype)
    s = np.log(np.sum(np.exp(x - m), axis=axes, keepdims=True)) + m
    np.copyto(out, s if keep else s.reshape(out.shape), casting="unsafe")


def _mean(x: np.ndarray, axes: Axes, keep: bool, out: np.ndarray) -> None:
    if x.dtype.kind == "f":
        np.mean(x, axis=axes, keepdims=keep, out=out)
        return
    # Integer means divide the integer sum, truncating toward zero (C++ division).
    n = int(np.prod([x.shape[a] for a in axes], dtype=np.int64))
    s = np.sum(x, axis=axes, keepdims=keep, dtype=np.int64)
    np.copyto(out, np.sign(s) * (np.abs(s) // n), casting="unsafe")


def _max(x: np.ndarray, axes: Axes, keep: bool, out: np.ndarray) -> None:
    np.max(x, axis=axes, keepdims=keep, out=out)


def _min(x: np.ndarray, axes: Axes, keep: bool, out: np.ndarray) -> None:
    np.min(x, axis=axes, keepdims=keep, out=out)


def _prod(x: np.ndarray, axes: Axes, keep: bool, out: np.ndarray) -> None:
    np.prod(x, axis=axes, keepdims=keep, out=out)


_COMPUTE: dict[str, Compute] = {
    "ReduceSum": _sum, "ReduceSumSquare": _sum_square, "ReduceL1": _l1, "ReduceL2": _l2,
    "ReduceLogSum": _log_sum, "ReduceLogSumExp": _log_sum_exp, "ReduceMean": _mean,
    "ReduceMax": _max, "ReduceMin": _min, "ReduceProd": _prod,
}


def _empty_value(op: str, dtype: np.dtype) -> float | int | bool:
    """The result of reducing an empty set of elements."""
    if op == "ReduceProd":
        return 1
    low = op in ("ReduceMax", "ReduceLogSum", "ReduceLogSumExp")
    if low or op == "ReduceMin":
        if dtype.kind == "b":
            return not low
        if dtype.kind in "iu":
            info = np.iinfo(dtype)
            return int(info.min if low else info.max)
        return -np.inf if low else np.inf
    return 0


def bind_reduce(spec: LayerSpec) -> RunFn:
    axes = tuple(int(a) for a in spec.attrs["axes"])
    keep = bool(spec.attrs["keepdims"])
    in_shape = spec.inputs[0].shape
    if any(in_shape[a] == 0 for a in axes):
        value = _empty_value(spec.op, spec.outputs[0].dtype.np)

        def run_empty(inputs: Inputs, outputs: Outputs) -> None:
            outputs[0].fill(value)

        return run_empty
    compute = _COMPUTE[spec.op]

    def run(inputs: Inputs, outputs: Outputs) -> None:
        compute(inputs[0], axes, keep, outputs[0])

    return run


for _op in _COMPUTE:
    kernel(_op)(bind_reduce)


@kernel("ArgMax")
@kernel("ArgMin")
def bind_arg(spec: LayerSpec) -> RunFn:
    axis = int(spec.attrs["axis"])
    keep = bool(spec.attrs["keepdims"])
    last = bool(spec.attrs["select_last_index"])
    find = np.argmax if spec.op == "ArgMax" else np.argmin
    n = spec.inputs[0].shape[axis]

    def run(inputs: Inputs, outputs: Outputs) -> None:
        if last:
            # The first hit in the flipped input is the last one in the original order.
            np.subtract(n - 1, find(np.flip(inputs[0], axis), axis=axis, keepdims=keep),
                        out=outputs[0])
        else:
            find(inputs[0], axis=axis, keepdims=keep, out=outputs[0])

    return run
