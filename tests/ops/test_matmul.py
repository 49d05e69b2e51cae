"""MatMul, Gemm, Einsum and MatMulInteger against onnxruntime."""

import numpy as np
import pytest
from onnx import helper

from tests.oracle import check_against_ort, make_model

RNG = np.random.default_rng(4)


def _rand(*shape: int, dtype=np.float32) -> np.ndarray:
    return RNG.standard_normal(shape).astype(dtype)


@pytest.mark.parametrize("a,b", [((3, 4), (4, 5)), ((4,), (4,)), ((4,), (2, 4, 3)),
                                 ((2, 3, 4), (4,)), ((2, 1, 3, 4), (5, 4, 2)),
                                 ((1, 3, 4), (2, 4, 2))])
def test_matmul_shapes(a, b):
    model = make_model([helper.make_node("MatMul", ["a", "b"], ["y"])],
                       {"a": (np.float32, a), "b": (np.float32, b)}, ["y"])
    check_against_ort(model, {"a": _rand(*a), "b": _rand(*b)})


@pytest.mark.parametrize("dtype", [np.float64, np.int32, np.int64, np.float16])
def test_matmul_types(dtype):
    a, b = (_rand(2, 3, 4) * 4).astype(dtype), (_rand(4, 2) * 4).astype(dtype)
    model = make_model([helper.make_node("MatMul", ["a", "b"], ["y"])],
                       {"a": (dtype, a.shape), "b": (dtype, b.shape)}, ["y"], opset=13)
    tol = 1e-2 if dtype == np.float16 else 1e-5
    check_against_ort(model, {"a": a, "b": b}, rtol=tol, atol=tol)


def test_matmul_weight_initializer_and_folded():
    model = make_model([helper.make_node("MatMul", ["a", "w"], ["m"]),
                        helper.make_node("MatMul", ["w", "v"], ["c"]),
                        helper.make_node("Add", ["m", "c"], ["y"])],
                       {"a": (np.float32, [3, 3])}, ["y"], {"w": _rand(3, 3), "v": _rand(3, 3)})
    check_against_ort(model, {"a": _rand(3, 3)})


@pytest.mark.parametrize("attrs,c_shape", [
    ({}, (3, 5)), ({}, None), ({}, (5,)), ({}, (1,)), ({}, (3, 1)), ({}, ()),
    ({"alpha": 0.5, "beta": 2.0}, (3, 5)), ({"transA": 1}, (5,)), ({"transB": 1}, (5,)),
    ({"transA": 1, "transB": 1, "alpha": -1.5, "beta": 0.0}, (3, 5)),
])
def test_gemm(attrs, c_shape):
    a_shape = (4, 3) if attrs.get("transA") else (3, 4)
    b_shape = (5, 4) if attrs.get("transB") else (4, 5)
    inits = {"b": _rand(*b_shape)} | ({} if c_shape is None else {"c": _rand(*c_shape)})
    ins = ["a", "b"] + ([] if c_shape is None else ["c"])
    model = make_model([helper.make_node("Gemm", ins, ["y"], **attrs)],
                       {"a": (np.float32, a_shape)}, ["y"], inits, opset=13)
    check_against_ort(model, {"a": _rand(*a_shape)})


def test_gemm_opset7_required_c():
    model = make_model([helper.make_node("Gemm", ["a", "b", "c"], ["y"], transB=1)],
                       {"a": (np.float32, (2, 3))}, ["y"], {"b": _rand(4, 3), "c": _rand(4)},
                       opset=7)
    check_against_ort(model, {"a": _rand(2, 3)})


@pytest.mark.parametrize("equation,shapes", [
    ("ij,jk->ik", [(2, 3), (3, 4)]),
    ("bij,bjk->bik", [(2, 2, 3), (2, 3, 4)]),
    ("ij->ji", [(2, 3)]),
    ("ii->i", [(3, 3)]),
    ("ij->", [(2, 3)]),
    ("i,i", [(4,), (4,)]),
    ("...ij,...jk->...ik", [(2, 2, 3), (2, 3, 2)]),
    ("bhqd,bhkd->bhqk", [(1, 2, 3, 4), (1, 2, 5, 4)]),
    ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 2)]),
])
def test_einsum(equation, shapes):
    names = [f"x{i}" for i in range(len(shapes))]
    model = make_model([helper.make_node("Einsum", names, ["y"], equation=equation)],
                       {n: (np.float32, s) for n, s in zip(names, shapes)}, ["y"], opset=12)
    check_against_ort(model, {n: _rand(*s) for n, s in zip(names, shapes)})


@pytest.mark.parametrize("a_zp,b_zp", [(None, None), (np.uint8(12), np.uint8(200)),
                                       (np.uint8(3), np.array([5, 6, 7, 8], np.uint8))])
def test_matmul_integer(a_zp, b_zp):
    a = RNG.integers(0, 255, (3, 5), dtype=np.uint8)
    b = RNG.integers(0, 255, (5, 4), dtype=np.uint8)
    inits: dict[str, np.ndarray] = {"b": b}
    ins = ["a", "b"]
    if a_zp is not None:
        inits |= {"az": np.asarray(a_zp), "bz": np.asarray(b_zp)}
        ins += ["az", "bz"]
    model = make_model([helper.make_node("MatMulInteger", ins, ["y"])],
                       {"a": (np.uint8, a.shape)}, ["y"], inits, opset=10)
    check_against_ort(model, {"a": a})
