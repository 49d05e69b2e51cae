"""Running any number of rows on a loadable built for a fixed batch.

A loadable has static shapes: every input and output leads with the batch it was built for
(``--shapes=x:8x3x224x224`` → 8). Ray Data hands an actor batches of whatever size it
chose, and Serve's dynamic batching concatenates however many requests arrived, so rows are
cut into chunks of the loadable's batch; the last, short chunk is padded with copies of its
own last row (real data, so no model sees an all-zero image it might divide by) and the
padded rows are dropped from the outputs. Needs numpy only: Ray is not imported here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from pydla.engine import LoadedModule
from pydla.errors import RequestError


@dataclass(frozen=True)
class TensorSpec:
    """An input or output of the loadable: ``shape[0]`` is the batch it was built for."""

    name: str
    shape: tuple[int, ...]
    dtype: np.dtype

    @property
    def row_shape(self) -> tuple[int, ...]:
        return self.shape[1:]


def _specs(module: LoadedModule, ios: list[Any]) -> list[TensorSpec]:
    out = []
    for io in ios:
        t = module.program.tensors[io.tensor]
        out.append(TensorSpec(t.name, tuple(t.shape), np.dtype(t.dtype.np)))
    return out


class BatchRunner:
    """Runs ``{input name: (n, *row shape) array}`` for any ``n`` on one loaded module.

    Not thread-safe (a module runs one task at a time on its arena): one runner per actor or
    per serving thread.
    """

    def __init__(self, module: LoadedModule) -> None:
        self.module = module
        self.inputs = _specs(module, module.program.inputs)
        self.outputs = _specs(module, module.program.outputs)
        leads = {s.name: (s.shape[0] if s.shape else None) for s in self.inputs + self.outputs}
        batch = self.inputs[0].shape[0] if self.inputs and self.inputs[0].shape else None
        odd = [f"{name!r} {lead}" for name, lead in leads.items() if lead != batch]
        if batch is None or batch < 1 or odd:
            shapes = ", ".join(f"{s.name!r} {s.shape}" for s in self.inputs + self.outputs)
            raise RequestError(f"pydla.ray batches along the first dimension, so every input "
                               f"and output must lead with the same batch size; this loadable "
                               f"has {shapes}")
        self.batch = batch
        # The short last chunk is staged here, so padding allocates nothing per call.
        self._staging = [np.empty(s.shape, s.dtype) for s in self.inputs]

    @property
    def input_names(self) -> list[str]:
        return [s.name for s in self.inputs]

    @property
    def output_names(self) -> list[str]:
        return [s.name for s in self.outputs]

    def check(self, inputs: Mapping[str, Any], allow_extra: bool = False) -> list[np.ndarray]:
        """The inputs as arrays in the module's dtypes, validated: one row count for all,
        every row of the module's row shape. Extra keys are refused unless ``allow_extra``
        (Ray Data batches carry other columns)."""
        missing = [n for n in self.input_names if n not in inputs]
        if missing:
            raise RequestError(f"missing inputs {missing}; the module takes {self.input_names}")
        if not allow_extra:
            extra = sorted(set(inputs) - set(self.input_names))
            if extra:
                raise RequestError(f"unknown inputs {extra}; the module takes "
                                   f"{self.input_names}")
        arrays = [_as_rows(inputs[s.name], s) for s in self.inputs]
        counts = {s.name: len(a) for s, a in zip(self.inputs, arrays)}
        if len(set(counts.values())) > 1:
            raise RequestError(f"inputs have different row counts: {counts}")
        return arrays

    def check_request(self, inputs: Mapping[str, Any]) -> tuple[list[np.ndarray], bool]:
        """A serving request: rows as for ``check``, or one sample given without the row
        dimension (then ``True``: its outputs lose that dimension too)."""
        single = bool(self.inputs) and all(
            s.name in inputs and np.ndim(inputs[s.name]) == len(s.row_shape)
            for s in self.inputs)
        if single:
            inputs = {k: np.asarray(v)[np.newaxis] for k, v in inputs.items()}
        return self.check(inputs), single

    def run(self, inputs: Mapping[str, Any], allow_extra: bool = False
            ) -> dict[str, np.ndarray]:
        """Outputs keyed by name, one row per input row."""
        return self.run_arrays(self.check(inputs, allow_extra))

    def run_arrays(self, arrays: list[np.ndarray]) -> dict[str, np.ndarray]:
        """``run`` on arrays already returned by ``check``."""
        n = len(arrays[0]) if arrays else 0
        outs = [np.empty((n, *s.row_shape), s.dtype) for s in self.outputs]
        b = self.batch
        for start in range(0, n, b):
            rows = min(b, n - start)
            if rows == b:
                feed = [a[start:start + b] for a in arrays]
            else:
                for stage, a in zip(self._staging, arrays):
                    stage[:rows] = a[start:]
                    stage[rows:] = a[-1:]
                feed = self._staging
            for out, result in zip(outs, self.module.run(feed)):
                out[start:start + rows] = result[:rows]
        return dict(zip(self.output_names, outs))


def _as_rows(value: Any, spec: TensorSpec) -> np.ndarray:
    arr = np.asarray(value)
    if arr.dtype == object:
        raise RequestError(f"input {spec.name!r} holds Python objects (ragged rows?); "
                           f"each row must be an array of shape {spec.row_shape}")
    if arr.ndim != len(spec.shape) or tuple(arr.shape[1:]) != spec.row_shape:
        raise RequestError(f"input {spec.name!r} has shape {tuple(arr.shape)}; the module "
                           f"takes (n, {', '.join(map(str, spec.row_shape))}) (rows of "
                           f"{spec.row_shape})")
    if arr.dtype != spec.dtype:
        if not np.can_cast(arr.dtype, spec.dtype, "same_kind"):
            raise RequestError(f"input {spec.name!r} is {arr.dtype}; the module takes "
                               f"{spec.dtype} (a same-kind cast is done, not {arr.dtype} → "
                               f"{spec.dtype})")
        arr = arr.astype(spec.dtype)
    return arr
