"""NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss against onnxruntime."""

import numpy as np
import pytest
from onnx import helper

from tests.oracle import check_against_ort, make_model

RNG = np.random.default_rng(5)
OPS = ["NegativeLogLikelihoodLoss", "SoftmaxCrossEntropyLoss"]


def _check(op: str, x: np.ndarray, target: np.ndarray, weight: np.ndarray | None = None,
           log_prob: bool = False, opset: int = 13, tol: float = 1e-5, **attrs) -> None:
    feeds = {"x": x, "t": target}
    names = ["x", "t"]
    if weight is not None:
        feeds["w"] = weight
        names.append("w")
    outs = ["loss", "log_prob"] if log_prob else ["loss"]
    model = make_model([helper.make_node(op, names, outs, **attrs)],
                       {n: (a.dtype, a.shape) for n, a in feeds.items()}, outs, opset=opset)
    check_against_ort(model, feeds, rtol=tol, atol=tol)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
@pytest.mark.parametrize("shape", [(4, 3), (2, 3, 5), (2, 3, 2, 2)])
def test_reductions_and_ranks(op, reduction, shape):
    x = RNG.standard_normal(shape).astype(np.float32)
    target = RNG.integers(0, shape[1], (shape[0],) + shape[2:]).astype(np.int64)
    _check(op, x, target, reduction=reduction)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
def test_weight_and_ignore_index(op, reduction):
    x = RNG.standard_normal((3, 4, 5)).astype(np.float32)
    target = RNG.integers(0, 4, (3, 5)).astype(np.int64)
    target[0, 1] = target[2, 3] = -1
    weight = RNG.random(4).astype(np.float32)
    _check(op, x, target, weight, reduction=reduction, ignore_index=-1)
    _check(op, x, np.where(target < 0, 1, target), weight, reduction=reduction)
    _check(op, x, target.astype(np.int32), reduction=reduction, ignore_index=-1)


def test_sce_log_prob_output_and_opset12():
    x = RNG.standard_normal((3, 4)).astype(np.float32)
    target = np.array([0, 3, 1], np.int64)
    _check("SoftmaxCrossEntropyLoss", x, target, log_prob=True)
    _check("SoftmaxCrossEntropyLoss", x, target, log_prob=True, opset=12, reduction="none")


@pytest.mark.parametrize("op", OPS)
def test_fp16_and_double(op):
    target = np.array([1, 0, 2], np.int64)
    x = RNG.standard_normal((3, 3))
    _check(op, x.astype(np.float16), target, tol=2e-3)
    _check(op, x.astype(np.float64), target, reduction="sum")


def test_loss_constant_folded():
    x = RNG.standard_normal((3, 4)).astype(np.float32)
    nodes = [helper.make_node("SoftmaxCrossEntropyLoss", ["c", "t"], ["l"]),
             helper.make_node("Add", ["l", "y0"], ["y"])]
    model = make_model(nodes, {"y0": (np.float32, [])}, ["y"],
                       {"c": x, "t": np.array([0, 3, 1], np.int64)})
    check_against_ort(model, {"y0": np.array(1.5, np.float32)})
