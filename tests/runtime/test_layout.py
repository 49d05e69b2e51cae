"""Packing helpers: descriptors (pydla's or cuDLA records) say the layout and the type."""

import numpy as np
import pytest

from pydla import formats
from pydla.api import pack_tensor, tensor_format, unpack_tensor
from pydla.dtypes import DType
from pydla.engine.records import descriptor_record

CASES = [("chw", DType.FLOAT32, (1, 3, 4, 5)), ("chw16", DType.FLOAT16, (2, 20, 3, 5)),
         ("chw32", DType.INT8, (1, 33, 2, 3)), ("dla_linear", DType.FLOAT16, (1, 3, 2, 5)),
         ("dla_linear", DType.INT8, (1, 2, 3, 70)), ("dla_hwc4", DType.FLOAT16, (1, 3, 4, 5)),
         ("dla_hwc4", DType.INT8, (1, 1, 2, 3)), ("dla_hwc4", DType.INT8, (1, 4, 2, 70))]


@pytest.mark.parametrize("fmt,dtype,shape", CASES)
@pytest.mark.parametrize("record", [False, True])
def test_pack_unpack_round_trip(fmt, dtype, shape, record):
    desc = formats.describe("t", fmt, shape, dtype)
    if record:
        desc = descriptor_record(desc)  # what module_get_attributes returns
    assert tensor_format(desc) == fmt
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(shape) * 20).astype(dtype.np)
    buf = pack_tensor(x, desc)
    size = desc.size_ if record else desc.size
    assert buf.dtype == np.uint8 and buf.size == size
    assert np.array_equal(buf, formats.pack(x, fmt).reshape(-1).view(np.uint8))
    assert np.array_equal(unpack_tensor(buf, desc), x)


def test_chw16_places_channels_in_blocks():
    desc = formats.describe("t", "chw16", (1, 3, 1, 2), DType.FLOAT16)
    x = np.arange(6, dtype=np.float16).reshape(1, 3, 1, 2)
    blocks = pack_tensor(x, desc).view(np.float16).reshape(1, 1, 1, 2, 16)
    assert blocks[0, 0, 0, 1, :4].tolist() == [1, 3, 5, 0]  # (w=1, c=0..2), padding zero
    assert not blocks[..., 3:].any()


def test_pack_casts_and_checks_the_element_count():
    desc = formats.describe("t", "chw16", (1, 3, 2, 2), DType.FLOAT16)
    x = np.ones((1, 3, 2, 2), np.float64)
    assert unpack_tensor(pack_tensor(x, desc), desc).dtype == np.float16
    with pytest.raises(ValueError):
        pack_tensor(np.ones((1, 2, 2, 2)), desc)
