"""CPU kernels of activations (Relu, Sigmoid, Clip, Gelu, …) and of Erf.

Each kernel is a short chain of ufuncs writing into the planned output (``out=``), so a
run allocates nothing beyond an occasional mask. Scalar attributes are Python floats, which
numpy treats as weak: float32 tensors stay float32.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from pydla.backends.base import LayerSpec, RunFn
from pydla.backends.cpu.registry import kernel

Inputs = Sequence[np.ndarray | None]
Outputs = Sequence[np.ndarray]

# erf(x)/x as a polynomial in x² for |x| < 1, and erfcx(s) = exp(s²)·erfc(s) as a polynomial
# in z = 2.4/s - 1.4 (1/s in [1/6, 1] mapped onto [-1, 1]) for s ≥ 1: least-squares
# Chebyshev fits of scipy.special.erf/erfcx at 8000 nodes, converted to monomials.
# Maximum relative error of erf: 1.3e-15 (numpy has no erf, and onnxruntime's is float32).
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
    y = np.full_like(t, coeffs[-1])
    for c in coeffs[-2::-1]:
        y *= t
        y += c
    return y


def erf(x: np.ndarray) -> np.ndarray:
    """The error function in float64, vectorised (beyond |x| = 6 it is ±1 in float64)."""
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


@kernel("Erf")
def bind_erf(spec: LayerSpec) -> RunFn:
    def run(inputs: Inputs, outputs: Outputs) -> None:
        np.copyto(outputs[0], erf(inputs[0]), casting="unsafe")

    return run


@kernel("Relu")
def bind_relu(spec: LayerSpec) -> RunFn:
    def run(inputs: Inputs, outputs: Outputs) -> None:
        np.maximum(inputs[0], 0, out=outputs[0])

    return run


@kernel("LeakyRelu")
def bind_leaky_relu(spec: LayerSpec) -> RunFn:
    alpha = float(spec.attrs["alpha"])
    if 0.0 <= alpha <= 1.0:
        def run_max(inputs: Inputs, outputs: Outputs) -> None:
            # For 0 ≤ alpha ≤ 1, max(x, alpha·x) picks x above zero and alpha·x below.
            np.multiply(inputs[0], alpha, out=outputs[0])
            np.maximum(outputs[0], inputs[0], out=outputs[0])

        return run_max

    def run(inputs: Inputs, outputs: Outputs) -> None:
        x, out = inputs[0], outputs[0]
        np.multiply(x, alpha, out=out)
        np.copyto(out, x, where=x >= 0)

    return run


@kernel("PRelu")
def bind_prelu(spec: LayerSpec) -> RunFn:
    # The importer made the slope broadcast onto x (ONNX's unidirectional rule).
    def run(inputs: Inputs, outputs: Outputs) -> None:
        x, out = inputs[0], outputs[0]
        np.multiply(x, inputs[1], out=out)
        np.copyto(out, x, where=x >= 0)

    return run


@kernel("Elu")
def bind_elu(spec: LayerSpec) -> RunFn:
    alpha = float(spec.attrs["alpha"])

    def run(inputs: Inputs, outputs: Outputs) -> None:
        x, out = inputs[0], outputs[0]
        np.minimum(x, 0, out=out)  # expm1 of the negative part only: no overflow
        np.expm1(out, out=out)
        np.multiply(out, alpha, out=out)
        np.copyto(out, x, where=x >= 0)

    return run


@kernel("Selu")
def bind_selu(spec: LayerSpec) -> RunFn:
    alpha, gamma = float(spec.attrs["alpha"]), float(spec.attrs["gamma"])

    def run(inputs: Inputs, outputs: Outputs) -> None:
        x, out = inputs[0], outputs[0]
        np.minimum(x, 0, out=out)
        np.expm1(out, out=out)
        np.multiply(out, alpha, out=out)
        np.copyto(out, x, where=x > 0)
        np.multiply(out, gamma, out=out)

    return run


@kernel("Celu")
def bind_celu(spec: LayerSpec) -> RunFn:
    alpha = float(spec.attrs["alpha"])

    def run(inputs: Inputs, outputs: Outputs) -> None:
        x, out = inputs[0], outputs[0]
        np.minimum(x, 0, out=out)
        np.divide(out, alpha, out=out)
        np.expm1(out, out=out)
        np.multiply(out, alpha, out=out)
        np.copyto(out, x, where=x >= 0)

    return run


def _bound(inputs: Inputs, index: int, fixed: float | int | None) -> np.ndarray | float | None:
    """A Clip bound: the runtime tensor when there is one, else the importer's constant."""
    if index < len(inputs) and inputs[index] is not None:
        b = inputs[index]
        return b.reshape(()) if b.size == 1 else b
    return fixed


@kernel("Clip")
def bind_clip(spec: LayerSpec) -> RunFn:
    lo_fixed, hi_fixed = spec.attrs.get("min"), spec.attrs.get("max")

    # Min(max, Max(x, min)) is ONNX's definition: min > max yields max, NaN propagates.
    def run(inputs: Inputs, outputs: Outputs) -> None:
        x, out = inputs[0], outputs[0]
        lo, hi = _bound(inputs, 1, lo_fixed), _bound(inputs, 2, hi_fixed)
        if lo is None:
            np.copyto(out, x)
        else:
            np.maximum(x, lo, out=out)
        if hi is not None:
            np.minimum(out, hi, out=out)

    return run


def _sigmoid(x: np.ndarray, out: np.ndarray, scale: float = 1.0) -> None:
    """out = 1 / (1 + exp(-scale·x)); exp overflows to inf for very negative x, giving 0."""
    np.multiply(x, -scale, out=out)
    with np.errstate(over="ignore"):
        np.exp(out, out=out)
    np.add(out, 1, out=out)
    np.reciprocal(out, out=out)


@kernel("Sigmoid")
def bind_sigmoid(spec: LayerSpec) -> RunFn:
    def run(inputs: Inputs, outputs: Outputs) -> None:
        _sigmoid(inputs[0], outputs[0])

    return run


@kernel("Swish")
def bind_swish(spec: LayerSpec) -> RunFn:
    alpha = float(spec.attrs["alpha"])

    def run(inputs: Inputs, outputs: Outputs) -> None:
        _sigmoid(inputs[0], outputs[0], alpha)
        np.multiply(outputs[0], inputs[0], out=outputs[0])

    return run


def _hard_sigmoid(x: np.ndarray, out: np.ndarray, alpha: float, beta: float) -> None:
    np.multiply(x, alpha, out=out)
    np.add(out, beta, out=out)
    np.maximum(out, 0, out=out)
    np.minimum(out, 1, out=out)


@kernel("HardSigmoid")
def bind_hard_sigmoid(spec: LayerSpec) -> RunFn:
    alpha, beta = float(spec.attrs["alpha"]), float(spec.attrs["beta"])

    def run(inputs: Inputs, outputs: Outputs) -> None:
        _hard_sigmoid(inputs[0], outputs[0], alpha, beta)

    return run


@kernel("HardSwish")
def bind_hard_swish(spec: LayerSpec) -> RunFn:
    def run(inputs: Inputs, outputs: Outputs) -> None:
        _hard_sigmoid(inputs[0], outputs[0], 1.0 / 6.0, 0.5)
        np.multiply(outputs[0], inputs[0], out=outputs[0])

    return run


@kernel("Softplus")
def bind_softplus(spec: LayerSpec) -> RunFn:
    def run(inputs: Inputs, outputs: Outputs) -> None:
        np.logaddexp(inputs[0], 0, out=outputs[0])  # log(1 + e^x) without overflow

    return run


@kernel("Softsign")
def bind_softsign(spec: LayerSpec) -> RunFn:
    def run(inputs: Inputs, outputs: Outputs) -> None:
        x, out = inputs[0], outputs[0]
        np.absolute(x, out=out)
        np.add(out, 1, out=out)
        np.divide(x, out, out=out)

    return run


@kernel("Mish")
def bind_mish(spec: LayerSpec) -> RunFn:
    def run(inputs: Inputs, outputs: Outputs) -> None:
        x, out = inputs[0], outputs[0]
        np.logaddexp(x, 0, out=out)
        np.tanh(out, out=out)
        np.multiply(out, x, out=out)

    return run


@kernel("Gelu")
def bind_gelu(spec: LayerSpec) -> RunFn:
    if spec.attrs["approximate"] == "tanh":
        c = math.sqrt(2.0 / math.pi)

        def run_tanh(inputs: Inputs, outputs: Outputs) -> None:
            # 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))
            x, out = inputs[0], outputs[0]
            np.multiply(x, x, out=out)
            np.multiply(out, 0.044715 * c, out=out)
            np.add(out, c, out=out)
            np.multiply(out, x, out=out)
            np.tanh(out, out=out)
            np.add(out, 1, out=out)
            np.multiply(out, x, out=out)
            np.multiply(out, 0.5, out=out)

        return run_tanh
    if spec.attrs["approximate"] != "none":
        raise ValueError(f"Gelu approximate={spec.attrs['approximate']!r}")

    def run(inputs: Inputs, outputs: Outputs) -> None:
        x = inputs[0]
        np.copyto(outputs[0], 0.5 * x * (1.0 + erf(x * math.sqrt(0.5))), casting="unsafe")

    return run


@kernel("ThresholdedRelu")
def bind_thresholded_relu(spec: LayerSpec) -> RunFn:
    alpha = float(spec.attrs["alpha"])

    def run(inputs: Inputs, outputs: Outputs) -> None:
        x, out = inputs[0], outputs[0]
        out.fill(0)
        np.copyto(out, x, where=x > alpha)

    return run


@kernel("Shrink")
def bind_shrink(spec: LayerSpec) -> RunFn:
    bias, lambd = float(spec.attrs["bias"]), float(spec.attrs["lambd"])

    def run(inputs: Inputs, outputs: Outputs) -> None:
        # Integer inputs compute in floating point and truncate back, as onnxruntime does.
        x, out = inputs[0], outputs[0]
        out.fill(0)
        np.copyto(out, x - bias, where=x > lambd, casting="unsafe")
        np.copyto(out, x + bias, where=x < -lambd, casting="unsafe")

    return run
