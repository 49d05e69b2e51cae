"""Softmax, LogSoftmax and Hardmax against onnxruntime, both axis semantics."""

import numpy as np
import pytest
from onnx import helper

from tests.oracle import check_against_ort, make_model

RNG = np.random.default_rng(3)


def _check(op: str, x: np.ndarray, opset: int, **attrs) -> None:
    model = make_model([helper.make_node(op, ["x"], ["y"], **attrs)],
                       {"x": (x.dtype, x.shape)}, ["y"], opset=opset)
    tol = 1e-2 if x.dtype == np.float16 else 1e-5
    check_against_ort(model, {"x": x}, rtol=tol, atol=tol)


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax", "Hardmax"])
@pytest.mark.parametrize("opset,axis", [(11, None), (11, 0), (11, 2), (11, -1), (7, None),
                                        (13, None), (13, 0), (13, 1), (13, -2)])
def test_softmax_family(op, opset, axis):
    attrs = {} if axis is None else {"axis": axis}
    _check(op, RNG.standard_normal((2, 3, 4)).astype(np.float32) * 5, opset, **attrs)


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
def test_large_values_and_fp16(op):
    _check(op, np.array([[1000, 1001, 1002], [-3000, 0, 3000]], np.float32), 13)
    _check(op, RNG.standard_normal((2, 5)).astype(np.float16), 13)


def test_hardmax_ties_pick_first():
    x = np.array([[1, 3, 3, 0], [2, 2, 2, 2]], np.float32).reshape(2, 2, 2)
    _check("Hardmax", x, 11, axis=1)
    _check("Hardmax", x, 13, axis=1)


def test_softmax_constant_folded():
    model = make_model([helper.make_node("Softmax", ["c"], ["s"]),
                        helper.make_node("Add", ["s", "x"], ["y"])],
                       {"x": (np.float32, [2, 3])}, ["y"],
                       {"c": RNG.standard_normal((2, 3)).astype(np.float32)})
    check_against_ort(model, {"x": np.zeros((2, 3), np.float32)})
