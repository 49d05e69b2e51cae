"""The fast int8 kernels (pydla.backends.cpu.kernels.int8) against a numpy int64 reference,
bit for bit, on both vector paths: AVX-512 VNNI where the CPU has it, AVX2 forced through
PYDLA_CPU_ISA (the CI machine's path). Worst cases: all-255 activations × all -128 weights
(where vpmaddubsw would saturate int16), outputs clamped at both ends, ties rounded half to
even, int8 activations (shifted to uint8 inside), and every edge of the tiling (rows,
columns, K not multiples of the blocking; pixel tiles across output rows)."""

from __future__ import annotations

import numpy as np
import pytest
from numba import njit

from pydla.backends.cpu.kernels import int8 as q8
from pydla.backends.cpu.kernels.int8 import features
from pydla.backends.cpu.kernels.int8.dot import AVX2, VNNI, micro_kernel
from pydla.errors import KernelError

PATHS = [pytest.param(p, marks=pytest.mark.skipif(not features.supported(p),
                                                  reason=f"this CPU has no {p}"))
         for p in ("avx512_vnni", "avx2")]


@pytest.fixture(params=PATHS)
def path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("PYDLA_CPU_ISA", request.param)
    return str(request.param)


def requant_ref(acc: np.ndarray, rq: q8.Requant, dtype: np.dtype, axis: int,
                residual: np.ndarray | None = None) -> np.ndarray:
    """The interface's formula, in numpy: acc (int64, zero point and bias applied)."""
    assert np.abs(acc).max(initial=0) < 2**31
    if dtype == np.int32:
        return acc.astype(np.int32)
    shape = [1] * acc.ndim
    shape[axis] = -1
    f = acc.astype(np.float32) * rq.scale.reshape(shape)
    if residual is not None:
        f = f + (residual.astype(np.float32) - np.float32(rq.residual_zero_point)) \
            * np.float32(rq.residual_scale)
    if dtype == np.float32:
        return np.minimum(np.maximum(f, np.float32(rq.lo)), np.float32(rq.hi))
    qv = np.rint(f) + np.float32(rq.y_zero_point)
    return np.minimum(np.maximum(qv, np.float32(rq.lo)), np.float32(rq.hi)).astype(dtype)


def conv_ref(x: np.ndarray, w: np.ndarray, group: int, a_zp: int, bias: np.ndarray,
             strides: tuple[int, int], pads: tuple[int, ...], dil: tuple[int, int],
             out_hw: tuple[int, int]) -> np.ndarray:
    """Direct convolution in int64, tap by tap; the padding is a real zero (x - a_zp)."""
    xs = x.astype(np.int64) - a_zp
    xs = np.pad(xs, ((0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])))
    n, c = x.shape[:2]
    oc, cg, kh, kw = w.shape
    oh, ow = out_hw
    acc = np.zeros((n, oc, oh, ow), np.int64)
    per = oc // group
    for g in range(group):
        wg = w[g * per:(g + 1) * per].astype(np.int64)
        for i in range(kh):
            for j in range(kw):
                y0, x0 = i * dil[0], j * dil[1]
                patch = xs[:, g * cg:(g + 1) * cg, y0:y0 + strides[0] * (oh - 1) + 1:strides[0],
                           x0:x0 + strides[1] * (ow - 1) + 1:strides[1]]
                acc[:, g * per:(g + 1) * per] += np.einsum("nchw,oc->nohw", patch, wg[:, :, i, j])
    return acc + bias.astype(np.int64).reshape(1, -1, 1, 1)


def make_requant(rng: np.random.Generator, n: int, dtype: type, a_zp: int, k: int = 64,
                 relu: bool = False) -> q8.Requant:
    """Scales that put typical outputs (|acc| ≈ 7400·√k) near ±100: both clamps are hit."""
    bias = rng.integers(-5000, 5000, n).astype(np.int32)
    scale = ((rng.random(n) * 2 + 0.5) * 100 / (7400 * np.sqrt(k))).astype(np.float32)
    if dtype == np.float32:
        lo, hi = (0.0, np.inf) if relu else (-np.inf, np.inf)
        return q8.Requant(a_zp, bias, scale, 0, lo, hi, np.dtype(dtype))
    if dtype == np.int32:
        return q8.Requant(a_zp, bias, scale, 0, 0, 0, np.dtype(dtype))
    info = np.iinfo(dtype)
    zp = 7 if dtype == np.uint8 else -3
    return q8.Requant(a_zp, bias, scale, zp, zp if relu else info.min, info.max, np.dtype(dtype))


CONVS = [
    # x shape, (oc, kh, kw), strides, pads, dilations, group, x dtype, out dtype
    ((1, 16, 20, 37), (24, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1, np.uint8, np.uint8),
    ((2, 10, 19, 33), (13, 3, 3), (2, 2), (1, 0, 2, 1), (1, 1), 1, np.int8, np.int8),
    ((1, 12, 17, 40), (8, 3, 2), (1, 2), (2, 1, 2, 3), (2, 1), 2, np.uint8, np.float32),
    ((1, 32, 18, 18), (40, 1, 1), (1, 1), (0, 0, 0, 0), (1, 1), 1, np.uint8, np.int32),
    ((1, 24, 21, 21), (24, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 24, np.int8, np.uint8),
    ((1, 8, 30, 30), (16, 5, 5), (2, 2), (2, 2, 2, 2), (1, 1), 1, np.uint8, np.uint8),
    # depthwise kernels: rows of taps as the dot product's bytes (depthwise.py), and the
    # strided one through conv.py
    ((2, 16, 9, 40), (16, 5, 5), (1, 1), (2, 1, 2, 3), (2, 1), 16, np.uint8, np.float32),
    ((1, 8, 15, 15), (8, 3, 3), (2, 2), (1, 1, 1, 1), (1, 1), 8, np.uint8, np.uint8),
]


@pytest.mark.parametrize("case", CONVS, ids=lambda c: f"{c[0]}-{c[1]}-s{c[2]}-g{c[5]}")
def test_qconv2d_exact(path: str, case: tuple) -> None:  # type: ignore[type-arg]
    xshape, (oc, kh, kw), strides, pads, dil, group, xdt, odt = case
    rng = np.random.default_rng(sum(xshape) * 100 + oc)
    info = np.iinfo(xdt)
    x = rng.integers(info.min, info.max + 1, xshape).astype(xdt)
    w = rng.integers(-128, 128, (oc, xshape[1] // group, kh, kw)).astype(np.int8)
    a_zp = int(rng.integers(info.min, info.max + 1))
    rq = make_requant(rng, oc, odt, a_zp, xshape[1] // group * kh * kw, relu=odt == np.uint8)
    oh = (xshape[2] + pads[0] + pads[2] - dil[0] * (kh - 1) - 1) // strides[0] + 1
    ow = (xshape[3] + pads[1] + pads[3] - dil[1] * (kw - 1) - 1) // strides[1] + 1
    packed = q8.pack_weights(w, group)
    assert packed.path == path
    out = np.zeros((xshape[0], oc, oh, ow), odt)
    q8.qconv2d(x, packed, rq, strides, pads, dil, out)
    acc = conv_ref(x, w, group, a_zp, rq.bias, strides, pads, dil, (oh, ow))
    expected = requant_ref(acc, rq, np.dtype(odt), 1)
    np.testing.assert_array_equal(out, expected)
    if odt == np.uint8:  # both clamps were hit: the test sees saturation
        assert (out == rq.lo).any() and (out == rq.hi).any()


def test_qconv2d_residual(path: str) -> None:
    rng = np.random.default_rng(5)
    x = rng.integers(0, 256, (1, 8, 23, 23)).astype(np.uint8)
    w = rng.integers(-128, 128, (12, 8, 3, 3)).astype(np.int8)
    base = make_requant(rng, 12, np.uint8, 120)
    rq = q8.Requant(120, base.bias, base.scale, 7, 0, 255, np.dtype(np.uint8),
                    residual_zero_point=130, residual_scale=0.75)
    residual = rng.integers(0, 256, (1, 12, 23, 23)).astype(np.uint8)
    out = np.zeros((1, 12, 23, 23), np.uint8)
    q8.qconv2d(x, q8.pack_weights(w), rq, (1, 1), (1, 1, 1, 1), (1, 1), out, residual)
    acc = conv_ref(x, w, 1, 120, rq.bias, (1, 1), (1, 1, 1, 1), (1, 1), (23, 23))
    np.testing.assert_array_equal(out, requant_ref(acc, rq, np.dtype(np.uint8), 1, residual))
    # a dequantized (float32) output with a quantized residual, ReLU as the clamp
    frq = q8.Requant(120, base.bias, base.scale, 0, 0.0, np.inf, np.dtype(np.float32),
                     residual_zero_point=130, residual_scale=0.02)
    fout = np.zeros((1, 12, 23, 23), np.float32)
    q8.qconv2d(x, q8.pack_weights(w), frq, (1, 1), (1, 1, 1, 1), (1, 1), fout, residual)
    np.testing.assert_array_equal(fout, requant_ref(acc, frq, np.dtype(np.float32), 1,
                                                    residual))


GEMMS = [
    (13, 37, 70, np.uint8, np.uint8),
    (6, 64, 64, np.int8, np.int32),
    (31, 100, 130, np.uint8, np.float32),
    (1, 768, 96, np.int8, np.int8),
]


@pytest.mark.parametrize("case", GEMMS, ids=lambda c: f"{c[0]}x{c[1]}x{c[2]}")
def test_qgemm_exact(path: str, case: tuple) -> None:  # type: ignore[type-arg]
    m, k, n, adt, odt = case
    rng = np.random.default_rng(m * 1000 + k)
    info = np.iinfo(adt)
    a = rng.integers(info.min, info.max + 1, (m, k)).astype(adt)
    w = rng.integers(-128, 128, (n, k)).astype(np.int8)
    a_zp = int(rng.integers(info.min, info.max + 1))
    rq = make_requant(rng, n, odt, a_zp, k)
    out = np.zeros((m, n), odt)
    q8.qgemm(a, q8.pack_weights(w), rq, out)
    acc = (a.astype(np.int64) - a_zp) @ w.astype(np.int64).T + rq.bias
    np.testing.assert_array_equal(out, requant_ref(acc, rq, np.dtype(odt), 1))


def test_qgemm_residual_and_ties(path: str) -> None:
    """scale 0.5 on odd accumulators: every output is a tie, rounded half to even."""
    rng = np.random.default_rng(9)
    m, k, n = 9, 40, 20
    a = rng.integers(0, 256, (m, k)).astype(np.uint8)
    w = rng.integers(-128, 128, (n, k)).astype(np.int8)
    acc0 = a.astype(np.int64) @ w.astype(np.int64).T
    bias = np.where(acc0[0] % 2 == 0, 1, 0).astype(np.int32)  # row 0 all odd
    rq = q8.Requant(0, bias, np.full(n, 0.5, np.float32), 0, -128, 127, np.dtype(np.int8))
    out = np.zeros((m, n), np.int8)
    q8.qgemm(a, q8.pack_weights(w), rq, out)
    np.testing.assert_array_equal(out, requant_ref(acc0 + bias, rq, np.dtype(np.int8), 1))
    f = rng.standard_normal((m, n)).astype(np.float32)
    frq = q8.Requant(3, bias, rng.random(n).astype(np.float32), 0, -np.inf, np.inf,
                     np.dtype(np.float32))
    fout = np.zeros((m, n), np.float32)
    q8.qgemm(a, q8.pack_weights(w), frq, fout, f)
    expected = requant_ref(acc0 - 3 * w.astype(np.int64).sum(1) + bias, frq,
                           np.dtype(np.float32), 1, f)
    np.testing.assert_array_equal(fout, expected)


def test_worst_case_products_do_not_saturate(path: str) -> None:
    """All-255 activations × all -128 weights: 2·255·(-128) = -65280 would saturate
    vpmaddubsw's int16 pairs; the sums must be exact (-32640·K)."""
    k = 512
    a = np.full((7, k), 255, np.uint8)
    w = np.full((33, k), -128, np.int8)
    rq = q8.Requant(0, np.zeros(33, np.int32), np.ones(33, np.float32), 0, 0, 0,
                    np.dtype(np.int32))
    out = np.zeros((7, 33), np.int32)
    q8.qgemm(a, q8.pack_weights(w), rq, out)
    assert (out == -32640 * k).all()
    x = np.full((1, 64, 9, 9), 255, np.uint8)
    wc = np.full((8, 64, 3, 3), -128, np.int8)
    rq8 = q8.Requant(0, np.zeros(8, np.int32), np.ones(8, np.float32), 0, 0, 0,
                     np.dtype(np.int32))
    cout = np.zeros((1, 8, 7, 7), np.int32)
    q8.qconv2d(x, q8.pack_weights(wc), rq8, (1, 1), (0, 0, 0, 0), (1, 1), cout)
    assert (cout == -32640 * 64 * 9).all()


_VNNI_1x1 = micro_kernel(VNNI.name, 1, 1, True)
_AVX2_1x1 = micro_kernel(AVX2.name, 1, 1, True)


@njit
def _vnni_probe(acc: np.ndarray, v: np.ndarray, b: np.ndarray, taps: np.ndarray) -> None:
    _VNNI_1x1(1, 1, v.ctypes.data, 64, taps.ctypes.data, b.ctypes.data, 4, acc.ctypes.data)


@njit
def _avx2_probe(acc: np.ndarray, v: np.ndarray, b: np.ndarray, taps: np.ndarray) -> None:
    _AVX2_1x1(1, 1, v.ctypes.data, 16, taps.ctypes.data, b.ctypes.data, 4, acc.ctypes.data)


@pytest.mark.parametrize(("name", "probe", "instruction", "absent"), [
    pytest.param("avx512_vnni", _vnni_probe, "vpdpbusd", None,
                 marks=pytest.mark.skipif(not features.supported("avx512_vnni"),
                                          reason="this CPU has no AVX-512 VNNI")),
    pytest.param("avx2", _avx2_probe, "vpmaddwd", "vpdpbusd",
                 marks=pytest.mark.skipif(not features.supported("avx2"),
                                          reason="this CPU has no AVX2")),
])
def test_machine_code(name: str, probe: object, instruction: str, absent: str | None) -> None:
    """The micro-kernels compile to the instruction their path is named for."""
    acc = np.zeros(16, np.int32)
    v = np.full(64, 255, np.uint8)
    b = np.full(8, -1, np.int16)
    taps = np.zeros(1, np.int64)
    probe(acc, v, b, taps)  # type: ignore[operator]
    lanes = VNNI.lanes if name == "avx512_vnni" else AVX2.lanes
    expected = -255 * 4 if name == "avx512_vnni" else -255 * 2  # four / two -1 weights a lane
    assert (acc[:lanes] == expected).all()
    asm = "".join(probe.inspect_asm().values())  # type: ignore[attr-defined]
    assert instruction in asm
    if absent:
        assert absent not in asm


def test_isa_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYDLA_CPU_ISA", "avx3")
    with pytest.raises(KernelError, match="PYDLA_CPU_ISA"):
        q8.isa()
    monkeypatch.setenv("PYDLA_CPU_ISA", "generic")
    assert q8.isa() == "generic"
    monkeypatch.delenv("PYDLA_CPU_ISA")
    assert q8.isa() in ("avx512_vnni", "avx2", "generic")


def test_generic_path_matches(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYDLA_CPU_ISA", "generic")
    rng = np.random.default_rng(3)
    x = rng.integers(-128, 128, (1, 6, 9, 9)).astype(np.int8)
    w = rng.integers(-128, 128, (4, 3, 3, 3)).astype(np.int8)
    rq = make_requant(rng, 4, np.int8, -5)
    out = np.zeros((1, 4, 5, 5), np.int8)
    q8.qconv2d(x, q8.pack_weights(w, 2), rq, (2, 2), (1, 1, 1, 1), (1, 1), out)
    acc = conv_ref(x, w, 2, -5, rq.bias, (2, 2), (1, 1, 1, 1), (1, 1), (5, 5))
    np.testing.assert_array_equal(out, requant_ref(acc, rq, np.dtype(np.int8), 1))


def test_bad_inputs() -> None:
    rng = np.random.default_rng(1)
    with pytest.raises(KernelError, match="int8"):
        q8.pack_weights(np.zeros((4, 4), np.float32))
    with pytest.raises(KernelError, match="groups"):
        q8.pack_weights(np.zeros((6, 2, 1, 1), np.int8), group=4)
    w = q8.pack_weights(rng.integers(-128, 128, (8, 16)).astype(np.int8), name="fc")
    rq = make_requant(rng, 8, np.uint8, 0)
    a = np.zeros((4, 16), np.uint8)
    with pytest.raises(KernelError, match=r"'fc'.*\(4, 9\)"):
        q8.bind_qgemm(a, w, rq, np.zeros((4, 9), np.uint8), name="fc")
    with pytest.raises(KernelError, match="out_dtype"):
        q8.qgemm(a, w, rq, np.zeros((4, 8), np.int8))
    bad_scale = q8.Requant(0, rq.bias, rq.scale[:3], 7, 0, 255, np.dtype(np.uint8))
    with pytest.raises(KernelError, match=r"scale must be float32\[8\]"):
        q8.qgemm(a, w, bad_scale, np.zeros((4, 8), np.uint8))
    wide = q8.Requant(0, rq.bias, rq.scale, 7, -1, 255, np.dtype(np.uint8))
    with pytest.raises(KernelError, match="clamp"):
        q8.qgemm(a, w, wide, np.zeros((4, 8), np.uint8))
    with pytest.raises(KernelError, match="residual"):
        q8.qgemm(a, w, rq, np.zeros((4, 8), np.uint8), np.zeros((4, 7), np.uint8))
    with pytest.raises(KernelError, match="residual must be"):
        q8.qgemm(a, w, rq, np.zeros((4, 8), np.uint8), np.zeros((4, 8), np.int32))
    with pytest.raises(KernelError, match="zero point 300"):
        q8.qgemm(a, w, q8.Requant(300, rq.bias, rq.scale, 7, 0, 255, np.dtype(np.uint8)),
                 np.zeros((4, 8), np.uint8))
    wc = q8.pack_weights(rng.integers(-128, 128, (8, 4, 3, 3)).astype(np.int8))
    with pytest.raises(KernelError, match=r"not the output \(1, 8, 6, 6\)"):
        q8.qconv2d(np.zeros((1, 4, 7, 7), np.uint8), wc, rq, (1, 1), (0, 0, 0, 0), (1, 1),
                   np.zeros((1, 8, 6, 6), np.uint8))
