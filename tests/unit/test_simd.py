"""The explicit-vector intrinsics behind the pooling rows: every length around the vector
and pair boundaries, NaN handling, and nothing written past what is asked."""

from __future__ import annotations

import numpy as np
import pytest
from numba import njit

from pydla.backends.cpu.kernels.conv_fast import gemm, simd
from pydla.backends.cpu.kernels.conv_fast.simd import (
    ACC_VECTORS,
    deinterleave2,
    split_rows,
    tap_sum,
    vector_reduce,
)

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


@pytest.mark.parametrize("rows", [1, 4, 6, 7, 8, 12, 13])
@pytest.mark.parametrize("per_row", [1, 2, 3, 4])
def test_split_rows_within_the_register_budget(rows: int, per_row: int) -> None:
    groups = split_rows(rows, per_row)
    assert sum(groups) == rows
    assert max(groups) - min(groups) <= 1  # balanced
    assert all(g * per_row <= max(ACC_VECTORS, per_row) for g in groups)
    assert len(groups) == -(-rows // max(1, ACC_VECTORS // per_row))  # as few as fit


def _micro(kernel, mr: int, a_pf: int):  # type: ignore[no-untyped-def]
    @njit
    def run(x: np.ndarray, p: int, b: np.ndarray, k: int, c: np.ndarray, bias: np.ndarray,
            accumulate: int) -> None:
        kernel(x.ctypes.data, p * 64, 4, 64, b.ctypes.data, k, c.ctypes.data, 64, mr * 64,
               bias.ctypes.data, accumulate, a_pf, 0, 0, 0, 0, 0, 0)

    return run


def _fused(kernel, mr: int):  # type: ignore[no-untyped-def]
    @njit
    def run(x: np.ndarray, p: int, b: np.ndarray, k: int, c: np.ndarray, bias: np.ndarray,
            accumulate: int, fin: int, y: np.ndarray, res: int, lohi: np.ndarray) -> None:
        # y's rows 16 floats apart, its two halves 3·mr rows apart: unlike C's
        kernel(x.ctypes.data, p * 64, 4, 64, b.ctypes.data, k, c.ctypes.data, 64, mr * 64,
               bias.ctypes.data, accumulate, 0, fin, y.ctypes.data, 64, 3 * mr * 64, res,
               lohi.ctypes.data)

    return run


@pytest.mark.parametrize("name,mr,nv", [("micro_kernel_blocked", 12, 2),
                                        ("micro_kernel_blocked7", 7, 2),
                                        ("micro_kernel_blocked_16", 12, 1),
                                        ("micro_kernel_blocked7_16", 7, 1)])
@pytest.mark.parametrize("k", [1, 17, 64])
@pytest.mark.parametrize("budget", [None, 6, 3])
@pytest.mark.parametrize("a_pf", [0, 64])
def test_blocked_micro_kernels(name: str, mr: int, nv: int, k: int, budget: int | None,
                               a_pf: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every row and column vector of C, stored with the bias then accumulated — whether
    the block runs in one pass over K or in several (where its accumulators outgrow the
    vector registers: AVX2's budget, 6, is forced here on any machine), prefetching one
    row's lines of A or every row's (``a_pf``: prefetches never change a result)."""
    if budget is not None:  # a fresh kernel, generated under that register budget
        monkeypatch.setattr(simd, "ACC_VECTORS", budget)
        kernel = gemm._blocked(mr, nv)
    else:
        kernel = getattr(gemm, name)
    p = mr + 5  # pixels per channel block of the blocked X
    x = RNG.standard_normal((-(-k // 16), p, 16)).astype(np.float32)
    b = RNG.standard_normal((k, 32)).astype(np.float32)
    bias = RNG.standard_normal(32).astype(np.float32)
    c = np.full((2, mr, 16), 7.0, np.float32)
    run = _micro(kernel, mr, a_pf)
    a = x.transpose(1, 0, 2).reshape(p, -1)[:mr, :k]
    want = a.astype(np.float64) @ b.astype(np.float64) + bias
    run(x, p, b, k, c, bias, 0)
    got = np.concatenate([c[0], c[1]], axis=1)
    np.testing.assert_allclose(got[:, :16 * nv], want[:, :16 * nv], rtol=1e-5, atol=1e-4)
    if nv == 1:
        assert (c[1] == 7.0).all()  # the second vector untouched
    run(x, p, b, k, c, bias, 1)
    got = np.concatenate([c[0], c[1]], axis=1)
    np.testing.assert_allclose(got[:, :16 * nv], 2 * want[:, :16 * nv] - bias[:16 * nv],
                               rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("pixels,blocks", [(8, 2), (4, 3), (4, 4), (7, 1), (1, 2)])
@pytest.mark.parametrize("budget", [None, 6])
def test_tap_sum_broadcast_blocks(pixels: int, blocks: int, budget: int | None,
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The direct convolution's tap sums: pixels × blocks of accumulators, in registers or
    in several passes over the taps (AVX2's budget forced on any machine)."""
    if budget is not None:
        monkeypatch.setattr(simd, "ACC_VECTORS", budget)
    kernel = tap_sum(pixels, True, blocks, clamp=True)
    taps = 11
    src = RNG.standard_normal(pixels * 3 + taps).astype(np.float32)
    offsets = (np.arange(taps) * 4).astype(np.int64)  # tap t reads src[p·3 + t]
    w = RNG.standard_normal((taps, blocks, 16)).astype(np.float32)
    bias = RNG.standard_normal((blocks, 16)).astype(np.float32)
    dst = np.zeros((blocks, pixels, 16), np.float32)

    @njit
    def run(src, offsets, w, bias, dst):  # type: ignore[no-untyped-def]
        kernel(src.ctypes.data, 12, offsets.ctypes.data, w.ctypes.data, taps, bias.ctypes.data,
               dst.ctypes.data, pixels * 64, np.float32(-0.5), np.float32(np.inf))

    run(src, offsets, w, bias, dst)
    window = np.stack([src[p * 3:p * 3 + taps] for p in range(pixels)])  # (pixels, taps)
    want = np.einsum("pt,tbl->bpl", window.astype(np.float64), w) + bias[:, None, :]
    np.testing.assert_allclose(dst, np.maximum(want, -0.5), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name,mr,nv", [("micro_kernel_blocked", 12, 2),
                                        ("micro_kernel_blocked7_16", 7, 1)])
@pytest.mark.parametrize("budget", [None, 6])
@pytest.mark.parametrize("accumulate", [0, 1])
@pytest.mark.parametrize("residual,lo,hi", [(False, -np.inf, np.inf), (True, 0.0, np.inf),
                                            (False, -0.5, 0.75), (True, -np.inf, np.inf)])
def test_blocked_micro_kernel_fused_store(name: str, mr: int, nv: int, budget: int | None,
                                          accumulate: int, residual: bool, lo: float,
                                          hi: float, monkeypatch: pytest.MonkeyPatch) -> None:
    """FIN_OUT: the block leaves into the output (its own strides), through the residual
    and the clamp, in the staged path's float order — bit for bit what the stage and the
    interpreter give; C is left as it was; NaN passes the clamp, as Relu keeps it."""
    from pydla.backends.cpu.kernels.conv_fast.epilogue import FIN_OUT, FIN_RES
    if budget is not None:
        monkeypatch.setattr(simd, "ACC_VECTORS", budget)
        kernel = gemm._blocked(mr, nv)
    else:
        kernel = getattr(gemm, name)
    p, k = mr + 3, 40
    x = RNG.standard_normal((-(-k // 16), p, 16)).astype(np.float32)
    x[0, 1, 0] = np.nan  # row 1 of C is NaN everywhere
    b = RNG.standard_normal((k, 32)).astype(np.float32)
    bias = RNG.standard_normal(32).astype(np.float32)
    c = RNG.standard_normal((2, mr, 16)).astype(np.float32)
    c_before = c.copy()
    y = np.full((2, 3 * mr, 16), 9.0, np.float32)  # the output: halves 3·mr rows apart
    r = RNG.standard_normal((2, 3 * mr, 16)).astype(np.float32)  # the residual, as y
    flags = FIN_OUT | (FIN_RES if residual else 0)
    run = _fused(kernel, mr)
    run(x, p, b, k, c, bias, accumulate, flags, y, r.ctypes.data - y.ctypes.data,
        np.array([lo, hi], np.float32))
    assert (c == c_before).all()
    # The staged path: the same call into C, then the interpreter's steps in numpy.
    staged = c.copy()
    _micro(kernel, mr, 0)(x, p, b, k, staged, bias, accumulate)
    want = staged.copy()
    if residual:
        want = want + r[:, :mr]
    want = np.where(want < lo, np.float32(lo), want)
    want = np.where(want > hi, np.float32(hi), want)
    for h in range(nv):
        np.testing.assert_array_equal(y[h, :mr], want[h])
    assert np.isnan(y[0, 1]).all()
    assert (y[:, mr:] == 9.0).all()  # nothing past the block's rows
    if nv == 1:
        assert (y[1] == 9.0).all()
