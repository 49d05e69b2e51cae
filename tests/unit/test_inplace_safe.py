"""Every op the builder runs in place gives the same result when its output aliases input 0."""

import numpy as np
import pytest

from pydla.backends.base import LayerSpec, TensorSpec
from pydla.backends.cpu.backend import bind_layer
from pydla.dtypes import DType
from pydla.ops import INPLACE_SAFE

ATTRS = {"Clip": {}, "LeakyRelu": {"alpha": 0.1}}


@pytest.mark.parametrize("op", sorted(INPLACE_SAFE))
def test_aliased_output_matches(op):
    rng = np.random.default_rng(0)
    x = (rng.random((3, 4, 5)).astype(np.float32) + 0.5)
    binary = op in ("Add", "Sub", "Mul", "Div")
    t = TensorSpec((3, 4, 5), DType.FLOAT32)
    b = TensorSpec((5,), DType.FLOAT32)
    ins = (t, b) if binary else (t,)
    run = bind_layer(LayerSpec("l", op, ATTRS.get(op, {}), ins, (t,)))
    other = rng.random(5).astype(np.float32) + 0.5
    args = [x, other] if binary else [x]
    want = np.empty_like(x)
    run(args, [want])
    aliased = x.copy()
    run([aliased, other] if binary else [aliased], [aliased])
    np.testing.assert_array_equal(aliased, want)
