"""CPU kernels of elementwise arithmetic: binary and variadic ops, unary math.

Every kernel writes into its preallocated output with numpy's ``out=``; numpy broadcasting is
ONNX's multidirectional rule, so inputs broadcast against the planned output directly.
Integer arithmetic wraps like onnxruntime's (numpy arrays never trap on overflow). Ops whose
special values are defined results (x/0, log(0), sqrt(-1), asin(2)…) run under
``np.errstate`` so that IEEE infinities and NaNs pass without warnings.

Fused pointwise programs run steps in place (the output is one of the inputs), so a kernel
that reads an input again after its first write to the output reads it through
``unaliased``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from pydla.backends.base import LayerSpec, RunFn
from pydla.backends.cpu.registry import kernel
from pydla.dtypes import UINT_OF_SIZE

Inputs = Sequence[np.ndarray | None]
Outputs = Sequence[np.ndarray]


def unaliased(x: np.ndarray, out: np.ndarray) -> np.ndarray:
    """``x``, or a copy of it when it shares memory with ``out`` (a step run in place)."""
    return x.copy() if np.may_share_memory(x, out) else x


def select(condition: np.ndarray, x: np.ndarray, y: np.ndarray | None, out: np.ndarray) -> None:
    """``out = where(condition, x, y)`` with broadcasting; ``y`` None selects zeros.

    A bitwise blend of the element bits: exact for every type (NaN payloads, -0.0) and
    several times faster than np.where or a masked copy, whose branches mispredict on
    irregular masks.
    """
    bits = UINT_OF_SIZE[out.dtype.itemsize]
    mask = condition.astype(bits)
    np.negative(mask, out=mask)  # 1 → all bits set
    o = out.view(bits)
    if y is None:
        np.bitwise_and(x.view(bits), mask, out=o)
        return
    yb = unaliased(y, out).view(bits)
    np.bitwise_xor(x.view(bits), yb, out=o)
    np.bitwise_and(o, mask, out=o)
    np.bitwise_xor(o, yb, out=o)


def ufunc_kernel(op: str, ufunc: np.ufunc, quiet: bool = False) -> None:
    """Register ``op`` as ``ufunc(*inputs, out=output)`` (unary or broadcasting binary).

    ``quiet`` silences floating-point warnings where infinities and NaNs are legitimate.
    """

    def bind(spec: LayerSpec) -> RunFn:
        if quiet:
            def run_quiet(inputs: Inputs, outputs: Outputs) -> None:
                with np.errstate(all="ignore"):
                    ufunc(*inputs, out=outputs[0])

            return run_quiet

        def run(inputs: Inputs, outputs: Outputs) -> None:
            ufunc(*inputs, out=outputs[0])

        return run

    def reference_fn(spec: LayerSpec, inputs: Inputs) -> list[np.ndarray]:
        # shape discovery at import, where ONNX's inference gave no type (a model's
        # GreaterOrEqual fed by a Shape-derived value): numpy's broadcast decides
        with np.errstate(all="ignore"):
            return [np.asarray(ufunc(*inputs))]

    bind.reference_fn = reference_fn  # type: ignore[attr-defined]
    kernel(op)(bind)


for _op, _ufunc in (("Abs", np.absolute), ("Neg", np.negative), ("Floor", np.floor),
                    ("Ceil", np.ceil), ("Round", np.rint), ("Sign", np.sign),
                    ("Sin", np.sin), ("Cos", np.cos), ("Atan", np.arctan), ("Tanh", np.tanh),
                    ("Asinh", np.arcsinh), ("IsNaN", np.isnan), ("BitwiseNot", np.invert),
                    ("Add", np.add), ("Sub", np.subtract), ("Mul", np.multiply),
                    ("BitwiseAnd", np.bitwise_and), ("BitwiseOr", np.bitwise_or),
                    ("BitwiseXor", np.bitwise_xor)):
    ufunc_kernel(_op, _ufunc)
for _op, _ufunc in (("Sqrt", np.sqrt), ("Reciprocal", np.reciprocal), ("Exp", np.exp),
                    ("Log", np.log), ("Tan", np.tan), ("Asin", np.arcsin),
                    ("Acos", np.arccos), ("Sinh", np.sinh), ("Cosh", np.cosh),
                    ("Acosh", np.arccosh), ("Atanh", np.arctanh)):
    ufunc_kernel(_op, _ufunc, quiet=True)


@kernel("Div")
def bind_div(spec: LayerSpec) -> RunFn:
    kind = spec.outputs[0].dtype.np.kind
    if kind in "fu":  # true division; unsigned floor division is already truncation
        divide = np.divide if kind == "f" else np.floor_divide

        def run(inputs: Inputs, outputs: Outputs) -> None:
            with np.errstate(all="ignore"):
                divide(inputs[0], inputs[1], out=outputs[0])

        return run

    def run_signed(inputs: Inputs, outputs: Outputs) -> None:
        a, b, out = inputs[0], inputs[1], outputs[0]
        with np.errstate(all="ignore"):
            # ONNX integer division truncates toward zero: floor is one lower where the
            # division is inexact and the signs differ.
            low = (np.remainder(a, b) != 0) & ((a < 0) != (b < 0))
            np.floor_divide(a, b, out=out)
            np.add(out, low, out=out, casting="unsafe")

    return run_signed


@kernel("Mod")
def bind_mod(spec: LayerSpec) -> RunFn:
    # fmod=0 is Python's % (sign of the divisor), fmod=1 is C's fmod (sign of the dividend);
    # numpy's remainder and fmod are exactly these, for integers and floats alike.
    ufunc = np.fmod if spec.attrs["fmod"] else np.remainder

    def run(inputs: Inputs, outputs: Outputs) -> None:
        with np.errstate(all="ignore"):
            ufunc(inputs[0], inputs[1], out=outputs[0])

    return run


@kernel("Pow")
def bind_pow(spec: LayerSpec) -> RunFn:
    base, exponent = spec.inputs[0], spec.inputs[1]
    assert base is not None and exponent is not None
    if base.dtype.np.kind in "iu" and exponent.dtype.np.kind == "i":
        return _bind_int_pow()

    def run(inputs: Inputs, outputs: Outputs) -> None:
        # Mixed types compute in numpy's promoted type (float64 for int/float mixes, as
        # onnxruntime's std::pow does) and cast to the base's type, truncating for integers.
        with np.errstate(all="ignore"):
            np.power(inputs[0], inputs[1], out=outputs[0], casting="unsafe")

    return run


def _bind_int_pow() -> RunFn:
    def run(inputs: Inputs, outputs: Outputs) -> None:
        a, b, out = inputs[0], inputs[1], outputs[0]
        negative = b < 0
        if not negative.any():
            np.power(a, b, out=out, casting="unsafe")
            return
        # numpy refuses negative integer powers; onnxruntime truncates the real result:
        # 1 for a base of 1, ±1 for a base of -1, 0 otherwise.
        small = np.where(a == 1, 1, np.where(a == -1, np.where(b & 1, -1, 1), 0))
        np.power(a, np.where(negative, 0, b), out=out, casting="unsafe")
        np.copyto(out, small, where=negative, casting="unsafe")

    return run


def _bind_variadic(ufunc: np.ufunc, mean: bool = False) -> RunFn:
    def run(inputs: Inputs, outputs: Outputs) -> None:
        out = outputs[0]
        if len(inputs) == 1:
            np.copyto(out, inputs[0])
        else:
            later = [unaliased(x, out) for x in inputs[2:]]
            ufunc(inputs[0], inputs[1], out=out)
            for x in later:
                ufunc(out, x, out=out)
        if mean:
            np.divide(out, len(inputs), out=out)

    return run


@kernel("Sum")
def bind_sum(spec: LayerSpec) -> RunFn:
    return _bind_variadic(np.add)


@kernel("Mean")
def bind_mean(spec: LayerSpec) -> RunFn:
    return _bind_variadic(np.add, mean=True)


@kernel("Min")
def bind_min(spec: LayerSpec) -> RunFn:
    return _bind_variadic(np.minimum)  # NaN-propagating, as onnxruntime


@kernel("Max")
def bind_max(spec: LayerSpec) -> RunFn:
    return _bind_variadic(np.maximum)


@kernel("IsInf")
def bind_isinf(spec: LayerSpec) -> RunFn:
    positive, negative = bool(spec.attrs["detect_positive"]), bool(spec.attrs["detect_negative"])

    def run(inputs: Inputs, outputs: Outputs) -> None:
        x, out = inputs[0], outputs[0]
        if positive and negative:
            np.isinf(x, out=out)
        elif positive or negative:
            np.equal(x, np.inf if positive else -np.inf, out=out)
        else:
            out.fill(False)

    return run


@kernel("BitShift")
def bind_bitshift(spec: LayerSpec) -> RunFn:
    # numpy already gives ONNX's rule for shifts that are negative or not below the bit
    # width: 0, or -1 for a right shift of a negative signed value.
    shift = {"LEFT": np.left_shift, "RIGHT": np.right_shift}[spec.attrs["direction"]]

    def run(inputs: Inputs, outputs: Outputs) -> None:
        shift(inputs[0], inputs[1], out=outputs[0])

    return run
