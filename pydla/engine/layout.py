"""Lay tensors out as a module's descriptors say: the layout and the type come from the
descriptor (data_format, data_type, strides), the conversion from ``pydla.formats``.

These are the public helpers for programs that fill and read cuDLA buffers by hand
(``chw16``, ``chw32``, ``dla_linear``, ``dla_hwc4`` and linear NCHW).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pydla import formats
from pydla.dtypes import DType


def dtype_of(desc: Any) -> DType:  # TensorDescriptor or ModuleTensorDescriptor
    """The descriptor's element type: cuDLA's codes, and pydla's extension codes for the
    types cuDLA has none for (formats.EXTENSION_TYPE_BASE)."""
    dtype = formats.dtype_of_code(int(desc.data_type))
    if dtype is None:
        raise formats.FormatError(f"descriptor {desc.name!r} has unknown data type "
                                  f"{int(desc.data_type)}")
    return dtype


def format_of(desc: Any) -> str:
    """The TensorRT format name of a descriptor, read from its data_format and strides."""
    e = dtype_of(desc).itemsize
    c, w = int(desc.c), int(desc.w)
    row, plane = int(desc.stride[1]), int(desc.stride[2])
    code = int(desc.data_format)
    if code == formats.DATA_FORMAT_NCHW:
        return "chw" if row == w * e else "dla_linear"
    if code == formats.DATA_FORMAT_NCxHWx:
        return f"chw{row // (w * e)}"
    if code == formats.DATA_FORMAT_NHWC:
        channels = plane // e  # the pixel stride holds C' elements
        if c in (1, 3, 4) and channels == (1 if c == 1 else 4) and row == plane * w + (
                -plane * w) % 64:
            return "dla_hwc4"
        return "hwc" if channels == c else f"hwc{channels}"
    raise formats.FormatError(f"descriptor {desc.name!r} has unknown data format {code}")


def _shape(desc: Any) -> tuple[int, int, int, int]:
    return int(desc.n), int(desc.c), int(desc.h), int(desc.w)


def pack(x: Any, desc: Any, out: np.ndarray | None = None) -> np.ndarray:
    """A uint8 buffer of ``desc.size_`` bytes holding ``x`` (any array-like or DLPack
    tensor of the descriptor's n·c·h·w shape, see ``formats.nchw``) in the descriptor's
    layout and type;
    ``out`` (uint8, ``size_`` bytes) is filled instead of a new buffer when given."""
    arr = np.from_dlpack(x) if hasattr(x, "__dlpack__") else np.asarray(x)
    dtype = dtype_of(desc)
    if out is not None and arr.dtype == dtype.np and int(desc.data_format) == \
            formats.DATA_FORMAT_NCHW and arr.nbytes == _size(desc) and \
            formats.nchw(arr.shape) == _shape(desc):
        # linear layout of the same type: the buffer holds the array's bytes (the common
        # case, every task of the Pythonic API)
        out[:arr.nbytes].view(arr.dtype).reshape(arr.shape)[...] = arr
        return out
    # The array's own shape must map onto the descriptor's (n, c, h, w) as the builder maps
    # tensors (formats.nchw): an equal element count alone would accept an NHWC image.
    if formats.nchw(arr.shape) != _shape(desc):
        raise formats.FormatError(f"tensor {desc.name!r}: expected shape n,c,h,w="
                                  f"{_shape(desc)} (or a tensor of that layout), given "
                                  f"{tuple(arr.shape)} {arr.dtype}")
    # Types convert within their kind (float64 data into a float32 tensor); a float array
    # for integer token ids would be truncated silently, so it is refused.
    if not np.can_cast(arr.dtype, dtype.np, casting="same_kind"):
        raise formats.FormatError(f"tensor {desc.name!r} holds {dtype.name.lower()}; given "
                                  f"{arr.dtype} data, which does not convert to it safely")
    logical = np.ascontiguousarray(arr, dtype=dtype.np).reshape(_shape(desc))
    if out is None:
        out = np.zeros(_size(desc), np.uint8)
    formats.pack(logical, format_of(desc), out=out[:_size(desc)].view(dtype.np))
    return out


def unpack(buf: Any, desc: Any) -> np.ndarray:
    """The logical (n, c, h, w) tensor held by a buffer in the descriptor's layout."""
    data = np.frombuffer(buf, dtype=np.uint8)[:_size(desc)]
    dtype = dtype_of(desc)
    return np.array(formats.unpack(data, format_of(desc), _shape(desc), dtype))


def _size(desc: Any) -> int:
    return int(desc.size_ if hasattr(desc, "size_") else desc.size)
