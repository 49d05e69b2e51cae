"""Explicit kernel registry of the CPU backend: op name → binder, and per-op tactics.

Kernel modules register with ``@kernel("Op")`` (a binder returning a RunFn that writes into
preallocated outputs) or ``@reference("Op")`` (a function returning arrays, copied into the
outputs). That kernel is the op's "reference" tactic, always available. Faster variants
register with ``@tactic("Op", "name", applies=…)``; the builder picks one per layer (by
timing, or by priority without autotuning) and records it in the loadable.
``pydla.backends.cpu.kernels`` imports every kernel module by name.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from pydla.backends.base import LayerSpec, RunFn
from pydla.errors import KernelError

Binder = Callable[[LayerSpec], RunFn]
ReferenceFn = Callable[[LayerSpec, Sequence[np.ndarray | None]], Sequence[np.ndarray]]

KERNELS: dict[str, Binder] = {}
REFERENCE = "reference"


def _never(program: Sequence[Mapping[str, Any]]) -> bool:
    return False


@dataclass(frozen=True)
class Tactic:
    op: str
    name: str
    bind: Binder
    # Whether this implementation can run a layer (shapes, attributes, dtypes).
    applies: Callable[[LayerSpec], bool]
    # Whether it runs this epilogue program itself, inside its output loop; the binder then
    # receives the whole spec (epilogue attribute and extra inputs included).
    native_epilogue: Callable[[Sequence[Mapping[str, Any]]], bool] = _never
    # Order of preference when the builder does not time tactics (higher first).
    priority: int = 0


TACTICS: dict[str, dict[str, Tactic]] = {}


def tactic(op: str, name: str, *, applies: Callable[[LayerSpec], bool],
           native_epilogue: Callable[[Sequence[Mapping[str, Any]]], bool] = _never,
           priority: int = 0) -> Callable[[Binder], Binder]:
    def register(binder: Binder) -> Binder:
        table = TACTICS.setdefault(op, {})
        if name in table or name == REFERENCE:
            raise RuntimeError(f"tactic {op}/{name} registered twice")
        bind, test = (binder, applies) if op != "Conv" else _with_2d_views(binder, applies)
        table[name] = Tactic(op, name, bind, test, native_epilogue, priority)
        return binder

    return register


def _with_2d_views(binder: Binder, applies: Callable[[LayerSpec], bool]
                   ) -> tuple[Binder, Callable[[LayerSpec], bool]]:
    """A 2-D Conv tactic that also runs 1-D layers and flat 3-D ones, on 2-D views of their
    arrays (pydla.backends.cpu.conv_as_2d)."""
    from pydla.backends.cpu import conv_as_2d

    def bind(spec: LayerSpec) -> RunFn:
        if conv_as_2d.applies_to(spec):
            return conv_as_2d.adapt(spec, binder(conv_as_2d.as_2d(spec)))
        return binder(spec)

    def test(spec: LayerSpec) -> bool:
        return applies(conv_as_2d.as_2d(spec)) if conv_as_2d.applies_to(spec) else \
            applies(spec)

    return bind, test


def tactic_applies(t: Tactic, spec: LayerSpec) -> bool:
    """Whether tactic ``t`` can run this layer. Never for a layer with an empty tensor:
    the fast kernels divide their work by sizes, and the reference runs an empty layer
    correctly (a malformed model's zero batch divided by zero in a pooling tactic)."""
    if any(s is not None and 0 in s.shape for s in (*spec.inputs, *spec.outputs)):
        return False
    try:
        return bool(t.applies(spec))
    except (KeyError, TypeError, ValueError, IndexError):
        return False


def candidate_tactics(spec: LayerSpec) -> list[Tactic]:
    """The tactics that can run this layer, best first by priority (reference excluded)."""
    found = [t for t in TACTICS.get(spec.op, {}).values() if tactic_applies(t, spec)]
    return sorted(found, key=lambda t: -t.priority)


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
