"""Comparisons, boolean logic, Where, Cast and CastLike against onnxruntime."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from onnx import TensorProto, helper

from pydla.builder import BuildOptions, build_graph
from pydla.dtypes import DType
from pydla.errors import ModelImportError
from tests.oracle import check_against_ort, make_model, run_pydla

RNG = np.random.default_rng(0)
SPECIAL = np.array([0.0, -0.0, 1.5, -2.5, np.inf, -np.inf, np.nan, 300.7, -300.2, 7e9],
                   np.float32)


def _check(op: str, feeds: dict[str, np.ndarray], attrs: dict | None = None, opset: int = 17,
           inits: dict[str, np.ndarray] | None = None) -> list[np.ndarray]:
    names = list(feeds) + list(inits or {})
    node = helper.make_node(op, names, ["y"], **(attrs or {}))
    model = make_model([node], {n: (a.dtype, a.shape) for n, a in feeds.items()}, ["y"],
                       inits, opset)
    with np.errstate(all="ignore"):
        return check_against_ort(model, feeds, 0, 0)


@pytest.mark.parametrize("op", ["Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"])
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int8, np.uint16, np.int64,
                                   np.float64])
def test_comparison(op: str, dtype: type) -> None:
    a = RNG.integers(-3, 4, (2, 3, 4)).astype(dtype)
    b = RNG.integers(-3, 4, (3, 1)).astype(dtype)
    _check(op, {"a": a, "b": b}, opset=16)


@pytest.mark.parametrize("op", ["Equal", "Less", "Greater"])
def test_comparison_nan_and_old_opset(op: str) -> None:
    # Equal takes floats from opset 11 on.
    _check(op, {"a": SPECIAL, "b": SPECIAL[::-1].copy()}, opset=11 if op == "Equal" else 7)


def test_equal_bool() -> None:
    a = RNG.random((3, 4)) > 0.5
    _check("Equal", {"a": a, "b": np.array([True, False, True, False])}, opset=11)


@pytest.mark.parametrize("op", ["And", "Or", "Xor"])
def test_logic_binary(op: str) -> None:
    a, b = RNG.random((2, 3, 4)) > 0.5, RNG.random((3, 4)) > 0.5
    _check(op, {"a": a, "b": b}, opset=7)


def test_not() -> None:
    _check("Not", {"x": RNG.random((3, 5)) > 0.5}, opset=7)


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int32, np.uint8, np.float64])
def test_where(dtype: type) -> None:
    cond = RNG.random((2, 1, 4)) > 0.5
    x = RNG.integers(-9, 9, (3, 4)).astype(dtype)
    y = RNG.integers(-9, 9, (2, 3, 1)).astype(dtype)
    _check("Where", {"c": cond, "a": x, "b": y}, opset=16)


def test_where_keeps_special_values_and_constant_operand() -> None:
    cond = np.array([True, False] * 5)
    _check("Where", {"c": cond, "a": SPECIAL}, opset=9,
           inits={"b": np.full(10, -0.0, np.float32)})


CASTS = [DType.FLOAT32, DType.FLOAT16, DType.FLOAT64, DType.INT8, DType.UINT8, DType.INT16,
         DType.UINT16, DType.INT32, DType.INT64, DType.UINT32, DType.UINT64, DType.BOOL]


@pytest.mark.parametrize("to", CASTS, ids=[t.name for t in CASTS])
def test_cast_from_float(to: DType) -> None:
    # Integer targets get values in their range: C leaves the others undefined.
    x = SPECIAL
    if not (to.is_float or to is DType.BOOL):
        x = np.array([0.0, -0.0, 1.5, -2.5, 0.7, 100.9, -100.9], np.float32)
        x = np.abs(x) if to.np.kind == "u" else x
    _check("Cast", {"x": x}, {"to": int(to)}, opset=13)


@pytest.mark.parametrize("source", CASTS, ids=[t.name for t in CASTS])
def test_cast_to_float_and_int(source: DType) -> None:
    x = RNG.integers(0 if source.np.kind in "bu" else -100, 100, (3, 4))
    x = (x > 50 if source is DType.BOOL else x).astype(source.np)
    for to in (DType.FLOAT32, DType.FLOAT16, DType.INT64, DType.INT8):
        _check("Cast", {"x": x}, {"to": int(to)}, opset=13)


def test_cast_integer_wraps() -> None:
    x = np.array([300, -300, 2**40 + 5, -1], np.int64)
    _check("Cast", {"x": x}, {"to": TensorProto.INT8}, opset=13)
    _check("Cast", {"x": x}, {"to": TensorProto.UINT16}, opset=13)


def test_cast_bfloat16_round_trip() -> None:
    # bfloat16 rounds to nearest even; onnxruntime cannot hand bfloat16 to numpy, so the
    # model casts there and back.
    x = np.array([1 + 2**-8, 1 + 3 * 2**-8, 1 + 2**-8 + 2**-20, 3.4e38, -1.0e-3, np.nan],
                 np.float32)
    there = helper.make_node("Cast", ["x"], ["b"], to=TensorProto.BFLOAT16)
    back = helper.make_node("Cast", ["b"], ["y"], to=TensorProto.FLOAT)
    model = make_model([there, back], {"x": (np.float32, x.shape)}, ["y"], opset=13)
    got = check_against_ort(model, {"x": x}, 0, 0)[0]
    np.testing.assert_array_equal(got, x.astype(ml_dtypes.bfloat16).astype(np.float32))


def test_cast_like_and_identity_cast() -> None:
    x = RNG.standard_normal((2, 3)).astype(np.float32) * 100
    _check("CastLike", {"x": x}, opset=15, inits={"like": np.zeros(1, np.int16)})
    _check("CastLike", {"x": x}, opset=19, inits={"like": np.zeros((), np.float16)})
    # A cast to the input's own type adds no layer.
    node = helper.make_node("Cast", ["x"], ["c"], to=TensorProto.FLOAT)
    relu = helper.make_node("Relu", ["c"], ["y"])
    model = make_model([node, relu], {"x": (np.float32, x.shape)}, ["y"], opset=13)
    assert [n.op for n in build_graph(model, BuildOptions()).nodes] == ["Relu"]


def test_cast_folds_constants() -> None:
    node = helper.make_node("Cast", ["k"], ["c"], to=TensorProto.FLOAT)
    add = helper.make_node("Add", ["x", "c"], ["y"])
    model = make_model([node, add], {"x": (np.float32, (3,))}, ["y"],
                       {"k": np.array([1, 2, 3], np.int64)}, 13)
    assert [n.op for n in build_graph(model, BuildOptions()).nodes] == ["Add"]
    np.testing.assert_array_equal(run_pydla(model, {"x": np.zeros(3, np.float32)})[0],
                                  [1, 2, 3])


@pytest.mark.parametrize("to", [TensorProto.FLOAT8E4M3FN, TensorProto.INT4,
                                TensorProto.STRING, 999])
def test_cast_to_unsupported_type_is_refused(to: int) -> None:
    node = helper.make_node("Cast", ["x"], ["y"], to=to)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", 1, [2])],
                              [helper.make_tensor_value_info("y", 0, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    with pytest.raises(ModelImportError, match="cast to .* is not supported"):
        build_graph(model, BuildOptions())
