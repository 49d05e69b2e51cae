"""CPU kernels of activations (Relu, Sigmoid, Clip, Gelu, …) and of Erf.

Each kernel is a short chain of ufuncs writing into the planned output (``out=``). Masked
ufuncs and np.where are avoided on these hot paths: on irregular masks they run 10–50×
slower than a plain pass, so piecewise functions are written with max/min/clip (or a
bitwise ``select``). ``ndarray.clip`` stands in for np.maximum/np.minimum against a scalar,
which numpy 2.4 runs about 3× slower. Scalar attributes are boxed in the compute type once,
at bind time.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from pydla.backends.base import LayerSpec, RunFn
from pydla.backends.cpu.kernels.elementwise import select, unaliased
from pydla.backends.cpu.registry import kernel

Inputs = Sequence[np.ndarray | None]
Outputs = Sequence[np.ndarray]

# Rational least-squares fits of scipy.special's functions, refined for minimax relative
# error (the figures are the fit's; float32 evaluation adds a few ulp).
# erf for float32 results: x·P(x²)/Q(x²) on |x| ≤ 4 (erf(4) is 1 in float32). 6.5e-8 as
# fitted, 4.3e-7 evaluated in float32 (onnxruntime's: 1e-7).
_ERF32_P = (1.1283790939515286, 0.20712614874008678, 0.05152500189595786,
            0.003990614141187522, 0.00014728782814665145, -1.942325925834198e-06,
            1.9111012921383228e-08)
_ERF32_Q = (1.0, 0.516892017526796, 0.11797111926962323, 0.01495814905496752,
            0.0010211239881708068)
# Gelu for float32 results: x·Φ(x) = max(x, 0) - |x|·h(|x|) with h(a) = erfc(a/√2)/2 =
# exp(-a²/2)·P(a)/Q(a) on a ≤ 9. No cancellation for negative x: 5.1e-8 as fitted, 2.3e-6
# relative for float32 Gelu (onnxruntime's: 6e-5).
_GELU_P = (0.49999997463654844, 0.3256015146525889, 0.10031302936745587, 0.012790809960625574,
           5.563353083412435e-07)
_GELU_Q = (1.0, 1.4490846017492316, 0.8568566563896485, 0.2505669821090918,
           0.03211469232594677)
# erf for float64 results: erf(x)/x as a polynomial in x² for |x| < 1, and erfcx(s) =
# exp(s²)·erfc(s) as a polynomial in z = 2.4/s - 1.4 (1/s in [1/6, 1] mapped onto [-1, 1])
# for s ≥ 1: Chebyshev least-squares fits of scipy.special.erf/erfcx, converted to
# monomials. Maximum relative error of erf: 1.3e-15.
_ERF_NEAR = (1.1283791670955123, -0.3761263890317502, 0.112837916706094,
             -0.026866170590135487, 0.005223977175544624, -0.0008548305573451397,
             0.00012054695597825783, -1.4913462903614475e-05, 1.6311493588875961e-06,
             -1.5192600413042533e-07, 9.435365957919923e-09)
_ERFCX_FAR = (0.28972211632346406, 0.16536269001258513, -0.030831050508398992,
              0.002821131900108411, 0.0010344322250386043, -0.0007383867914837767,
              0.00026560548796265415, -5.528601404051283e-05, -4.046779537459972e-06,
              1.08800239264919e-05, -6.4973314899136765e-06, 2.5916961865812497e-06,
              -6.657007570283756e-07, -1.6271325034895218e-08, 1.3102399879055138e-07,
              -7.179221194723887e-08, 4.116730335597632e-08, -3.6964923641766046e-08,
              1.0348347135276207e-08, 8.378811127672943e-09, -4.2777585809999826e-09)


def _horner(coeffs: Sequence[float], t: np.ndarray) -> np.ndarray:
    y = t * coeffs[-1]
    y += coeffs[-2]
    for c in coeffs[-3::-1]:
        y *= t
        y += c
    return y


def _erf64(x: np.ndarray) -> np.ndarray:
    """erf in float64 to full precision (beyond |x| = 6 it is ±1 in float64)."""
    x = np.asarray(x, np.float64)
    a = np.abs(x)
    y = np.empty_like(x)
    near = a < 1
    t = x[near]
    y[near] = t * _horner(_ERF_NEAR, t * t)
    far = ~near  # includes ±inf and NaN, which the formula carries through
    s = a[far]
    with np.errstate(all="ignore"):
        # Beyond s = 6 (z < -1) erfc(s) < 1e-17: the fit's edge value is exact enough.
        z = np.maximum(2.4 / s - 1.4, -1.0)
        y[far] = np.copysign(1.0 - np.exp(-s * s) * _horner(_ERFCX_FAR, z), x[far])
    return y


def _erf32(z: np.ndarray) -> None:
    """z ← erf(z) for a float32 array."""
    z.clip(np.float32(-4), np.float32(4), out=z)
    t = z * z
    z *= _horner(_ERF32_P, t)
    z /= _horner(_ERF32_Q, t)


@kernel("Erf")
def bind_erf(spec: LayerSpec) -> RunFn:
    if spec.outputs[0].dtype.np != np.float32:  # float64, or integers (rounded toward zero)
        def run_exact(inputs: Inputs, outputs: Outputs) -> None:
            np.copyto(outputs[0], _erf64(inputs[0]), casting="unsafe")

        return run_exact

    def run(inputs: Inputs, outputs: Outputs) -> None:
        np.copyto(outputs[0], inputs[0])
        _erf32(outputs[0])

    return run


@kernel("Gelu")
def bind_gelu(spec: LayerSpec) -> RunFn:
    dtype = spec.outputs[0].dtype.np.type
    half = dtype(0.5)
    if spec.attrs["approximate"] == "tanh":
        c = math.sqrt(2.0 / math.pi)
        c0, c1 = dtype(c), dtype(0.044715 * c)

        def run_tanh(inputs: Inputs, outputs: Outputs) -> None:
            # 0.5·x·(1 + tanh(√(2/π)·x·(1 + 0.044715·x²)))
            out = outputs[0]
            x = unaliased(inputs[0], out)
            np.multiply(x, x, out=out)
            np.multiply(out, c1, out=out)
            np.add(out, c0, out=out)
            np.multiply(out, x, out=out)
            np.tanh(out, out=out)
            np.add(out, 1, out=out)
            np.multiply(out, x, out=out)
            np.multiply(out, half, out=out)

        return run_tanh
    if spec.attrs["approximate"] != "none":
        raise ValueError(f"Gelu approximate={spec.attrs['approximate']!r}")
    if dtype is not np.float32:
        def run_exact(inputs: Inputs, outputs: Outputs) -> None:
            x = inputs[0]
            np.copyto(outputs[0], half * x * (1 + _erf64(x * math.sqrt(0.5))))

        return run_exact
    # Beyond |x| = 16, exp(-x²/2) is 0 in float32; the clamp keeps ±inf from making 0·inf.
    zero, top, limit, minus_half = dtype(0), dtype(np.inf), dtype(16), dtype(-0.5)

    def run(inputs: Inputs, outputs: Outputs) -> None:
        x, out = inputs[0], outputs[0]
        a = np.absolute(x)
        a.clip(zero, limit, out=a)
        h = a * a
        h *= minus_half
        np.exp(h, out=h)
        h *= _horner(_GELU_P, a)
        h /= _horner(_GELU_Q, a)
        h *= a
        x.clip(zero, top, out=out)
        out -= h

    return run


def _limits(dtype: np.dtype) -> tuple[np.generic, np.generic]:
    if dtype.kind == "f":
        return dtype.type(-np.inf), dtype.type(np.inf)
    info = np.iinfo(dtype)
    return dtype.type(info.min), dtype.type(info.max)


@kernel("Relu")
def bind_relu(spec: LayerSpec) -> RunFn:
    dtype = spec.outputs[0].dtype.np
    zero, top = dtype.type(0), _limits(dtype)[1]

    def run(inputs: Inputs, outputs: Outputs) -> None:
        inputs[0].clip(zero, top, out=outputs[0])

    return run


@kernel("Clip")
def bind_clip(spec: LayerSpec) -> RunFn:
    # ONNX defines Clip as Min(max, Max(x, min)), which is what ndarray.clip computes:
    # min > max yields max, NaN propagates. Absent bounds are the type's limits.
    dtype = spec.outputs[0].dtype.np
    low, high = _limits(dtype)
    fixed_lo = low if spec.attrs.get("min") is None else dtype.type(spec.attrs["min"])
    fixed_hi = high if spec.attrs.get("max") is None else dtype.type(spec.attrs["max"])

    def bound(inputs: Inputs, index: int, fixed: np.generic) -> np.ndarray | np.generic:
        b = inputs[index] if index < len(inputs) else None
        if b is None:
            return fixed
        return b.reshape(()) if b.size == 1 else b  # a [1] bound must not widen a scalar x

    def run(inputs: Inputs, outputs: Outputs) -> None:
        inputs[0].clip(bound(inputs, 1, fixed_lo), bound(inputs, 2, fixed_hi), out=outputs[0])

    return run


@kernel("LeakyRelu")
def bind_leaky_relu(spec: LayerSpec) -> RunFn:
    alpha = spec.outputs[0].dtype.np.type(spec.attrs["alpha"])
    # alpha·x is above x for negative x exactly when alpha ≤ 1 (and below it for x ≥ 0).
    pick = np.maximum if alpha <= 1 else np.minimum

    def run(inputs: Inputs, outputs: Outputs) -> None:
        out = outputs[0]
        x = unaliased(inputs[0], out)
        np.multiply(x, alpha, out=out)
        pick(out, x, out=out)

    return run


@kernel("PRelu")
def bind_prelu(spec: LayerSpec) -> RunFn:
    # The importer made the slope broadcast onto x (ONNX's unidirectional rule).
    def run(inputs: Inputs, outputs: Outputs) -> None:
        slope, out = inputs[1], outputs[0]
        x = unaliased(inputs[0], out)
        if (slope <= 1).all():  # the usual case: LeakyRelu's max trick per element
            np.multiply(x, slope, out=out)
            np.maximum(out, x, out=out)
        else:
            select(x < 0, x * slope, x, out)

    return run


def _bind_exponential_linear(spec: LayerSpec, alpha: float, gamma: float = 1.0,
                             inner: float = 1.0) -> RunFn:
    """gamma·(alpha·expm1(min(x, 0)/inner) + max(x, 0)): Elu, Selu and Celu."""
    dtype = spec.outputs[0].dtype.np.type
    a, g, k = dtype(alpha), dtype(gamma), dtype(inner)
    low, zero, high = dtype(-np.inf), dtype(0), dtype(np.inf)
    # For 0 ≤ alpha ≤ inner, alpha·expm1(x/inner) ≥ x below zero (its slope is at most 1 and
    # it meets x at 0), so max() merges the two parts without a temporary.
    merge_by_max = 0 <= alpha <= inner

    def run(inputs: Inputs, outputs: Outputs) -> None:
        out = outputs[0]
        x = unaliased(inputs[0], out)
        x.clip(low, zero, out=out)  # the exponential only sees the negative part: no overflow
        if inner != 1:
            np.divide(out, k, out=out)
        np.expm1(out, out=out)
        np.multiply(out, a, out=out)
        if merge_by_max:
            np.maximum(out, x, out=out)
        else:
            np.add(out, x.clip(zero, high), out=out)
        if gamma != 1:
            np.multiply(out, g, out=out)

    return run


@kernel("Elu")
def bind_elu(spec: LayerSpec) -> RunFn:
    return _bind_exponential_linear(spec, spec.attrs["alpha"])


@kernel("Selu")
def bind_selu(spec: LayerSpec) -> RunFn:
    return _bind_exponential_linear(spec, spec.attrs["alpha"], gamma=spec.attrs["gamma"])


@kernel("Celu")
def bind_celu(spec: LayerSpec) -> RunFn:
    alpha = spec.attrs["alpha"]
    return _bind_exponential_linear(spec, alpha, inner=alpha)


def _sigmoid(spec: LayerSpec, scale: float = 1.0) -> Callable[[np.ndarray, np.ndarray], None]:
    """``f(x, out)``: out = 1 / (1 + exp(-scale·x)).

    float32 takes the form 0.5 + 0.5·tanh(scale·x/2): tanh runs twice as fast as exp here and
    cannot overflow; its absolute error (3e-8) is below onnxruntime's (1e-7). float64 keeps
    the exp form, whose error stays relative in the tails.
    """
    dtype = spec.outputs[0].dtype.np.type
    half, k = dtype(0.5), dtype(0.5 * scale)
    if dtype is np.float32:
        def tanh_form(x: np.ndarray, out: np.ndarray) -> None:
            np.multiply(x, k, out=out)
            np.tanh(out, out=out)
            np.multiply(out, half, out=out)
            np.add(out, half, out=out)

        return tanh_form
    minus_scale = dtype(-scale)

    def exp_form(x: np.ndarray, out: np.ndarray) -> None:
        np.multiply(x, minus_scale, out=out)
        with np.errstate(over="ignore"):  # exp(-x) = inf for very negative x gives 0
            np.exp(out, out=out)
        np.add(out, 1, out=out)
        np.reciprocal(out, out=out)

    return exp_form


@kernel("Sigmoid")
def bind_sigmoid(spec: LayerSpec) -> RunFn:
    sigmoid = _sigmoid(spec)

    def run(inputs: Inputs, outputs: Outputs) -> None:
        sigmoid(inputs[0], outputs[0])

    return run


@kernel("Swish")
def bind_swish(spec: LayerSpec) -> RunFn:
    sigmoid = _sigmoid(spec, spec.attrs["alpha"])

    def run(inputs: Inputs, outputs: Outputs) -> None:
        out = outputs[0]
        x = unaliased(inputs[0], out)
        sigmoid(x, out)
        np.multiply(out, x, out=out)

    return run


def _bind_hard_sigmoid(spec: LayerSpec, alpha: float, beta: float, times_x: bool) -> RunFn:
    """clip(alpha·x + beta, 0, 1), times x for HardSwish."""
    dtype = spec.outputs[0].dtype.np.type
    a, b, zero, one = dtype(alpha), dtype(beta), dtype(0), dtype(1)

    def run(inputs: Inputs, outputs: Outputs) -> None:
        out = outputs[0]
        x = unaliased(inputs[0], out) if times_x else inputs[0]
        np.multiply(x, a, out=out)
        np.add(out, b, out=out)
        out.clip(zero, one, out=out)
        if times_x:
            np.multiply(out, x, out=out)

    return run


@kernel("HardSigmoid")
def bind_hard_sigmoid(spec: LayerSpec) -> RunFn:
    return _bind_hard_sigmoid(spec, spec.attrs["alpha"], spec.attrs["beta"], times_x=False)


@kernel("HardSwish")
def bind_hard_swish(spec: LayerSpec) -> RunFn:
    return _bind_hard_sigmoid(spec, 1.0 / 6.0, 0.5, times_x=True)


def _softplus(x: np.ndarray, out: np.ndarray) -> None:
    """out = log(1 + e^x) = log1p(e^-|x|) + max(x, 0): no overflow, and about 20× faster
    than np.logaddexp. ``x`` must not alias ``out``."""
    np.absolute(x, out=out)
    np.negative(out, out=out)
    np.exp(out, out=out)
    np.log1p(out, out=out)
    np.add(out, x.clip(0, np.inf), out=out)


@kernel("Softplus")
def bind_softplus(spec: LayerSpec) -> RunFn:
    def run(inputs: Inputs, outputs: Outputs) -> None:
        _softplus(unaliased(inputs[0], outputs[0]), outputs[0])

    return run


@kernel("Mish")
def bind_mish(spec: LayerSpec) -> RunFn:
    def run(inputs: Inputs, outputs: Outputs) -> None:
        out = outputs[0]
        x = unaliased(inputs[0], out)
        _softplus(x, out)
        np.tanh(out, out=out)
        np.multiply(out, x, out=out)

    return run


@kernel("Softsign")
def bind_softsign(spec: LayerSpec) -> RunFn:
    def run(inputs: Inputs, outputs: Outputs) -> None:
        out = outputs[0]
        x = unaliased(inputs[0], out)
        np.absolute(x, out=out)
        np.add(out, 1, out=out)
        np.divide(x, out, out=out)

    return run


@kernel("ThresholdedRelu")
def bind_thresholded_relu(spec: LayerSpec) -> RunFn:
    alpha = spec.outputs[0].dtype.np.type(spec.attrs["alpha"])

    def run(inputs: Inputs, outputs: Outputs) -> None:
        select(inputs[0] > alpha, inputs[0], None, outputs[0])

    return run


@kernel("Shrink")
def bind_shrink(spec: LayerSpec) -> RunFn:
    bias, lambd = float(spec.attrs["bias"]), float(spec.attrs["lambd"])

    def run(inputs: Inputs, outputs: Outputs) -> None:
        # Integer inputs compute in floating point and truncate back, as onnxruntime does.
        x = inputs[0]
        y = np.where(x < -lambd, x + bias, np.where(x > lambd, x - bias, 0))
        np.copyto(outputs[0], y, casting="unsafe")

    return run
