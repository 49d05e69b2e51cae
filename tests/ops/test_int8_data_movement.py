"""What quantized networks move as 8-bit tensors: NCHW↔NHWC Transposes of bytes in 16×16
register tiles (fast_transpose.transpose16_bytes) against numpy, one and two threads."""

from __future__ import annotations

import numpy as np
import pytest

from pydla.backends.base import LayerSpec, TensorSpec
from pydla.backends.cpu import threads
from pydla.backends.cpu.steps import prebind
from pydla.dtypes import DType


@pytest.mark.parametrize("count", [1, 2])
@pytest.mark.parametrize("shape, perm", [((1, 64, 112, 112), (0, 2, 3, 1)),
                                         ((2, 56, 56, 48), (0, 3, 1, 2)),
                                         ((1, 35, 17, 40), (0, 2, 3, 1))])
@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_byte_transposes_in_tiles(shape, perm, dtype: type, count: int) -> None:
    from pydla.backends.cpu.kernels.fast_transpose import bind_strided_copy

    x = np.random.default_rng(1).integers(-128, 128, shape).astype(np.int16).astype(dtype)
    dt = DType.from_numpy(x.dtype)
    out_shape = tuple(shape[a] for a in perm)
    spec = LayerSpec("t", "Transpose", {"perm": list(perm)}, (TensorSpec(shape, dt),),
                     (TensorSpec(out_shape, dt),), "strided_copy")
    y = np.zeros(out_shape, dtype)
    threads.set_num_threads(count)
    try:
        prebind(bind_strided_copy(spec), [x], [y])()
    finally:
        threads.set_num_threads(None)
    np.testing.assert_array_equal(y, x.transpose(perm))
