import numpy as np
import pytest

from pydla.dtypes import DType
from pydla.plan.lower import IOFormat
from pydla.tools.flags import FlagError, parse_io_formats, parse_mem_pools, parse_shapes


def test_shapes():
    shapes, values = parse_shapes("images:1x3x640x640,tokens:2x16,ids:[1,2,3]")
    assert shapes == {"images": (1, 3, 640, 640), "tokens": (2, 16)}
    np.testing.assert_array_equal(values["ids"], [1, 2, 3])
    with pytest.raises(FlagError, match="dims"):
        parse_shapes("x:1xAx3")


def test_io_formats():
    assert parse_io_formats("fp16:chw16,chw", "--inputIOFormats") == [
        IOFormat(DType.FLOAT16, "chw16"), IOFormat(None, "chw")]
    with pytest.raises(FlagError, match="unknown format"):
        parse_io_formats("fp16:chw17", "--inputIOFormats")
    with pytest.raises(FlagError, match="unknown type"):
        parse_io_formats("fp12:chw16", "--inputIOFormats")


def test_mem_pools():
    assert parse_mem_pools("workspace:1024,dlaSRAM:1") == {"workspace": 1 << 30,
                                                            "dlaSRAM": 1 << 20}
    assert parse_mem_pools("workspace:512KiB") == {"workspace": 512 << 10}
    with pytest.raises(FlagError, match="pools"):
        parse_mem_pools("gpu:1")
