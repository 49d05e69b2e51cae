import numpy as np
import pytest

from pydla import formats
from pydla.dtypes import DType, bf16_to_f32, f32_to_bf16


@pytest.mark.parametrize("fmt", ["chw", "chw2", "chw4", "chw16", "chw32", "hwc", "hwc8",
                                 "hwc16", "dla_linear"])
@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.int8])
def test_pack_unpack_round_trip(fmt, dtype):
    if fmt == "dla_linear" and np.dtype(dtype).itemsize not in (1, 2, 4):
        pytest.skip()
    x = (np.arange(2 * 19 * 3 * 5) % 100).astype(dtype).reshape(2, 19, 3, 5)
    dt = DType.from_numpy(np.dtype(dtype))
    packed = formats.pack(x, fmt)
    desc = formats.describe("x", fmt, x.shape, dt)
    assert packed.nbytes == desc.size == formats.buffer_size(fmt, x.shape, dt)
    np.testing.assert_array_equal(formats.unpack(packed.view(np.uint8), fmt, x.shape, dt), x)


def test_chw16_layout_matches_cudla_definition():
    x = np.random.default_rng(0).standard_normal((1, 20, 2, 3)).astype(np.float16)
    p = formats.pack(x, "chw16")
    assert p.shape == (1, 2, 2, 3, 16)
    for c in range(20):
        assert p[0, c // 16, 1, 2, c % 16] == x[0, c, 1, 2]
    assert not p[0, 1, :, :, 4:].any()  # padding channels are zero
    d = formats.describe("x", "chw16", x.shape, DType.FLOAT16)
    assert (d.data_format, d.data_type, d.size) == (3, 2, 1 * 2 * 2 * 3 * 16 * 2)


def test_dla_linear_and_hwc4():
    d = formats.describe("x", "dla_linear", (1, 3, 4, 5), DType.FLOAT16)
    assert d.size == 1 * 3 * 4 * 32 * 2  # rows padded to 64 bytes
    x = np.random.default_rng(1).standard_normal((1, 3, 4, 5)).astype(np.float16)
    p = formats.pack(x, "dla_hwc4")
    assert p.shape == (1, 4, 8, 4)
    np.testing.assert_array_equal(formats.unpack(p, "dla_hwc4", x.shape, DType.FLOAT16), x)
    with pytest.raises(formats.FormatError, match="channels"):
        formats.describe("x", "dla_hwc4", (1, 5, 4, 4), DType.FLOAT16)


def test_rank_rules():
    assert formats.nchw((7, 10)) == (7, 10, 1, 1)
    assert formats.nchw((2, 3, 4, 5, 6)) == (6, 4, 5, 6)
    with pytest.raises(formats.FormatError, match="4-D"):
        formats.check_format("chw16", (1, 16), DType.FLOAT16)


def test_bfloat16_rounding():
    x = np.array([1.0, 1.00390625, 1.01171875, -2.5, np.inf, 3.3e38], np.float32)
    back = bf16_to_f32(f32_to_bf16(x))
    assert back[0] == 1.0 and back[1] == 1.0  # tie rounds to even
    assert back[2] == 1.015625
    assert back[3] == -2.5 and np.isinf(back[4])
    assert np.isnan(bf16_to_f32(f32_to_bf16(np.array([np.nan], np.float32))))[0]
