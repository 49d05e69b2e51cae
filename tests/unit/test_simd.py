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
                                        ("micro_kernel_blocked_small", gemm.MR_SMALL, 2),
                                        ("micro_kernel_blocked_16", 12, 1),
                                        ("micro_kernel_blocked_small_16", gemm.MR_SMALL, 1)])
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


def _exp32(x: np.ndarray) -> np.ndarray:
    """epilogue.exp32 in numpy float32, operation for operation."""
    from pydla.backends.cpu.kernels.conv_fast import epilogue as e
    x = np.minimum(np.maximum(x, e.EXP_LO), e.EXP_HI)
    n = np.floor(x * e.LOG2E + np.float32(0.5))
    r = x - n * e.LN2_HI
    r = r - n * e.LN2_LO
    p = e.EXP_P[0]
    for coef in e.EXP_P[1:]:
        p = p * r + coef
    p = p * (r * r) + r + np.float32(1)
    return p * ((n + np.float32(127)) * np.float32(1 << 23)).astype(np.int32).view(np.float32)


FUSED_PROGRAMS = ["store", "residual_relu", "clip", "residual", "hardswish", "silu",
                  "silu_residual"]


@pytest.mark.parametrize("name,mr,nv", [("micro_kernel_blocked", 12, 2),
                                        ("micro_kernel_blocked_small_16", gemm.MR_SMALL, 1)])
@pytest.mark.parametrize("budget", [None, 6])
def test_blocked_micro_kernel_fused_store(name: str, mr: int, nv: int, budget: int | None,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """FIN_OUT: the block leaves into the output (its own strides) through the fused
    epilogue, in the staged path's float operations — bit for bit what the stage and the
    interpreter give; C is left as it was; NaN passes the clamp, as Relu keeps it. Every
    program and both store and accumulate on one compiled kernel (the flags are run-time
    values)."""
    if budget is not None:
        monkeypatch.setattr(simd, "ACC_VECTORS", budget)
        kernel = gemm._blocked(mr, nv)
    else:
        kernel = getattr(gemm, name)
    fused, staged_call = _fused(kernel, mr), _micro(kernel, mr, 0)
    for program in FUSED_PROGRAMS:
        for accumulate in (0, 1):
            _check_fused_store(fused, staged_call, mr, nv, program, accumulate)


def _check_fused_store(run, staged_call, mr: int, nv: int, program: str,  # type: ignore[no-untyped-def]
                       accumulate: int) -> None:
    from pydla.backends.cpu.kernels.conv_fast import epilogue as e
    flags, lo, hi = {
        "store": (0, -np.inf, np.inf),
        "residual_relu": (e.FIN_RES | e.FIN_CLAMP, 0.0, np.inf),
        "clip": (e.FIN_CLAMP, -0.5, 0.75), "residual": (e.FIN_RES, -np.inf, np.inf),
        "hardswish": (e.FIN_HSWISH, -np.inf, np.inf), "silu": (e.FIN_SILU, -np.inf, np.inf),
        "silu_residual": (e.FIN_SILU | e.FIN_RES_AFTER, -np.inf, np.inf)}[program]
    p, k = mr + 3, 40
    x = RNG.standard_normal((-(-k // 16), p, 16)).astype(np.float32)
    x[0, 1, 0] = np.nan  # row 1 of C is NaN everywhere
    b = RNG.standard_normal((k, 32)).astype(np.float32)
    bias = RNG.standard_normal(32).astype(np.float32)
    c = RNG.standard_normal((2, mr, 16)).astype(np.float32)
    c_before = c.copy()
    y = np.full((2, 3 * mr, 16), 9.0, np.float32)  # the output: halves 3·mr rows apart
    r = RNG.standard_normal((2, 3 * mr, 16)).astype(np.float32)  # the residual, as y
    run(x, p, b, k, c, bias, accumulate, e.FIN_OUT | flags, y, r.ctypes.data - y.ctypes.data,
        np.array([lo, hi], np.float32))
    assert (c == c_before).all(), program
    # The staged path: the same call into C, then the interpreter's steps in numpy.
    staged = c.copy()
    staged_call(x, p, b, k, staged, bias, accumulate)
    want = staged.copy()
    if flags & e.FIN_RES:
        want = want + r[:, :mr]
    want = np.where(want < lo, np.float32(lo), want)
    want = np.where(want > hi, np.float32(hi), want)
    if flags & e.FIN_HSWISH:
        h = want * np.float32(1 / 6) + np.float32(0.5)
        want = np.minimum(np.maximum(h, np.float32(0)), np.float32(1)) * want
    if flags & e.FIN_SILU:
        with np.errstate(over="ignore", invalid="ignore"):
            want = want * (np.float32(1) / (np.float32(1) + _exp32(-want)))
    if flags & e.FIN_RES_AFTER:
        want = want + r[:, :mr]
    for h in range(nv):
        np.testing.assert_array_equal(y[h, :mr], want[h], err_msg=f"{program} {accumulate}")
    assert np.isnan(y[0, 1]).all(), program
    assert (y[:, mr:] == 9.0).all(), program  # nothing past the block's rows
    if nv == 1:
        assert (y[1] == 9.0).all(), program


def test_fused_epilogue_patterns() -> None:
    """Which interpreter programs the micro-kernels apply as they store (and with which
    flags and clamp), and that the others stay with the interpreter."""
    from pydla.backends.cpu.kernels.conv_fast import epilogue as e

    def program(*steps: tuple[int, tuple[int, int], tuple[int, int]],
                prm: tuple[float, float] = (0.0, 0.0)) -> e.Epilogue:
        code = np.array([[op, *a, *b] for op, a, b in steps], np.int64).reshape(-1, 5)
        return e.Epilogue(code, np.array([prm] * len(steps), np.float32).reshape(-1, 2),
                          (), ())

    acc, full, s0, s1 = (e.ACC, 0), (e.FULL0, 0), (e.STEP, 0), (e.STEP, 1)
    none = (0, 0)
    out, res, after = e.FIN_OUT, e.FIN_RES, e.FIN_RES_AFTER
    assert e.fused_epilogue(program()) == (out, -np.inf, np.inf)
    clamp = e.FIN_CLAMP
    assert e.fused_epilogue(program((e.RELU, acc, none))) == (out | clamp, 0.0, np.inf)
    assert e.fused_epilogue(program((e.CLIP, acc, none), prm=(0.0, 6.0))) == (
        out | clamp, 0.0, 6.0)
    assert e.fused_epilogue(program((e.ADD, full, acc), (e.RELU, s0, none))) == (
        out | res | clamp, 0.0, np.inf)
    assert e.fused_epilogue(program((e.HARD_SWISH, acc, none), (e.ADD, s0, full))) == (
        out | e.FIN_HSWISH | after, -np.inf, np.inf)
    assert e.fused_epilogue(program((e.SIGMOID, acc, none), (e.MUL, s0, acc))) == (
        out | e.FIN_SILU, -np.inf, np.inf)
    refused = [
        program((e.RELU, acc, none), (e.RELU, s0, none)),  # two clamps
        program((e.ADD, acc, (e.FULL1, 0))),  # the second register
        program((e.ADD, acc, (e.VEC, 0))),  # a per-channel operand
        program((e.SIGMOID, acc, none)),  # sigmoid alone
        program((e.SIGMOID, acc, none), (e.MUL, s0, s0)),  # sigmoid squared
        program((e.ADD, acc, full), (e.HARD_SWISH, s0, none)),  # activation of the sum
        program((e.SIGMOID, acc, none), (e.MUL, s0, acc), (e.ADD, s0, full)),  # wrong step
        program((e.RELU, acc, none), (e.ADD, s1, full)),  # reads a step not yet computed
    ]
    for epi in refused:
        assert e.fused_epilogue(epi) is None, epi.code


def test_fused_residual_placement() -> None:
    """fuse_at: the residual's offset from the output where it is a separate tensor of the
    same shape and strides; the output itself only where it is added before the
    activation (each vector read just before it is stored over); never an overlap."""
    from pydla.backends.cpu.kernels.conv_fast import epilogue as e
    before = (e.FIN_OUT | e.FIN_RES | e.FIN_CLAMP, 0.0, np.inf)
    after = (e.FIN_OUT | e.FIN_SILU | e.FIN_RES_AFTER, -np.inf, np.inf)
    arena = np.zeros((3, 64), np.float32)
    y, other = arena[:1], arena[2:]
    assert e.fuse_at(before, y, other) == (before[0], 2 * 64 * 4)
    assert e.fuse_at(before, y, y) == (before[0], 0)
    assert e.fuse_at(after, y, y) == (0, 0)
    assert e.fuse_at(after, y, other) == (after[0], 2 * 64 * 4)
    assert e.fuse_at(before, arena[:2], arena[1:]) == (0, 0)  # overlapping
    assert e.fuse_at(before, y, np.zeros((2, 32), np.float32)) == (0, 0)  # another shape
    assert e.fuse_at(None, y, other) == (0, 0)
    assert e.fuse_at((e.FIN_OUT | e.FIN_CLAMP, 0.0, 6.0), y, y) == (e.FIN_OUT | e.FIN_CLAMP, 0)
