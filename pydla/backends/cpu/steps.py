"""Prebound steps: a layer's kernel and its arena views fused into one no-argument call.

The executor binds every layer once at load. A kernel may offer ``run.prebind(inputs,
outputs)``, returning a callable that already holds everything it needs (flattened views,
loop geometry, often a numba dispatcher with its arguments in a ``functools.partial``);
any other RunFn is wrapped in a partial. Running a layer is then one Python call, with no
argument lists to build or unpack on the hot path.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

import numba
import numpy as np
from numba.core.dispatcher import Dispatcher
from numba.core.typing.typeof import Purpose

from pydla.backends.base import RunFn

Thunk = Callable[[], object]


def prebind(run: RunFn, inputs: Sequence[np.ndarray | None],
            outputs: Sequence[np.ndarray]) -> Thunk:
    """``run`` bound to these buffers for good (they must outlive the returned callable)."""
    bind = getattr(run, "prebind", None)
    if bind is not None:
        return bind(inputs, outputs)
    return functools.partial(run, inputs, outputs)


class Fixed:
    """A kernel argument that ``kernel_call`` compiles the kernel for as a constant: a flag
    fixed per tactic (a blocked or planar layout), so that numba compiles only the
    branches it takes. A kernel that served both layouts compiled both: ResNet-50's 1×1
    GEMM, 28 → 19 s on first use. Not for values that differ from layer to layer — each
    would compile the kernel again."""

    __slots__ = ("value",)

    def __init__(self, value: bool | int) -> None:
        self.value = value


def kernel_call(fn: Callable[..., object], *args: object) -> Thunk:
    """``partial(fn, *args)``; for a numba kernel, on its compiled entry point for these
    arguments' types (compiled, or loaded from numba's cache, now): a call then skips the
    dispatcher's matching of every argument's type against its overloads — ≈ 0.3 µs of
    the ≈ 1 µs a layer's kernel with 25 arguments costs to call, paid by every layer of
    every run. ``Fixed`` arguments are typed as literals."""
    values = arg_values(args)
    if isinstance(fn, Dispatcher):
        return functools.partial(fn.compile(arg_types(args)), *values)
    return functools.partial(fn, *values)


def chain(*steps: Thunk) -> Thunk:
    """The steps one after another, as one call (a layer of several kernels)."""
    if len(steps) == 1:
        return steps[0]
    if len(steps) == 2:  # the common case, without a loop
        first, then = steps

        def both() -> None:
            first()
            then()

        return both

    def run() -> None:
        for step in steps:
            step()

    return run


def arg_values(args: Sequence[object]) -> tuple[object, ...]:
    return tuple(a.value if isinstance(a, Fixed) else a for a in args)


def arg_types(args: Sequence[object]) -> tuple[numba.types.Type, ...]:
    """The numba types a kernel is compiled for: literals for ``Fixed`` arguments."""
    return tuple(numba.types.literal(a.value) if isinstance(a, Fixed)
                 else numba.typeof(a, Purpose.argument) for a in args)


Prebinder = Callable[[Sequence[np.ndarray | None], Sequence[np.ndarray]], Thunk]


class PreboundKernel:
    """A RunFn made of a prebinder: the executor takes ``prebind``; direct calls (tactic
    timing, fused programs) reuse the step prebound for the same arrays as last time."""

    def prebind(self, inputs: Sequence[np.ndarray | None],
                outputs: Sequence[np.ndarray]) -> Thunk:
        raise NotImplementedError

    def __init__(self, prebind: Prebinder | None = None) -> None:
        if prebind is not None:  # else a subclass defines the method
            self.prebind = prebind  # type: ignore[method-assign]
        self._last: tuple[tuple[np.ndarray | None, ...], Thunk] | None = None

    def __call__(self, inputs: Sequence[np.ndarray | None],
                 outputs: Sequence[np.ndarray]) -> None:
        key = (*inputs, *outputs)
        last = self._last
        if last is None or len(last[0]) != len(key) or any(
                a is not b for a, b in zip(last[0], key)):
            last = (key, self.prebind(inputs, outputs))
            self._last = last
        last[1]()
