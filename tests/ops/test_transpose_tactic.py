"""The ``strided_copy`` Transpose tactic: bit-exact against numpy for every permutation of
small ranks, every element size, full and ragged 16×16 tiles, one and two threads; and
chosen for a model's Transpose with the result onnxruntime gives."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np
import pytest
from onnx import helper

from pydla.backends.base import LayerSpec, TensorSpec
from pydla.backends.cpu import threads
from pydla.backends.cpu.kernels.fast_transpose import bind_strided_copy, reduce_perm
from pydla.backends.cpu.steps import prebind
from pydla.builder import BuildOptions, build
from pydla.dtypes import DType
from pydla.engine import LoadedModule
from tests.oracle import make_model, run_ort

RNG = np.random.default_rng(3)

CASES = [((1, 128, 2, 64), (0, 2, 1, 3)), ((1, 128, 2, 64), (0, 2, 3, 1)),
         ((37, 19), (1, 0)), ((3, 33, 17, 5), (3, 1, 0, 2)), ((2, 1, 40, 48), (0, 3, 1, 2)),
         ((5,), (0,)), ((1, 1), (1, 0)), ((64, 64, 9), (2, 0, 1)),
         ((4, 3, 2, 5, 6), (4, 2, 0, 3, 1)), ((300, 200), (1, 0)), ((2, 96, 130), (0, 2, 1)),
         ((3, 7, 5, 2), (0, 2, 1, 3))]  # runs of two elements: copied element by element
CASES += [((2, 3, 4, 5), p) for p in itertools.permutations(range(4))]
CASES += [((1, 6, 1, 7), p) for p in itertools.permutations(range(4))]
DTYPES = [DType.FLOAT32, DType.FLOAT16, DType.INT64, DType.UINT8, DType.BOOL, DType.INT32]


def _data(shape: Sequence[int], dtype: DType) -> np.ndarray:
    if dtype == DType.BOOL:
        return RNG.random(shape) < 0.5
    x = (RNG.standard_normal(shape) * 100).astype(dtype.np)
    if dtype == DType.FLOAT32 and x.size:  # NaN payloads and -0 move bit for bit
        flat = x.reshape(-1).view(np.uint32)
        flat[::7] = 0x7FC01234
        flat[3::11] = 0x80000000
    return x


def _run(x: np.ndarray, perm: Sequence[int], dtype: DType) -> np.ndarray:
    want_shape = tuple(x.shape[a] for a in perm)
    spec = LayerSpec("t", "Transpose", {"perm": list(perm)}, (TensorSpec(x.shape, dtype),),
                     (TensorSpec(want_shape, dtype),), "strided_copy")
    y = np.full(want_shape, 1, dtype.np)
    prebind(bind_strided_copy(spec), [x], [y])()
    return y


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name.lower())
@pytest.mark.parametrize("shape, perm", CASES, ids=lambda v: "x".join(map(str, v)))
def test_bit_exact(shape, perm, dtype: DType) -> None:
    x = _data(shape, dtype)
    got = _run(x, perm, dtype)
    want = np.ascontiguousarray(x.transpose(perm))
    assert got.shape == want.shape
    assert got.tobytes() == want.tobytes()


@pytest.mark.parametrize("count", [1, 2])
@pytest.mark.parametrize("shape, perm", [((8, 128, 2, 64), (0, 2, 3, 1)),
                                         ((4, 130, 3, 64), (0, 2, 1, 3)),
                                         ((1, 70, 1500), (0, 2, 1)),
                                         ((1, 172, 309, 2), (0, 2, 1, 3))])
def test_large_on_each_thread_count(shape, perm, count: int) -> None:
    # Above PARALLEL_MIN the planes (or runs) are shared between the threads.
    threads.set_num_threads(count)
    try:
        x = _data(shape, DType.FLOAT32)
        assert _run(x, perm, DType.FLOAT32).tobytes() == \
            np.ascontiguousarray(x.transpose(perm)).tobytes()
    finally:
        threads.set_num_threads(None)


@pytest.mark.parametrize("shape, perm, reduced", [
    ((1, 128, 2, 64), (0, 2, 1, 3), ([128, 2, 64], [1, 0, 2])),
    ((1, 128, 2, 64), (0, 2, 3, 1), ([128, 128], [1, 0])),
    ((2, 3, 4, 5), (0, 1, 2, 3), ([120], [0])),
    ((2, 3, 4, 5), (2, 3, 0, 1), ([6, 20], [1, 0])),
    ((1, 1), (1, 0), ([], [])),
])
def test_reduce_perm(shape, perm, reduced) -> None:
    assert reduce_perm(shape, perm) == reduced


def test_model_transposes_match_onnxruntime() -> None:
    # A transformer's head split and the keys' transpose, between two MatMuls.
    w = RNG.standard_normal((64, 64)).astype(np.float32)
    model = make_model(
        [helper.make_node("MatMul", ["x", "w"], ["q"]),
         helper.make_node("Reshape", ["q", "heads"], ["h"]),
         helper.make_node("Transpose", ["h"], ["qt"], perm=[0, 2, 1, 3]),
         helper.make_node("Transpose", ["h"], ["kt"], perm=[0, 2, 3, 1]),
         helper.make_node("MatMul", ["qt", "kt"], ["y"])],
        {"x": (np.float32, [2, 48, 64])}, ["y"],
        {"w": w, "heads": np.array([2, 48, 4, 16], np.int64)})
    feeds = {"x": RNG.standard_normal((2, 48, 64)).astype(np.float32)}
    module = LoadedModule(build(model, BuildOptions(autotune=False)))  # by priority
    tactics = {lay.tactic for lay in module.program.layers if lay.op == "Transpose"}
    assert tactics == {"strided_copy"}
    want = run_ort(model, feeds)[0]  # sums of products near 500: rounding scales with them
    np.testing.assert_allclose(module.run(feeds)[0], want, rtol=1e-4,
                               atol=1e-6 * np.abs(want).max())
