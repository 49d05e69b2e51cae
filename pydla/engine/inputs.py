"""The one check of a user's input array against the tensor it feeds: exact shape, and a dtype
of the same kind.

Every entry point (``LoadedModule.run``, ``pydla.api``, ``pydla.onnx_backend``, the CLI's
``--loadInputs``, bench's and compare's inputs) goes through ``check_input``. An element count
is never enough: a (1, 224, 224, 3) image has the elements of a (1, 3, 224, 224) one, and
reshaping it silently gives a wrong answer. Dtypes: a floating-point tensor takes any
floating-point array (converting precision is what fp16/bf16 I/O formats are for, as in
TensorRT, and ``pydla.api`` documents the cast); an integer tensor takes integers that widen
to it exactly; a bool tensor takes bools. Floats into an integer tensor, integers into a float
tensor or int64 into int32 would change values behind the user's back and are refused.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pydla.dtypes import DType
from pydla.errors import PydlaError


def check_input(name: str, x: Any, shape: tuple[int, ...], dtype: DType,
                error: type[PydlaError]) -> np.ndarray:
    """``x`` as an array of the tensor's storage type after checking it against tensor
    ``name`` (raises ``error``); widened only when its dtype is not already that type."""
    arr = np.asarray(x)
    if arr.dtype == dtype.np and arr.shape == tuple(shape) and dtype is not DType.BFLOAT16:
        return arr  # the common case, checked in a few hundred nanoseconds
    given = _dtype_name(arr.dtype)
    if tuple(arr.shape) != tuple(shape):
        raise error(f"input {name!r}: expected shape {tuple(shape)} {dtype.name.lower()}, "
                    f"given {tuple(arr.shape)} {given}")
    if not _dtype_fits(arr.dtype, dtype):
        raise error(f"input {name!r}: expected dtype {dtype.name.lower()} {tuple(shape)}, "
                    f"given {given}")
    if dtype is DType.BFLOAT16:
        return arr.view(np.uint16)
    return arr.astype(dtype.np, copy=False)


def _dtype_name(dt: np.dtype) -> str:
    return "bfloat16" if dt.name == "bfloat16" else dt.name


def _dtype_fits(given: np.dtype, want: DType) -> bool:
    if want is DType.BFLOAT16:  # its storage (uint16 bits) or ml_dtypes' bfloat16
        return given == np.uint16 or given.name == "bfloat16"
    if want.is_float:
        return given.kind == "f" and given.name != "bfloat16"
    return given.kind != "f" and bool(np.can_cast(given, want.np, "safe"))
