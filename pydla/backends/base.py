"""The backend interface: what a backend offers and how a planned layer is bound to a kernel.

A backend binds a validated program once (kernels prepared, arena views sliced) and then
executes it many times. The engine (validation, descriptors, registration, errors) is
backend-neutral and lives in ``pydla.engine``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from pydla.dtypes import DType


@dataclass(frozen=True)
class TensorSpec:
    shape: tuple[int, ...]
    dtype: DType


@dataclass(frozen=True)
class LayerSpec:
    """What a kernel needs to know about one layer, fixed at bind time."""

    name: str
    op: str
    attrs: Mapping[str, Any]
    inputs: tuple[TensorSpec | None, ...]
    outputs: tuple[TensorSpec, ...]
    tactic: str | None = None


# A bound kernel: reads ``inputs`` (None for an absent optional input), writes ``outputs``.
RunFn = Callable[[Sequence[np.ndarray | None], Sequence[np.ndarray]], None]


# Called after each layer with (layer index, start ns, end ns) of time.perf_counter_ns;
# the runtime uses it for task statistics and timeouts, and may raise to stop the run.
LayerHook = Callable[[int, int, int], None]


class BoundProgram(Protocol):
    def execute(self, inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray],
                on_layer: LayerHook | None = None) -> None:
        """Run once: ``inputs``/``outputs`` are linear arrays of the program's I/O tensors."""


class Backend(Protocol):
    name: str

    def supported_ops(self) -> frozenset[str]:
        """Op names this backend has kernels for (the loadable reader checks against it)."""

    def bind(self, program: Any) -> BoundProgram:
        """Prepare every layer of a validated program; raise LoadableError on bad attributes."""
