"""Explicit kernel registry of the CPU backend: op name → binder.

Kernel modules register with ``@kernel("Op")`` (a binder returning a RunFn that writes into
preallocated outputs) or ``@reference("Op")`` (a function returning arrays, copied into the
outputs). ``pydla.backends.cpu.kernels`` imports every kernel module by name.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from pydla.backends.base import LayerSpec, RunFn
from pydla.errors import KernelError

Binder = Callable[[LayerSpec], RunFn]
ReferenceFn = Callable[[LayerSpec, Sequence[np.ndarray | None]], Sequence[np.ndarray]]

KERNELS: dict[str, Binder] = {}


def kernel(op: str) -> Callable[[Binder], Binder]:
    def register(binder: Binder) -> Binder:
        if op in KERNELS:
            raise RuntimeError(f"kernel for {op} registered twice")
        KERNELS[op] = binder
        return binder

    return register


def reference(*ops: str) -> Callable[[ReferenceFn], ReferenceFn]:
    """Register a function ``fn(spec, inputs) -> outputs`` for one or more ops."""

    def register(fn: ReferenceFn) -> ReferenceFn:
        def bind(spec: LayerSpec) -> RunFn:
            def run(inputs: Sequence[np.ndarray | None], outputs: Sequence[np.ndarray]) -> None:
                results = fn(spec, inputs)
                if len(results) != len(outputs):
                    raise KernelError(spec.name, spec.op,
                                      f"produced {len(results)} outputs, expected {len(outputs)}")
                for out, res in zip(outputs, results):
                    res = np.asarray(res)
                    if res.shape != out.shape:
                        raise KernelError(spec.name, spec.op,
                                          f"produced shape {res.shape}, planned {out.shape}")
                    np.copyto(out, res, casting="unsafe")

            return run

        bind.reference_fn = fn  # type: ignore[attr-defined]  (shape discovery at build time)
        for op in ops:
            kernel(op)(bind)
        return fn

    return register
