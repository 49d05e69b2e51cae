"""Explicit kernel registry of the CUDA backend: op name → binder.

A binder receives the bind context and one layer and returns its candidate
implementations (``Candidate``): each enqueues the layer's work on a stream. The backend
times the candidates on the GPU and keeps the fastest (``fallback`` candidates only run
when nothing else could be built). Kernel modules register with ``@kernel("Op", …)``;
``pydla.backends.cuda.kernels`` imports every one by name.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pydla.backends.cuda.context import BindContext
    from pydla.loadable.program import LayerInfo

Launch = Callable[[Any], None]  # enqueue on a cupy.cuda.Stream


def chain(*launches: Launch) -> Launch:
    """One launch that enqueues ``launches`` in order on the same stream."""
    def run(stream: Any) -> None:
        for launch in launches:
            launch(stream)

    return run


@dataclass(frozen=True)
class Candidate:
    name: str
    launch: Launch
    fallback: bool = False  # correct everywhere but slow: used only when nothing else builds


Binder = Callable[["BindContext", "LayerInfo"], list[Candidate]]

KERNELS: dict[str, Binder] = {}


def kernel(*ops: str) -> Callable[[Binder], Binder]:
    def register(binder: Binder) -> Binder:
        for op in ops:
            if op in KERNELS:
                raise RuntimeError(f"CUDA kernel for {op} registered twice")
            KERNELS[op] = binder
        return binder

    return register
