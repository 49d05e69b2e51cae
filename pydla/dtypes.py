"""Tensor element types shared by the IR, the loadable and the runtime (numpy only).

Codes are ONNX ``TensorProto.DataType`` values so that no translation table is needed at
import; names are the lower-case spellings stored in loadables. bfloat16 has no numpy type:
it is stored as ``uint16`` bit patterns and computed in float32.
"""

from __future__ import annotations

from enum import IntEnum

import numpy as np


class DType(IntEnum):
    FLOAT32 = 1
    UINT8 = 2
    INT8 = 3
    UINT16 = 4
    INT16 = 5
    INT32 = 6
    INT64 = 7
    BOOL = 9
    FLOAT16 = 10
    FLOAT64 = 11
    UINT32 = 12
    UINT64 = 13
    BFLOAT16 = 16

    @property
    def np(self) -> np.dtype:
        """The numpy dtype a tensor of this type is stored as."""
        return _STORAGE[self]

    @property
    def itemsize(self) -> int:
        return _STORAGE[self].itemsize

    @property
    def is_float(self) -> bool:
        return self in (DType.FLOAT32, DType.FLOAT16, DType.BFLOAT16, DType.FLOAT64)

    @property
    def is_half(self) -> bool:
        return self in (DType.FLOAT16, DType.BFLOAT16)

    @property
    def short(self) -> str:
        """trtexec's spelling (fp32, fp16, bf16, int8…)."""
        return _SHORT[self]

    @classmethod
    def from_name(cls, name: str) -> DType:
        try:
            return _BY_NAME[name]
        except KeyError:
            raise ValueError(f"unknown dtype {name!r}") from None

    @classmethod
    def from_numpy(cls, dtype: np.dtype | type) -> DType:
        dt = np.dtype(dtype)
        for member, storage in _STORAGE.items():
            if storage == dt and member is not DType.BFLOAT16:
                return member
        raise ValueError(f"unsupported numpy dtype {dt}")


_STORAGE: dict[DType, np.dtype] = {
    DType.FLOAT32: np.dtype(np.float32),
    DType.UINT8: np.dtype(np.uint8),
    DType.INT8: np.dtype(np.int8),
    DType.UINT16: np.dtype(np.uint16),
    DType.INT16: np.dtype(np.int16),
    DType.INT32: np.dtype(np.int32),
    DType.INT64: np.dtype(np.int64),
    DType.BOOL: np.dtype(np.bool_),
    DType.FLOAT16: np.dtype(np.float16),
    DType.FLOAT64: np.dtype(np.float64),
    DType.UINT32: np.dtype(np.uint32),
    DType.UINT64: np.dtype(np.uint64),
    DType.BFLOAT16: np.dtype(np.uint16),
}
_SHORT = {
    DType.FLOAT32: "fp32", DType.FLOAT16: "fp16", DType.BFLOAT16: "bf16",
    DType.FLOAT64: "fp64", DType.INT8: "int8", DType.UINT8: "uint8", DType.INT16: "int16",
    DType.UINT16: "uint16", DType.INT32: "int32", DType.UINT32: "uint32",
    DType.INT64: "int64", DType.UINT64: "uint64", DType.BOOL: "bool",
}
_BY_NAME = {m.name.lower(): m for m in DType} | {v: k for k, v in _SHORT.items()}


# The unsigned integer type of each element size in bytes: an element's bits, to move or
# blend them exactly whatever its type (NaN payloads, -0.0).
UINT_OF_SIZE = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def bf16_to_f32(bits: np.ndarray) -> np.ndarray:
    """Widen bfloat16 bit patterns (uint16) to float32 exactly."""
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def f32_to_bf16(x: np.ndarray) -> np.ndarray:
    """Round float32 to bfloat16 bit patterns, to nearest even; NaN stays NaN."""
    x = np.asarray(x, dtype=np.float32, order="C")  # keeps 0-d arrays 0-d
    u = x.view(np.uint32)
    rounded = ((u + (np.uint32(0x7FFF) + ((u >> 16) & 1))) >> 16).astype(np.uint16)
    nan = np.isnan(x)
    if nan.any():
        rounded[nan] = ((u[nan] >> 16) | 0x40).astype(np.uint16)
    return rounded


def to_storage(x: np.ndarray, dtype: DType) -> np.ndarray:
    """Convert computed values (any numeric numpy array) to ``dtype``'s storage."""
    if dtype is DType.BFLOAT16:
        return f32_to_bf16(np.asarray(x, dtype=np.float32))
    with np.errstate(over="ignore"):  # out-of-range values round to ±inf, as IEEE says
        return np.asarray(x).astype(dtype.np, copy=False)


def to_compute(x: np.ndarray, dtype: DType) -> np.ndarray:
    """View stored values in the type kernels compute with (half types widen to float32)."""
    if dtype is DType.BFLOAT16:
        return bf16_to_f32(x)
    if dtype is DType.FLOAT16:
        return x.astype(np.float32)
    return x
