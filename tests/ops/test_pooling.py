"""MaxPool, AveragePool, LpPool, the global pools and MaxUnpool against onnxruntime."""

import numpy as np
import pytest
from onnx import helper

from tests.oracle import check_against_ort, make_model

RNG = np.random.default_rng(1)


def _pool(op: str, x: np.ndarray, outputs: tuple[str, ...] = ("y",), opset: int = 19,
          **attrs) -> None:
    model = make_model([helper.make_node(op, ["x"], list(outputs), **attrs)],
                       {"x": (x.dtype, x.shape)}, list(outputs), opset=opset)
    tol = 1e-2 if x.dtype == np.float16 else 1e-5
    check_against_ort(model, {"x": x}, rtol=tol, atol=tol)


def _rand(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


WINDOWS = [
    {"kernel_shape": [2, 2]},
    {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]},
    {"kernel_shape": [3, 2], "strides": [2, 1], "pads": [1, 0, 0, 1]},
    {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1},
    {"kernel_shape": [2, 2], "strides": [2, 2], "pads": [1, 1, 1, 1], "ceil_mode": 1},
    {"kernel_shape": [2, 2], "dilations": [2, 2]},
    {"kernel_shape": [2, 3], "dilations": [2, 1], "strides": [2, 2], "ceil_mode": 1},
    {"kernel_shape": [3, 3], "strides": [2, 2], "auto_pad": "SAME_UPPER"},
    {"kernel_shape": [3, 3], "strides": [2, 2], "auto_pad": "SAME_LOWER"},
    {"kernel_shape": [2, 2], "strides": [2, 2], "auto_pad": "VALID"},
]


@pytest.mark.parametrize("attrs", WINDOWS)
def test_max_pool(attrs):
    _pool("MaxPool", _rand(2, 3, 7, 8), **attrs)


@pytest.mark.parametrize("attrs", WINDOWS)
@pytest.mark.parametrize("include_pad", [0, 1])
def test_average_pool(attrs, include_pad):
    _pool("AveragePool", _rand(2, 3, 7, 8), count_include_pad=include_pad, **attrs)


@pytest.mark.parametrize("storage_order", [0, 1])
def test_max_pool_indices(storage_order):
    x = RNG.permutation(2 * 3 * 6 * 7).reshape(2, 3, 6, 7).astype(np.float32)
    _pool("MaxPool", x, ("y", "i"), kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1],
          storage_order=storage_order)


def test_max_pool_1d_3d_int8_fp16():
    _pool("MaxPool", _rand(1, 2, 9), kernel_shape=[3], strides=[2], pads=[1, 1])
    _pool("MaxPool", _rand(1, 2, 4, 5, 6), kernel_shape=[2, 2, 3], strides=[1, 2, 2])
    _pool("MaxPool", RNG.integers(-128, 127, (1, 2, 5, 5), dtype=np.int8),
          kernel_shape=[2, 2], pads=[1, 1, 1, 1])
    _pool("MaxPool", _rand(1, 2, 5, 5).astype(np.float16), kernel_shape=[2, 2])
    _pool("AveragePool", _rand(1, 2, 6, 5).astype(np.float16), kernel_shape=[3, 2])


def test_old_opsets():
    _pool("MaxPool", _rand(1, 2, 5, 5), kernel_shape=[2, 2], pads=[1, 1, 0, 0], opset=7)
    _pool("AveragePool", _rand(1, 2, 5, 5), kernel_shape=[3, 3], pads=[1, 1, 1, 1],
          count_include_pad=1, opset=7)
    _pool("MaxPool", _rand(1, 2, 5, 5), ("y", "i"), kernel_shape=[2, 2], opset=8)


@pytest.mark.parametrize("attrs", [
    {"kernel_shape": [2, 2]},
    {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1], "p": 1},
    {"kernel_shape": [3, 2], "p": 3, "auto_pad": "SAME_UPPER"},
])
def test_lp_pool(attrs):
    _pool("LpPool", _rand(1, 2, 6, 7), opset=11, **attrs)


@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool"])
def test_global_pools(op):
    _pool(op, _rand(2, 3, 4, 5))
    _pool(op, _rand(1, 3, 7))


def test_max_unpool():
    x = _rand(1, 2, 4, 4)
    pool = helper.make_node("MaxPool", ["x"], ["p", "i"], kernel_shape=[2, 2], strides=[2, 2])
    unpool = helper.make_node("MaxUnpool", ["p", "i"], ["y"], kernel_shape=[2, 2],
                              strides=[2, 2])
    model = make_model([pool, unpool], {"x": (np.float32, x.shape)}, ["y"], opset=11)
    check_against_ort(model, {"x": x})


def test_pool_constant_folded():
    model = make_model([helper.make_node("MaxPool", ["c"], ["m"], kernel_shape=[2, 2]),
                        helper.make_node("Add", ["m", "z"], ["y"])],
                       {"z": (np.float32, [1, 1, 2, 2])}, ["y"], {"c": _rand(1, 1, 3, 3)})
    check_against_ort(model, {"z": _rand(1, 1, 2, 2)})
