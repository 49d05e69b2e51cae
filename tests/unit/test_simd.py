"""The explicit-vector intrinsics behind the pooling rows: every length around the vector
and pair boundaries, NaN handling, and nothing written past what is asked."""

from __future__ import annotations

import numpy as np
import pytest
from numba import njit

from pydla.backends.cpu.kernels.conv_fast.simd import deinterleave2, vector_reduce

_MAX, _ADD, _MAX_WHOLE = vector_reduce("max"), vector_reduce("add"), vector_reduce("max", True)
LENGTHS = [0, 1, 15, 16, 17, 31, 32, 33, 56, 64, 100]
RNG = np.random.default_rng(11)


@njit
def _reduce(table: np.ndarray, k: int, dst: np.ndarray, n: int, op: int) -> None:
    if op == 0:
        _MAX(table.ctypes.data, k, dst.ctypes.data, n)
    elif op == 1:
        _ADD(table.ctypes.data, k, dst.ctypes.data, n)
    else:
        _MAX_WHOLE(table.ctypes.data, k, dst.ctypes.data, n)


@njit
def _split(src: np.ndarray, even: np.ndarray, odd: np.ndarray, n: int) -> None:
    deinterleave2(src.ctypes.data, even.ctypes.data, odd.ctypes.data, n)


@pytest.mark.parametrize("n", LENGTHS)
@pytest.mark.parametrize("k", [1, 2, 3, 5])
@pytest.mark.parametrize("op", ["max", "add"])
def test_vector_reduce(n: int, k: int, op: str) -> None:
    srcs = [RNG.random(n + 20, dtype=np.float32) for _ in range(k)]
    if n > 5:  # a NaN first stays, a later one is skipped (the scalar v if v > t else t)
        srcs[0][3] = np.nan
        srcs[-1][4] = np.nan
    dst = RNG.random(n + 20, dtype=np.float32)
    want = dst.copy()
    acc = srcs[0][:n].copy()
    for s in srcs[1:]:
        acc = np.where(s[:n] > acc, s[:n], acc) if op == "max" else acc + s[:n]
    want[:n] = acc
    table = np.array([s.ctypes.data for s in srcs], np.int64)
    _reduce(table, k, dst, n, 0 if op == "max" else 1)
    np.testing.assert_array_equal(dst, want)  # and nothing past n


def test_vector_reduce_whole_store_fills_the_last_vector() -> None:
    src = RNG.random(64, dtype=np.float32)
    dst = np.full(64, -7.0, np.float32)
    table = np.array([src.ctypes.data], np.int64)
    _reduce(table, 1, dst, 20, 2)
    np.testing.assert_array_equal(dst[:20], src[:20])
    assert (dst[20:32] == 0).all()  # the second vector stored whole (masked loads: zeros)
    assert (dst[32:] == -7.0).all()


def test_unknown_reduction() -> None:
    with pytest.raises(ValueError, match="unknown op"):
        vector_reduce("min")


@pytest.mark.parametrize("n", [*LENGTHS, 63, 65, 112, 113])
def test_deinterleave2(n: int) -> None:
    src = np.arange(n + 40, dtype=np.float32)
    even, odd = np.full(70, -1, np.float32), np.full(70, -1, np.float32)
    _split(src, even, odd, n)
    want_even, want_odd = np.full(70, -1, np.float32), np.full(70, -1, np.float32)
    want_even[:(n + 1) // 2] = src[0:n:2]
    want_odd[:n // 2] = src[1:n:2]
    np.testing.assert_array_equal(even, want_even)
    np.testing.assert_array_equal(odd, want_odd)
