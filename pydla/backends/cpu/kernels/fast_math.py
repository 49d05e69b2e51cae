"""float32 scalar math for numba kernels, written so that LLVM vectorises the loops using it.

numba calls libm for ``math.exp``/``math.tanh`` one element at a time (no SVML here), which
is 5–10× slower than numpy's SIMD loops. These versions are plain arithmetic plus a bit
cast (Cephes' range reduction and polynomials), so a loop over them compiles to AVX-512.
Kernels using them must be compiled with ``error_model="numpy"`` (no division checks) and
``FASTMATH`` (contraction, no NaN/inf assumptions: NaN still propagates).

numba's disk cache does not notice when a callee in another file changes; the generated
kernels hash this file's source into their names, and ``SOURCE_HASH`` exposes it.
"""

from __future__ import annotations

import hashlib
import math
from pathlib import Path

import numpy as np
from numba import njit

from pydla.backends.base import TensorSpec
from pydla.backends.cpu.kernels.elementwise_activation import (
    _ERF32_P,
    _ERF32_Q,
    _GELU_P,
    _GELU_Q,
)
from pydla.dtypes import DType

# Value-safe fast-math flags: fused multiply-add, reciprocal approximations and no signed
# zeros, but no "no NaNs"/"no infs" assumptions, so special values keep their meaning.
FASTMATH = {"contract", "arcp", "nsz", "afn"}
# Reductions also need reassociation to vectorise (sums in a different order).
FASTMATH_REDUCE = {*FASTMATH, "reassoc"}

# Stored types a float32 kernel runs: the backend widens half types around the kernel.
WIDENED_TO_FLOAT32 = (DType.FLOAT32, DType.FLOAT16, DType.BFLOAT16)


def float32_compute(*specs: TensorSpec | None) -> bool:
    """Whether every tensor is present and computes in float32."""
    return all(s is not None and s.dtype in WIDENED_TO_FLOAT32 for s in specs)


SOURCE_HASH = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:16]

_F = np.float32
_LOG2E = _F(1.4426950408889634)
_LN2_HI = _F(0.693359375)
_LN2_LO = _F(-2.12194440e-4)
_EXP_HI = _F(88.72283)
_EXP_LO = _F(-87.33654)
_INF = _F(np.inf)
_ZERO = _F(0)
_HALF = _F(0.5)
_ONE = _F(1)
_TWO = _F(2)


@njit(inline="always", cache=True)
def at_least(x: float, lo: float) -> float:
    """max(x, lo) that lets NaN in x through (as ONNX Clip and Relu do)."""
    return lo if x < lo else x


@njit(inline="always", cache=True)
def at_most(x: float, hi: float) -> float:
    return hi if x > hi else x


@njit(inline="always", cache=True)
def nan_max(a: float, b: float) -> float:
    """numpy's maximum: a NaN in either operand wins."""
    return a if (a > b or a != a) else b


@njit(inline="always", cache=True)
def nan_min(a: float, b: float) -> float:
    return a if (a < b or a != a) else b


_THREE = _F(3)


@njit(inline="always", error_model="numpy", cache=True)
def pow32(x: float, y: float) -> float:
    """Pow as onnxruntime computes it: a square or a cube by multiplying (its special
    cases), any other exponent by powf. The exponent is a loop-invariant scalar in most
    models (GELU's x³), so the test costs nothing: a TF-exported GELU's Pow(x, 3) on
    6.5 M values took 77 ms through powf."""
    if y == _TWO:
        return x * x
    if y == _THREE:
        return x * x * x
    return _F(math.pow(x, y))


@njit(inline="always", error_model="numpy", fastmath=FASTMATH, cache=True)
def exp32(x: float) -> float:
    """e^x to ≈ 1 ulp: x = k·ln2 + r, |r| ≤ ln2/2, e^r by Cephes' degree-6 polynomial and
    2^k by exponent bits (in two halves, so k = 128 or -126 stay representable)."""
    c = min(max(x, _EXP_LO), _EXP_HI)
    k = np.floor(c * _LOG2E + _HALF)
    r = c - k * _LN2_HI - k * _LN2_LO
    p = _F(1.9875691500e-4)
    p = p * r + _F(1.3981999507e-3)
    p = p * r + _F(8.3334519073e-3)
    p = p * r + _F(4.1665795894e-2)
    p = p * r + _F(1.6666665459e-1)
    p = p * r + _F(5.0000001201e-1)
    y = p * r * r + r + _ONE
    ki = np.int32(k)
    k1 = ki >> 1
    y = y * np.int32((k1 + 127) << 23).view(np.float32)
    y = y * np.int32((ki - k1 + 127) << 23).view(np.float32)
    y = _INF if x > _EXP_HI else y
    y = _ZERO if x < _EXP_LO else y
    return x if x != x else y


@njit(inline="always", error_model="numpy", fastmath=FASTMATH, cache=True)
def sigmoid32(x: float) -> float:
    return _ONE / (_ONE + exp32(-x))


@njit(inline="always", error_model="numpy", fastmath=FASTMATH, cache=True)
def tanh32(x: float) -> float:
    """Cephes tanhf: an odd polynomial below |x| = 0.625 (no cancellation near 0), else
    1 - 2/(e^{2|x|} + 1) with the sign of x."""
    a = abs(x)
    z = x * x
    small = (((_F(-5.70498872745e-3) * z + _F(2.06390887954e-2)) * z
              - _F(5.37397155531e-2)) * z + _F(1.33314422036e-1)) * z - _F(3.33332819422e-1)
    small = small * z * x + x
    big = _ONE - _TWO / (exp32(_TWO * a) + _ONE)
    big = -big if x < _ZERO else big
    return small if a < _F(0.625) else big


@njit(inline="always", error_model="numpy", fastmath=FASTMATH, cache=True)
def _horner(coeffs: tuple, t: float) -> float:
    y = _ZERO
    for i in range(len(coeffs) - 1, -1, -1):
        y = y * t + _F(coeffs[i])
    return y


@njit(inline="always", error_model="numpy", fastmath=FASTMATH, cache=True)
def erf32(x: float) -> float:
    """The reference kernel's fit: x·P(x²)/Q(x²) on |x| ≤ 4 (erf(4) is 1 in float32)."""
    z = min(max(x, _F(-4)), _F(4))
    t = z * z
    y = z * _horner(_ERF32_P, t) / _horner(_ERF32_Q, t)
    return x if x != x else y


@njit(inline="always", error_model="numpy", fastmath=FASTMATH, cache=True)
def gelu32(x: float) -> float:
    """x·Φ(x) = max(x, 0) - |x|·h(|x|), h(a) = e^{-a²/2}·P(a)/Q(a): the reference's form,
    free of cancellation for negative x."""
    a = min(abs(x), _F(16))
    h = exp32(-_HALF * a * a) * _horner(_GELU_P, a) / _horner(_GELU_Q, a)
    pos = _ZERO if x < _ZERO else x
    return pos - a * h


@njit(inline="always", error_model="numpy", fastmath=FASTMATH, cache=True)
def gelu_tanh32(x: float) -> float:
    c0 = _F(math.sqrt(2.0 / math.pi))
    c1 = _F(0.044715 * math.sqrt(2.0 / math.pi))
    return _HALF * x * (_ONE + tanh32(x * (c0 + c1 * x * x)))


@njit(inline="always", error_model="numpy", fastmath=FASTMATH, cache=True)
def softplus32(x: float) -> float:
    """log(1 + e^x) = log1p(e^-|x|) + max(x, 0): no overflow. log1p(y) is log(u) corrected
    by the rounding of u = 1 + y (numba's float32 log1p is a slow libm path)."""
    pos = _ZERO if x < _ZERO else x
    y = exp32(-abs(x))
    u = _ONE + y
    return _F(math.log(u)) - ((u - _ONE) - y) / u + pos
