"""The CUDA backend's pure planning code (no GPU needed): arena plan and strides."""

import itertools

import numpy as np
import pytest

from pydla.backends.cuda.layout import (
    ALIGNMENT,
    LINEAR,
    NHWC,
    Lifetime,
    Placement,
    broadcast_strides,
    layout_strides,
    plan_arena,
)
from pydla.dtypes import DType


def test_arena_never_overlaps_live_tensors():
    rng = np.random.default_rng(0)
    lifetimes = []
    for i in range(60):
        first = int(rng.integers(-1, 40))
        lifetimes.append(Lifetime(i, int(rng.integers(1, 5000)), first,
                                  first + int(rng.integers(0, 10))))
    offsets, size = plan_arena(lifetimes)
    for a, b in itertools.combinations(lifetimes, 2):
        if a.last < b.first or b.last < a.first:
            continue  # never alive together: sharing is allowed
        oa, ob = offsets[a.tensor], offsets[b.tensor]
        assert oa + a.nbytes <= ob or ob + b.nbytes <= oa, (a, b)
    assert all(o % ALIGNMENT == 0 for o in offsets.values())
    assert size <= sum(-(-t.nbytes // ALIGNMENT) * ALIGNMENT for t in lifetimes)


def test_arena_reuses_dead_ranges():
    offsets, size = plan_arena([Lifetime(0, 1000, 0, 1), Lifetime(1, 1000, 1, 2),
                                Lifetime(2, 1000, 2, 3)])
    assert offsets[2] == offsets[0] and size == 2 * 1024


def test_strides_by_logical_dimension():
    assert layout_strides((2, 3, 4, 5), NHWC) == (60, 1, 15, 3)
    assert layout_strides((2, 3, 4, 5), LINEAR) == (60, 20, 5, 1)
    bias = Placement(0, (3, 1, 1), DType.FLOAT32, LINEAR)
    assert broadcast_strides(bias, (2, 3, 4, 5)) == (0, 1, 0, 0)
    with pytest.raises(ValueError):
        broadcast_strides(Placement(0, (4,), DType.FLOAT32, LINEAR), (2, 3))
