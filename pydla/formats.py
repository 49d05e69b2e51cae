"""I/O tensor formats (TensorRT names) and cuDLA tensor descriptors; numpy only.

A format maps a logical NCHW tensor to the bytes of a user buffer. ``pack`` and ``unpack``
convert between the two; ``describe`` gives the cuDLA descriptor (``size_`` is the byte size
of the padded layout). Strides: ``stride[0]`` is the element size, ``stride[1]`` the bytes
between rows (h), ``stride[2]`` between channel planes (or channel blocks, or w positions for
the hwc formats), ``stride[3]`` between images (n); the rest are 0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from pydla.dtypes import DType

# cuDLA descriptor codes (C header values).
DATA_FORMAT_UNKNOWN, DATA_FORMAT_NCHW, DATA_FORMAT_NHWC, DATA_FORMAT_NCxHWx = 0, 1, 2, 3
DATA_TYPE_CODES = {DType.FLOAT32: 1, DType.FLOAT16: 2, DType.INT16: 3, DType.INT8: 4,
                   DType.UINT8: 5, DType.UINT16: 6}
# cuDLA has no code for the other types (the DLA runs none of them: a Jetson build refuses
# such I/O by its DLA rules). A pydla loadable may still take int64 token ids, a bool mask
# or int32 indices at its boundary, and an application must be able to tell them apart: a
# descriptor of such a tensor carries pydla's extension code, EXTENSION_TYPE_BASE plus the
# ONNX TensorProto type code (int64: 135, bool: 137, int32: 134, bf16: 144), which no
# cuDLA code reaches.
EXTENSION_TYPE_BASE = 0x80
_TYPE_OF_CODE = {code: dtype for dtype, code in DATA_TYPE_CODES.items()}


def data_type_code(dtype: DType) -> int:
    """The descriptor's data_type for ``dtype``: cuDLA's code, else pydla's extension code."""
    return DATA_TYPE_CODES.get(dtype, EXTENSION_TYPE_BASE + int(dtype))


def dtype_of_code(code: int) -> DType | None:
    """The type a descriptor's data_type names (None: UNKNOWN or not a code)."""
    if code in _TYPE_OF_CODE:
        return _TYPE_OF_CODE[code]
    if code > EXTENSION_TYPE_BASE:
        try:
            return DType(code - EXTENSION_TYPE_BASE)
        except ValueError:
            return None
    return None

DATA_CATEGORY_FEATURE = 2
PIXEL_FORMAT_FEATURE = 36
PIXEL_MAPPING_PITCH_LINEAR = 0

FORMATS = ("chw", "chw2", "chw4", "chw16", "chw32", "hwc", "hwc8", "hwc16", "dla_linear",
           "dla_hwc4")
_BLOCK = {"chw2": 2, "chw4": 4, "chw16": 16, "chw32": 32}
# Element types each format can hold (TensorRT's TensorFormat rules; chw holds every type).
FORMAT_TYPES: dict[str, frozenset[DType]] = {
    "chw2": frozenset({DType.FLOAT16, DType.BFLOAT16}),
    "chw4": frozenset({DType.FLOAT16, DType.INT8}),
    "chw16": frozenset({DType.FLOAT16}),
    "chw32": frozenset({DType.FLOAT32, DType.INT8}),
    "hwc": frozenset({DType.FLOAT32, DType.FLOAT16, DType.BFLOAT16, DType.UINT8}),
    "hwc8": frozenset({DType.FLOAT16, DType.BFLOAT16}),
    "hwc16": frozenset({DType.FLOAT16}),
    "dla_linear": frozenset({DType.FLOAT16, DType.INT8}),
    "dla_hwc4": frozenset({DType.FLOAT16, DType.INT8}),
}
_HWC_PAD = {"hwc": 1, "hwc8": 8, "hwc16": 16}


class FormatError(ValueError):
    """An I/O format cannot hold a tensor of this shape or type."""


@dataclass(frozen=True)
class TensorDescriptor:
    """cuDLA's ``cudlaModuleTensorDescriptor`` fields, as plain Python values."""

    name: str
    size: int
    n: int
    c: int
    h: int
    w: int
    data_format: int
    data_type: int
    data_category: int
    pixel_format: int
    pixel_mapping: int
    stride: tuple[int, ...]


def nchw(shape: tuple[int, ...]) -> tuple[int, int, int, int]:
    """Logical (n, c, h, w) of a tensor: rank < 4 pads on the right ([N, C] → N C 1 1),
    rank > 4 folds the leading dimensions into n."""
    dims = tuple(int(d) for d in shape)
    if len(dims) <= 4:
        dims = dims + (1,) * (4 - len(dims))
        return dims[0], dims[1], dims[2], dims[3]
    return int(np.prod(dims[:-3])), dims[-3], dims[-2], dims[-1]


def _round_up(x: int, m: int) -> int:
    return -(-x // m) * m


def _physical(fmt: str, shape: tuple[int, ...], dtype: DType) -> tuple[tuple[int, ...], int]:
    """Physical array shape of a format and its data_format code."""
    n, c, h, w = nchw(shape)
    e = dtype.itemsize
    if fmt == "chw":
        return (n, c, h, w), DATA_FORMAT_NCHW
    if fmt in _BLOCK:
        k = _BLOCK[fmt]
        return (n, _round_up(c, k) // k, h, w, k), DATA_FORMAT_NCxHWx
    if fmt in _HWC_PAD:
        return (n, h, w, _round_up(c, _HWC_PAD[fmt])), DATA_FORMAT_NHWC
    if fmt == "dla_linear":
        if 64 % e:
            raise FormatError(f"dla_linear needs an element size dividing 64, not {e}")
        return (n, c, h, _round_up(w, 64 // e)), DATA_FORMAT_NCHW
    if fmt == "dla_hwc4":
        if c not in (1, 3, 4):
            raise FormatError(f"dla_hwc4 needs 1, 3 or 4 channels, the tensor has {c}")
        cp = 1 if c == 1 else 4
        if 64 % (cp * e):
            raise FormatError(f"dla_hwc4 cannot pad rows of {dtype.short} elements to 64 bytes")
        return (n, h, _round_up(w, 64 // cp // e), cp), DATA_FORMAT_NHWC
    raise FormatError(f"unknown format {fmt!r}; known: {', '.join(FORMATS)}")


def check_format(fmt: str, shape: tuple[int, ...], dtype: DType) -> None:
    """Raise FormatError when ``fmt`` cannot hold a tensor of this shape and type."""
    if fmt != "chw" and len(shape) != 4:
        raise FormatError(f"format {fmt} needs a 4-D tensor, the tensor has shape {shape}")
    allowed = FORMAT_TYPES.get(fmt)
    if allowed is not None and dtype not in allowed:
        raise FormatError(f"format {fmt} holds only "
                          f"{', '.join(sorted(t.short for t in allowed))}, not {dtype.short}")
    _physical(fmt, shape, dtype)


def buffer_size(fmt: str, shape: tuple[int, ...], dtype: DType) -> int:
    phys, _ = _physical(fmt, shape, dtype)
    return int(np.prod(phys, dtype=np.int64)) * dtype.itemsize


def describe(name: str, fmt: str, shape: tuple[int, ...], dtype: DType) -> TensorDescriptor:
    phys, code = _physical(fmt, shape, dtype)
    e = dtype.itemsize
    n, c, h, w = nchw(shape)
    if fmt == "chw" or fmt == "dla_linear":
        row = phys[3] * e
        strides = (e, row, row * h, row * h * c)
    elif fmt in _BLOCK:
        row = w * phys[4] * e
        strides = (e, row, row * h, row * h * phys[1])
    else:  # hwc-like: [N][H][W'][C']
        pix = phys[3] * e
        row = phys[2] * pix
        strides = (e, row, pix, row * h)
    size = int(np.prod(phys, dtype=np.int64)) * e
    return TensorDescriptor(
        name=name, size=size, n=n, c=c, h=h, w=w, data_format=code,
        data_type=data_type_code(dtype), data_category=DATA_CATEGORY_FEATURE,
        pixel_format=PIXEL_FORMAT_FEATURE, pixel_mapping=PIXEL_MAPPING_PITCH_LINEAR,
        stride=tuple(int(s) & 0xFFFFFFFF for s in strides) + (0,) * 4)


def pack(x: np.ndarray, fmt: str, out: np.ndarray | None = None) -> np.ndarray:
    """Lay a logical tensor out in ``fmt``; returns (or fills) the physical array."""
    x = np.asarray(x)
    if fmt == "chw":
        if out is None:
            return np.ascontiguousarray(x)
        np.copyto(out.reshape(x.shape), x)
        return out
    dtype = DType.from_numpy(x.dtype) if x.dtype != np.uint16 else DType.UINT16
    phys, _ = _physical(fmt, x.shape, dtype)
    res = np.zeros(phys, dtype=x.dtype) if out is None else out.reshape(phys)
    if out is not None:
        res[...] = 0
    n, c, h, w = x.shape
    if fmt in _BLOCK:
        k = _BLOCK[fmt]
        cb = phys[1]
        padded = np.zeros((n, cb * k, h, w), dtype=x.dtype)
        padded[:, :c] = x
        res[...] = padded.reshape(n, cb, k, h, w).transpose(0, 1, 3, 4, 2)
    elif fmt in _HWC_PAD:
        res[:, :, :, :c] = x.transpose(0, 2, 3, 1)
    elif fmt == "dla_linear":
        res[:, :, :, :w] = x
    else:  # dla_hwc4
        res[:, :, :w, :c] = x.transpose(0, 2, 3, 1)
    return res


def unpack(buf: np.ndarray, fmt: str, shape: tuple[int, ...], dtype: DType) -> np.ndarray:
    """Read a logical tensor of ``shape`` out of a physical buffer in ``fmt`` (a view if
    the layout allows, else a new array)."""
    flat = np.asarray(buf).reshape(-1).view(dtype.np)
    if fmt == "chw":  # math.prod: numpy's costs microseconds a call, every task
        return flat[:math.prod(shape)].reshape(shape)
    phys, _ = _physical(fmt, shape, dtype)
    p = flat[:math.prod(phys)].reshape(phys)
    n, c, h, w = shape
    if fmt in _BLOCK:
        return p.transpose(0, 1, 4, 2, 3).reshape(n, -1, h, w)[:, :c]
    if fmt in _HWC_PAD:
        return p[:, :, :, :c].transpose(0, 3, 1, 2)
    if fmt == "dla_linear":
        return p[:, :, :, :w]
    return p[:, :, :w, :c].transpose(0, 3, 1, 2)
