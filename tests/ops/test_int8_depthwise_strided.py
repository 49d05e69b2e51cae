"""Strided int8 depthwise convolutions (depthwise.py: stride 1 or 2 along the rows, any
down the columns, phase-split rows) and strided convolutions whose taps leave stride phases
unread (conv.py skips copying them) against the int64 reference, bit for bit, on both
vector paths — mobile networks' down-sampling layers, which conv.py's channel quads ran
10-20× slower."""

from __future__ import annotations

import numpy as np
import pytest

from pydla.backends.cpu.kernels import int8 as q8
from pydla.backends.cpu.kernels.int8 import depthwise
from tests.ops.test_int8_kernels import PATHS, conv_ref, make_requant, requant_ref


@pytest.fixture(params=PATHS)
def path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("PYDLA_CPU_ISA", request.param)
    return str(request.param)


CASES = [
    # x shape, (kh, kw), strides, pads, dilations, x dtype, out dtype
    ((1, 8, 15, 15), (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), np.uint8, np.uint8),
    ((2, 16, 14, 31), (5, 5), (2, 2), (2, 2, 2, 2), (1, 1), np.uint8, np.uint8),
    ((1, 24, 13, 20), (3, 3), (2, 1), (1, 1, 1, 1), (2, 1), np.int8, np.uint8),
    ((1, 16, 17, 9), (3, 3), (1, 2), (0, 1, 2, 1), (1, 1), np.int8, np.float32),
    ((1, 8, 11, 40), (7, 7), (2, 2), (3, 3, 3, 3), (1, 1), np.uint8, np.int8),
    ((1, 5, 23, 34), (3, 2), (3, 2), (1, 0, 1, 1), (1, 1), np.uint8, np.uint8),
    ((3, 4, 56, 56), (3, 3), (2, 2), (0, 0, 1, 1), (1, 1), np.uint8, np.uint8),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}-{c[1]}-s{c[2]}")
def test_strided_depthwise_exact(path: str, case: tuple) -> None:  # type: ignore[type-arg]
    xshape, (kh, kw), strides, pads, dil, xdt, odt = case
    c = xshape[1]
    assert depthwise.applies(c, c, c, strides, dil)
    rng = np.random.default_rng(sum(xshape) * 10 + kh)
    info = np.iinfo(xdt)
    x = rng.integers(info.min, info.max + 1, xshape).astype(xdt)
    w = rng.integers(-128, 128, (c, 1, kh, kw)).astype(np.int8)
    a_zp = int(rng.integers(info.min, info.max + 1))
    rq = make_requant(rng, c, odt, a_zp, kh * kw, relu=odt == np.uint8)
    oh = (xshape[2] + pads[0] + pads[2] - dil[0] * (kh - 1) - 1) // strides[0] + 1
    ow = (xshape[3] + pads[1] + pads[3] - dil[1] * (kw - 1) - 1) // strides[1] + 1
    packed = q8.pack_weights(w, c)
    assert packed.path == path
    out = np.zeros((xshape[0], c, oh, ow), odt)
    q8.qconv2d(x, packed, rq, strides, pads, dil, out)
    acc = conv_ref(x, w, c, a_zp, rq.bias, strides, pads, dil, (oh, ow))
    np.testing.assert_array_equal(out, requant_ref(acc, rq, np.dtype(odt), 1))


def test_worst_case_strided(path: str) -> None:
    """All-255 activations × all -128 weights, stride 2: exact on both paths."""
    c = 16
    x = np.full((1, c, 20, 20), 255, np.uint8)
    w = np.full((c, 1, 3, 3), -128, np.int8)
    rq = q8.Requant(0, np.zeros(c, np.int32), np.ones(c, np.float32), 0, 0, 0,
                    np.dtype(np.int32))
    out = np.zeros((1, c, 10, 10), np.int32)
    q8.qconv2d(x, q8.pack_weights(w, c), rq, (2, 2), (1, 1, 1, 1), (1, 1), out)
    acc = conv_ref(x, w, c, 0, rq.bias, (2, 2), (1, 1, 1, 1), (1, 1), (10, 10))
    np.testing.assert_array_equal(out, acc.astype(np.int32))


SKIPPED_PHASES = [
    # x shape, oc, (kh, kw), strides, pads, dilations: conv.py copies only the stride
    # phases some tap reads (a 1×1 kernel at stride 2 reads one of four)
    ((2, 20, 15, 40), 24, (1, 1), (2, 2), (0, 0, 0, 0), (1, 1)),
    ((1, 8, 13, 22), 12, (1, 1), (2, 1), (0, 0, 1, 0), (1, 1)),
    ((1, 6, 21, 19), 7, (3, 3), (2, 2), (2, 2, 2, 2), (2, 2)),
]


@pytest.mark.parametrize("case", SKIPPED_PHASES, ids=lambda c: f"{c[0]}-k{c[2]}-s{c[3]}")
def test_strided_conv_unread_phases(path: str, case: tuple) -> None:  # type: ignore[type-arg]
    xshape, oc, (kh, kw), strides, pads, dil = case
    rng = np.random.default_rng(sum(xshape) + oc)
    x = rng.integers(0, 256, xshape).astype(np.uint8)
    w = rng.integers(-128, 128, (oc, xshape[1], kh, kw)).astype(np.int8)
    rq = make_requant(rng, oc, np.uint8, 117, xshape[1] * kh * kw)
    oh = (xshape[2] + pads[0] + pads[2] - dil[0] * (kh - 1) - 1) // strides[0] + 1
    ow = (xshape[3] + pads[1] + pads[3] - dil[1] * (kw - 1) - 1) // strides[1] + 1
    out = np.zeros((xshape[0], oc, oh, ow), np.uint8)
    q8.qconv2d(x, q8.pack_weights(w, 1), rq, strides, pads, dil, out)
    acc = conv_ref(x, w, 1, 117, rq.bias, strides, pads, dil, (oh, ow))
    np.testing.assert_array_equal(out, requant_ref(acc, rq, np.dtype(np.uint8), 1))
