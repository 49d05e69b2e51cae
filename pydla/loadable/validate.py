"""Layer contracts: every layer's tensors re-derived from its op's shape rule and attributes.

The reader (pydla.loadable.reader) has proved each tensor lies inside its buffer; this
module proves each layer is the computation its kernels assume: the number of inputs and
outputs, every input's rank and shape against the others and the attributes, and every
output's shape and dtype recomputed from them. A kernel is bound only to a layer that
passed (pydla.backends.cpu's tactics then check their own preconditions, ``applies``).

A rule is registered per op family with ``@rule("Op", …)``; it reads attributes through
``LayerCheck`` (typed, ranged, named by metadata path) and returns the outputs' expected
``(shape, dtype)`` — ``dtype`` None where the op's output type is not its inputs' concern.
Every op with a CPU kernel has a rule or is in BIND_CHECKED (a test pins it); a layer of
any other op is refused, as the backend has nothing to bind it to. What a rule cannot see
— index *values*, which are runtime data — the kernels bound before use and refuse with a
KernelError (pydla.backends.cpu.kernels.indexing.checked_indices and its callers).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from pydla.dtypes import DType
from pydla.errors import LoadableError
from pydla.loadable.program import LayerInfo, TensorInfo

Expected = Sequence[tuple[tuple[int, ...], DType | None]]
Rule = Callable[["LayerCheck"], Expected]
RULES: dict[str, Rule] = {}
# Ops whose every kernel derives the layer's geometry from its tensors and refuses a
# mismatch when it is bound (the int8 layers: pydla.backends.cpu.kernels.qlinear_*).
BIND_CHECKED = frozenset({"QConv", "QGemm"})

BLOCK = 16  # channels per block of the nchw16c layout (pydla.plan.layouts)
_INT_LIMIT = 1 << 40  # no attribute of a valid program is larger (dims are below 2**31)


def rule(*ops: str) -> Callable[[Rule], Rule]:
    def register(fn: Rule) -> Rule:
        for op in ops:
            if op in RULES:
                raise RuntimeError(f"shape rule for {op} registered twice")
            RULES[op] = fn
        return fn

    return register


class LayerCheck:
    """One layer under validation: its tensors, and attribute readers that fail by path."""

    def __init__(self, layer: LayerInfo, tensors: Sequence[TensorInfo], meta_offset: int,
                 attrs: dict[str, Any] | None = None, path: str | None = None) -> None:
        self.layer = layer
        self.path = path or f"layers[{layer.index}]"
        self.meta_offset = meta_offset
        self.attrs = layer.attrs if attrs is None else attrs
        self.ins: list[TensorInfo | None] = [None if i < 0 else tensors[i] for i in layer.inputs]
        self.outs = [tensors[i] for i in layer.outputs]

    def fail(self, where: str, reason: str) -> LoadableError:
        return LoadableError(self.meta_offset, f"metadata {self.path}{where}: layer "
                             f"{self.layer.name!r} ({self.layer.op}): {reason}")

    # -- inputs --------------------------------------------------------------------------
    def arity(self, lo: int, hi: int, outputs: int | tuple[int, int] = 1) -> None:
        n = len(self.ins)
        if not lo <= n <= hi:
            raise self.fail(".inputs", f"{n} inputs, the op takes {lo}..{hi}")
        olo, ohi = outputs if isinstance(outputs, tuple) else (outputs, outputs)
        if not olo <= len(self.outs) <= ohi:
            raise self.fail(".outputs", f"{len(self.outs)} outputs, the op makes "
                            f"{olo}..{ohi}")

    def x(self, k: int, rank: int | tuple[int, int] | None = None) -> TensorInfo:
        """Input ``k``, which must be present (and of ``rank``, or a rank in [lo, hi])."""
        t = self.ins[k] if k < len(self.ins) else None
        if t is None:
            raise self.fail(f".inputs[{k}]", "a required input is absent")
        if rank is not None:
            lo, hi = rank if isinstance(rank, tuple) else (rank, rank)
            if not lo <= len(t.shape) <= hi:
                raise self.fail(f".inputs[{k}]", f"{t.name!r} has rank {len(t.shape)} "
                                f"(shape {t.shape}), the op needs {lo}..{hi}")
        return t

    def indices(self, k: int, rank: int | tuple[int, int] | None = None) -> TensorInfo:
        """Input ``k``: an int32 or int64 tensor of indices (their values are checked by the
        kernel when it runs: pydla.backends.cpu.kernels.indexing.checked_indices)."""
        t = self.x(k, rank)
        self.need(t.dtype in (DType.INT32, DType.INT64), k, f"{t.name!r} is "
                  f"{t.dtype.name.lower()}, indices are int32 or int64")
        return t

    def opt(self, k: int) -> TensorInfo | None:
        return self.ins[k] if k < len(self.ins) else None

    def need(self, ok: bool, k: int, reason: str) -> None:
        if not ok:
            raise self.fail(f".inputs[{k}]", reason)

    # -- attributes ------------------------------------------------------------------------
    def _attr(self, name: str, default: Any) -> Any:
        if name in self.attrs:
            return self.attrs[name]
        if default is _REQUIRED:
            raise self.fail(f".attrs.{name}", "missing attribute")
        return default

    def int_(self, name: str, default: Any = None, lo: int = -_INT_LIMIT,
             hi: int = _INT_LIMIT) -> int:
        v = self._attr(name, _REQUIRED if default is None else default)
        if isinstance(v, bool):
            v = int(v)
        if not isinstance(v, int) or not lo <= v <= hi:
            raise self.fail(f".attrs.{name}", f"{v!r} is not an integer in [{lo}, {hi}]")
        return v

    def ints(self, name: str, count: int | None = None, default: Any = None,
             lo: int = -_INT_LIMIT, hi: int = _INT_LIMIT) -> list[int]:
        v = self._attr(name, _REQUIRED if default is None else default)
        if (not isinstance(v, (list, tuple)) or (count is not None and len(v) != count)
                or any(isinstance(e, bool) or not isinstance(e, int) or not lo <= e <= hi
                       for e in v)):
            want = f"{count} integers" if count is not None else "integers"
            raise self.fail(f".attrs.{name}", f"{v!r} is not a list of {want} in [{lo}, {hi}]")
        return list(v)

    def float_(self, name: str, default: Any = None) -> float:
        """A finite number (an int is one too)."""
        v = self._attr(name, _REQUIRED if default is None else default)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise self.fail(f".attrs.{name}", f"{v!r} is not a finite number")
        return float(v)

    def flag(self, name: str, default: int = 0) -> bool:
        """A 0/1 attribute."""
        return bool(self.int_(name, default, 0, 1))

    def axis(self, name: str, rank: int, default: Any = None) -> int:
        """An axis attribute in [-rank, rank), returned non-negative."""
        a = self.int_(name, default, -max(rank, 1), max(rank, 1) - 1)
        return a + rank if a < 0 else a

    def axes(self, name: str, rank: int, default: Any = None) -> list[int]:
        axes = [a + rank if a < 0 else a
                for a in self.ints(name, None, default, -max(rank, 1), max(rank, 1) - 1)]
        if len(set(axes)) != len(axes):
            raise self.fail(f".attrs.{name}", f"repeated axis in {axes}")
        return axes

    def choice(self, name: str, options: Sequence[Any], default: Any = None) -> Any:
        v = self._attr(name, _REQUIRED if default is None else default)
        if v not in options or isinstance(v, bool) != isinstance(options[0], bool):
            raise self.fail(f".attrs.{name}", f"{v!r} is not one of {list(options)}")
        return v


_REQUIRED = object()


def broadcast(check: LayerCheck, shapes: Sequence[tuple[int, ...]], where: str
              ) -> tuple[int, ...]:
    """numpy's broadcast of ``shapes``, or a typed error."""
    rank = max((len(s) for s in shapes), default=0)
    out = [1] * rank
    for s in shapes:
        for i, d in enumerate(s, rank - len(s)):
            if out[i] == 1:
                out[i] = d
            elif d not in (1, out[i]):
                raise check.fail(where, f"shapes {[tuple(s) for s in shapes]} do not broadcast")
    return tuple(out)


def check_layer(layer: LayerInfo, tensors: Sequence[TensorInfo], meta_offset: int,
                prefix: str = "") -> None:
    """Raise LoadableError unless the layer's outputs are what its op makes of its inputs.

    ``prefix`` names the program holding the layer (``"profiles[1]."``; empty at the top).
    """
    fn = RULES.get(layer.op)
    if fn is None:
        return
    check = LayerCheck(layer, tensors, meta_offset, path=f"{prefix}layers[{layer.index}]")
    try:
        expected = fn(check)
    except LoadableError:
        raise
    except (TypeError, ValueError, KeyError, IndexError, ArithmeticError) as e:
        # a rule meeting metadata it does not model (a bug the fuzzer reports in the rule,
        # never a reason to accept the layer)
        raise check.fail("", f"cannot be validated ({type(e).__name__}: {e})") from None
    compare(check, expected)


def compare(check: LayerCheck, expected: Expected) -> None:
    if len(expected) != len(check.outs):
        raise check.fail(".outputs", f"{len(check.outs)} outputs, the op makes "
                         f"{len(expected)}")
    for k, (t, (shape, dtype)) in enumerate(zip(check.outs, expected)):
        if t.shape != tuple(shape):
            raise check.fail(f".outputs[{k}]", f"{t.name!r} has shape {t.shape}, the op makes "
                             f"{tuple(shape)} from its inputs and attributes")
        if dtype is not None and t.dtype is not dtype:
            raise check.fail(f".outputs[{k}]", f"{t.name!r} is {t.dtype.name.lower()}, the "
                             f"op makes {dtype.name.lower()}")


def logical(check: LayerCheck, t: TensorInfo, blocked: bool, channels: int, k: str
            ) -> tuple[int, ...]:
    """A tensor's (n, c, …) shape: a blocked one is (n, ⌈c/16⌉, …, 16) for ``channels``."""
    if not blocked:
        return t.shape
    s = t.shape
    if len(s) < 3 or s[-1] != BLOCK or s[1] != -(-channels // BLOCK):
        raise check.fail(k, f"{t.name!r} of shape {s} is not {channels} channels in blocks "
                         f"of {BLOCK}")
    return (s[0], channels, *s[2:-1])


def blocked_shape(shape: Sequence[int]) -> tuple[int, ...]:
    return (shape[0], -(-shape[1] // BLOCK), *shape[2:], BLOCK)


def layouts(check: LayerCheck) -> tuple[bool, bool]:
    v = check.attrs.get("layouts", ["nchw", "nchw"])
    if (not isinstance(v, list) or len(v) != 2
            or any(x not in ("nchw", "nchw16c") for x in v)):
        raise check.fail(".attrs.layouts", f"{v!r} is not two of 'nchw', 'nchw16c'")
    return v[0] == "nchw16c", v[1] == "nchw16c"


# The rules live by family in pydla.loadable.rules_*; importing them fills RULES.
from pydla.loadable import (  # noqa: E402,F401
    rules_attention,
    rules_control,
    rules_elementwise,
    rules_indexing,
    rules_math,
    rules_ml,
    rules_nn,
    rules_quantize,
    rules_shape,
    rules_spatial,
)
