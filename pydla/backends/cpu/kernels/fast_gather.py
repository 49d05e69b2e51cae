"""Gather as one numba copy loop (tactic ``rows``): embedding lookups and row picks.

The data tensor is seen as (outer, dim, inner) around the gathered axis; each index picks
one contiguous run of ``inner`` values per outer slice. Indices are checked in the same
pass (negative ones count from the end); a bad one stops the copy and is reported by the
caller as a KernelError naming the layer, as the reference kernel does.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
from numba import njit

from pydla.backends.base import LayerSpec, RunFn
from pydla.backends.cpu.registry import tactic
from pydla.backends.cpu.steps import PreboundKernel
from pydla.dtypes import DType
from pydla.errors import KernelError

Thunk = Callable[[], None]

_INDEX_TYPES = (DType.INT64, DType.INT32)


@njit(cache=True, nogil=True, error_model="numpy")
def gather_rows(x: np.ndarray, idx: np.ndarray, y: np.ndarray, outer: int, dim: int,
                inner: int) -> int:
    """y[o, j, :] = x[o, idx[j], :]; returns -1, or the position of an index out of range."""
    n = idx.size
    for j in range(n):
        k = idx[j]
        if k < -dim or k >= dim:
            return j
    for o in range(outer):
        for j in range(n):
            k = idx[j]
            if k < 0:
                k += dim
            src = (o * dim + k) * inner
            dst = (o * n + j) * inner
            for i in range(inner):
                y[np.uint64(dst + i)] = x[np.uint64(src + i)]
    return -1


def _applies(spec: LayerSpec) -> bool:
    x, idx = spec.inputs[0], spec.inputs[1] if len(spec.inputs) > 1 else None
    return (x is not None and idx is not None and idx.dtype in _INDEX_TYPES
            and x.dtype.np.kind in "fiub" and len(spec.outputs) == 1
            and spec.outputs[0].dtype == x.dtype and math.prod(spec.outputs[0].shape) > 0)


def bind_rows(spec: LayerSpec) -> RunFn:
    x = spec.inputs[0]
    assert x is not None
    axis = int(spec.attrs["axis"])
    outer, dim = math.prod(x.shape[:axis]), x.shape[axis]
    inner = math.prod(x.shape[axis + 1:])

    def prebind(ins: Sequence[np.ndarray | None], outs: Sequence[np.ndarray]) -> Thunk:
        src, idx = ins[0], ins[1]
        assert src is not None and idx is not None
        xf, yf = np.ascontiguousarray(src).reshape(-1), outs[0].reshape(-1)
        # The indices' own type (int32 or int64): numba compiles one loop per type.
        flat = np.ascontiguousarray(idx).reshape(-1)

        def run() -> None:
            bad = gather_rows(xf, flat, yf, outer, dim, inner)
            if bad >= 0:
                raise KernelError(spec.name, spec.op,
                                  f"index {int(flat[bad])} is out of range for axis {axis} "
                                  f"of size {dim} (valid: {-dim}..{dim - 1})")

        return run

    return PreboundKernel(prebind)


tactic("Gather", "rows", applies=_applies, priority=10)(bind_rows)
