import numpy as np
import pytest

from pydla import formats
from pydla.dtypes import DType, bf16_to_f32, f32_to_bf16

FORMAT_CASES = [(f, t) for f in formats.FORMATS if f != "dla_hwc4"
                for t in sorted(formats.FORMAT_TYPES.get(f, {DType.FLOAT32, DType.INT64}))
                if t is not DType.BFLOAT16]


@pytest.mark.parametrize("fmt,dt", FORMAT_CASES)
def test_pack_unpack_round_trip(fmt, dt):
    x = (np.arange(2 * 19 * 3 * 5) % 100).astype(dt.np).reshape(2, 19, 3, 5)
    formats.check_format(fmt, x.shape, dt)
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


def test_impossible_combinations_are_refused():
    with pytest.raises(formats.FormatError, match="chw16 holds only fp16"):
        formats.check_format("chw16", (1, 16, 4, 4), DType.FLOAT32)
    with pytest.raises(formats.FormatError, match="chw32"):
        formats.check_format("chw32", (1, 16, 4, 4), DType.FLOAT16)


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


@pytest.mark.parametrize("dt,code", [(DType.INT64, 135), (DType.BOOL, 137), (DType.INT32, 134),
                                     (DType.BFLOAT16, 144), (DType.FLOAT32, 1)])
def test_types_cudla_cannot_name_get_extension_codes(dt, code):
    """cuDLA's data types stop at UINT16; int64 token ids, bool masks and the rest get
    pydla's extension code (0x80 + the ONNX type), so pack_tensor knows what they hold."""
    from pydla.api import pack_tensor, unpack_tensor

    desc = formats.describe("ids", "chw", (1, 7), dt)
    assert desc.data_type == code and formats.dtype_of_code(code) is dt
    x = (np.arange(7) % 2).astype(dt.np).reshape(1, 7)
    buf = pack_tensor(x, desc)
    assert buf.nbytes == desc.size
    np.testing.assert_array_equal(unpack_tensor(buf, desc).reshape(1, 7), x)


def test_pack_tensor_refuses_data_of_another_kind():
    from pydla.api import pack_tensor

    desc = formats.describe("ids", "chw", (1, 4), DType.INT64)
    pack_tensor(np.arange(4, dtype=np.int32).reshape(1, 4), desc)  # int32 ids widen
    with pytest.raises(formats.FormatError, match="'ids' holds int64; given float32"):
        pack_tensor(np.zeros((1, 4), np.float32), desc)
    assert formats.dtype_of_code(0) is None and formats.dtype_of_code(0x80 + 99) is None
