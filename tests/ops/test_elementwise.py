"""Elementwise arithmetic and activations against onnxruntime (and a few exact references)."""

from __future__ import annotations

import math

import numpy as np
import onnx
import pytest
from onnx import helper

from pydla.backends.base import LayerSpec, TensorSpec
from pydla.backends.cpu.backend import bind_layer
from pydla.builder import BuildOptions, build_graph
from pydla.dtypes import DType
from pydla.errors import ModelImportError
from tests.oracle import check_against_ort, make_model, run_pydla

RNG = np.random.default_rng(0)
# float32 results match onnxruntime to about 1e-6 relative; a few ops whose libm differs
# (onnxruntime's vectorised exp/tanh/erf approximations) get their own tolerance below.
RTOL, ATOL = 2e-6, 1e-7


def _normal(*shape: int, scale: float = 2.0, dtype: type = np.float32) -> np.ndarray:
    return np.asarray(RNG.standard_normal(shape) * scale).astype(dtype)


def _check(op: str, feeds: dict[str, np.ndarray], attrs: dict | None = None, opset: int = 17,
           inits: dict[str, np.ndarray] | None = None, rtol: float = RTOL,
           atol: float = ATOL) -> list[np.ndarray]:
    """One ``op`` node over graph inputs ``feeds`` (and constant ``inits``) against ORT."""
    names = list(feeds) + list(inits or {})
    node = helper.make_node(op, names, ["y"], **(attrs or {}))
    model = make_model([node], {n: (a.dtype, a.shape) for n, a in feeds.items()}, ["y"],
                       inits, opset)
    with np.errstate(all="ignore"):
        return check_against_ort(model, feeds, rtol, atol)


SPECIAL = np.array([0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, 1e-30, -1e30], np.float32)

UNARY = [  # op, input, opset, rtol
    ("Abs", _normal(3, 4), 13, RTOL), ("Neg", _normal(3, 4), 13, RTOL),
    ("Floor", _normal(3, 4), 13, RTOL), ("Ceil", _normal(3, 4), 13, RTOL),
    ("Round", np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 0.49, 3.7], np.float32), 11, RTOL),
    ("Sign", np.concatenate([_normal(5), [0.0, -0.0]]).astype(np.float32), 13, RTOL),
    ("Sqrt", np.abs(_normal(3, 4)), 13, RTOL), ("Reciprocal", _normal(3, 4), 13, RTOL),
    ("Exp", _normal(3, 4), 13, RTOL), ("Log", np.abs(_normal(3, 4)), 13, RTOL),
    ("Sin", _normal(3, 4), 7, RTOL), ("Cos", _normal(3, 4), 7, RTOL),
    ("Tan", _normal(3, 4, scale=0.5), 7, RTOL), ("Asin", np.tanh(_normal(3, 4)), 7, RTOL),
    ("Acos", np.tanh(_normal(3, 4)), 7, RTOL), ("Atan", _normal(3, 4), 7, RTOL),
    ("Sinh", _normal(3, 4), 9, RTOL), ("Cosh", _normal(3, 4), 9, RTOL),
    ("Asinh", _normal(3, 4), 9, RTOL), ("Acosh", 1 + np.abs(_normal(3, 4)), 9, RTOL),
    ("Atanh", np.tanh(_normal(3, 4)), 9, RTOL), ("Tanh", _normal(3, 4), 13, 1e-5),
    ("Sigmoid", _normal(3, 4, scale=6), 13, 1e-5), ("Erf", _normal(4, 5), 13, 1e-5),
    ("Relu", _normal(3, 4), 14, RTOL), ("Softplus", _normal(3, 4, scale=8), 1, 1e-5),
    ("Softsign", _normal(3, 4), 1, RTOL), ("HardSwish", _normal(3, 4, scale=4), 14, RTOL),
    ("Mish", _normal(3, 4, scale=4), 18, 1e-5),
    ("IsNaN", SPECIAL, 13, RTOL), ("IsInf", SPECIAL, 10, RTOL),
]


@pytest.mark.parametrize("op,x,opset,rtol", UNARY, ids=[u[0] for u in UNARY])
def test_unary(op: str, x: np.ndarray, opset: int, rtol: float) -> None:
    _check(op, {"x": x}, opset=max(opset, 7), rtol=rtol)


@pytest.mark.parametrize("op", ["Abs", "Neg", "Sign", "Relu"])
@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.int64])
def test_unary_integer(op: str, dtype: type) -> None:
    info = np.iinfo(dtype)
    x = np.array([0, 1, -1, 7, -100, info.max, info.min], dtype)  # Abs/Neg of min wrap
    if op == "Relu" and dtype is np.int64:  # onnxruntime has no int64 Relu
        node = helper.make_node(op, ["x"], ["y"])
        model = make_model([node], {"x": (dtype, x.shape)}, ["y"], opset=14)
        np.testing.assert_array_equal(run_pydla(model, {"x": x})[0], np.maximum(x, 0))
        return
    _check(op, {"x": x}, opset=14)


@pytest.mark.parametrize("positive,negative", [(1, 1), (1, 0), (0, 1), (0, 0)])
def test_isinf_detect(positive: int, negative: int) -> None:
    _check("IsInf", {"x": SPECIAL}, {"detect_positive": positive,
                                     "detect_negative": negative}, opset=20)


ACTIVATIONS = [  # op, attrs, opset
    ("LeakyRelu", {}, 16), ("LeakyRelu", {"alpha": 0.3}, 7), ("LeakyRelu", {"alpha": 2.5}, 16),
    ("LeakyRelu", {"alpha": -0.5}, 16),
    ("Elu", {}, 7), ("Elu", {"alpha": 0.4}, 22), ("Elu", {"alpha": 2.0}, 22),
    ("Selu", {}, 7), ("Selu", {"alpha": 2.0, "gamma": 3.0}, 22),
    ("Celu", {}, 12), ("Celu", {"alpha": 2.5}, 12), ("Celu", {"alpha": 0.3}, 12),
    ("HardSigmoid", {}, 7), ("HardSigmoid", {"alpha": 0.5, "beta": 0.1}, 22),
    ("ThresholdedRelu", {}, 10), ("ThresholdedRelu", {"alpha": -0.5}, 22),
    ("Shrink", {}, 9), ("Shrink", {"bias": 1.5, "lambd": 0.7}, 9),
    ("Gelu", {}, 20), ("Gelu", {"approximate": "tanh"}, 20),
    ("Swish", {}, 24), ("Swish", {"alpha": 1.7}, 24),
]


@pytest.mark.parametrize("op,attrs,opset", ACTIVATIONS,
                         ids=[f"{a[0]}-{'-'.join(map(str, a[1].values()))}" for a in ACTIVATIONS])
def test_activation(op: str, attrs: dict, opset: int) -> None:
    x = np.concatenate([_normal(24, scale=3), [0.0, -0.0, 1e-4, -1e-4, 9.0, -9.0]])
    _check(op, {"x": x.astype(np.float32)}, attrs, opset=opset, rtol=1e-5, atol=1e-6)


def test_activation_special_values() -> None:
    # onnxruntime and pydla agree on NaN, ±inf and signed zeros for the piecewise ops.
    for op, opset in [("Relu", 14), ("LeakyRelu", 16), ("Elu", 7), ("HardSigmoid", 7),
                      ("Clip", 7), ("Sigmoid", 13), ("Softsign", 7), ("Erf", 13)]:
        _check(op, {"x": SPECIAL}, opset=opset, rtol=1e-6)


def test_shrink_integer_input() -> None:
    x = np.arange(-6, 7, dtype=np.int32)
    _check("Shrink", {"x": x}, {"bias": 1.5, "lambd": 2.0}, opset=9)


@pytest.mark.parametrize("op", ["Relu", "Sigmoid", "Tanh", "Gelu", "HardSwish", "LeakyRelu",
                                "Exp", "Erf"])
def test_activation_float16(op: str) -> None:
    x = _normal(4, 6).astype(np.float16)
    _check(op, {"x": x}, opset=20, rtol=2e-3, atol=2e-3)


def test_erf_float64_is_exact() -> None:
    x = np.concatenate([np.linspace(-7, 7, 4001), [0.0, 1e-300, -1e-12, 0.999999, 1.0, 5.99,
                                                    6.01, 1e300, np.inf, -np.inf]])
    node = helper.make_node("Erf", ["x"], ["y"])
    model = make_model([node], {"x": (np.float64, x.shape)}, ["y"], opset=13)
    (got,) = run_pydla(model, {"x": x})
    want = np.array([math.erf(v) for v in x])
    np.testing.assert_allclose(got, want, rtol=2e-15, atol=0)


# -- Clip ---------------------------------------------------------------------------------

def test_clip_attributes_before_opset_11() -> None:
    x = np.concatenate([_normal(10), [np.inf, -np.inf, np.nan]]).astype(np.float32)
    _check("Clip", {"x": x}, {"min": -0.5, "max": 1.25}, opset=7)
    _check("Clip", {"x": x}, {"max": 0.5}, opset=10)  # default min is -FLT_MAX, clips -inf


@pytest.mark.parametrize("bounds", [("lo", "hi"), ("lo", ""), ("", "hi"), ("", "")])
def test_clip_constant_bounds(bounds: tuple[str, str]) -> None:
    inits = {"lo": np.array(-0.5, np.float32), "hi": np.array(0.75, np.float32)}
    x = _normal(3, 5)
    node = helper.make_node("Clip", ["x", *bounds], ["y"])
    model = make_model([node], {"x": (np.float32, x.shape)}, ["y"],
                       {k: v for k, v in inits.items() if k in bounds}, 13)
    check_against_ort(model, {"x": x}, RTOL, ATOL)
    graph = build_graph(model, BuildOptions())
    assert [n.op for n in graph.nodes] == ["Clip"]
    assert all(v is None or not v.is_const for v in graph.nodes[0].inputs)


def test_clip_runtime_bounds() -> None:
    x, lo, hi = _normal(2, 3), np.array(-0.25, np.float32), np.array(1.0, np.float32)
    _check("Clip", {"x": x, "lo": lo, "hi": hi}, opset=13)
    _check("Clip", {"x": x, "lo": np.array(2.0, np.float32), "hi": hi}, opset=13)  # min > max


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int64])
def test_clip_integer(dtype: type) -> None:
    x = np.array([0, 5, 100, 7, 127], dtype)
    _check("Clip", {"x": x}, opset=13, inits={"lo": np.array(3, dtype),
                                                "hi": np.array(90, dtype)})


def test_clip_float16() -> None:
    _check("Clip", {"x": _normal(3, 4).astype(np.float16)}, opset=13,
           inits={"lo": np.array(0, np.float16), "hi": np.array(6, np.float16)}, rtol=1e-3)


# -- PRelu --------------------------------------------------------------------------------

@pytest.mark.parametrize("slope_shape", [(1,), (4,), (3, 1, 1), (2, 3, 1, 4)])
def test_prelu_broadcast(slope_shape: tuple[int, ...]) -> None:
    x, slope = _normal(2, 3, 5, 4), _normal(*slope_shape, scale=0.5)
    _check("PRelu", {"x": x}, opset=16, inits={"slope": slope})
    _check("PRelu", {"x": x, "slope": slope}, opset=9)


def test_prelu_slopes_above_one() -> None:
    _check("PRelu", {"x": _normal(2, 3, 4), "slope": _normal(4, scale=3)}, opset=9)


def test_prelu_integer() -> None:
    _check("PRelu", {"x": np.arange(-4, 4, dtype=np.int32).reshape(2, 4),
                     "slope": np.array([2, 0, -1, 1], np.int32)}, opset=16)


def test_prelu_per_channel_slope_of_older_exporters() -> None:
    # A [C] slope on NCHW data applies along the channels (onnxruntime refuses this form).
    x, slope = _normal(1, 3, 2, 2), np.array([0.1, 0.2, 0.3], np.float32)
    node = helper.make_node("PRelu", ["x", "slope"], ["y"])
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", 1, x.shape)],
                              [helper.make_tensor_value_info("y", 1, x.shape)],
                              [onnx.numpy_helper.from_array(slope, "slope")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 7)])
    (got,) = run_pydla(model, {"x": x})
    np.testing.assert_array_equal(got, np.where(x < 0, x * slope[:, None, None], x))


def test_prelu_unbroadcastable_slope_is_refused() -> None:
    node = helper.make_node("PRelu", ["x", "slope"], ["y"])
    model = make_model([node], {"x": (np.float32, (2, 3)), "slope": (np.float32, (3,))},
                       ["y"], opset=16)
    model.graph.input[1].type.tensor_type.shape.dim[0].dim_value = 5
    with pytest.raises(ModelImportError, match="does not broadcast"):
        build_graph(model, BuildOptions())


# -- binary and variadic arithmetic ---------------------------------------------------------

@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div"])
@pytest.mark.parametrize("shapes", [((2, 3, 4), (2, 3, 4)), ((2, 3, 4), (4,)),
                                    ((3, 1), (1, 4)), ((), (2, 2))])
def test_arithmetic_broadcast(op: str, shapes: tuple) -> None:
    a, b = _normal(*shapes[0]), _normal(*shapes[1])
    _check(op, {"a": a, "b": b}, opset=14)


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div"])
@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int16, np.int32, np.int64, np.uint64])
def test_integer_arithmetic(op: str, dtype: type) -> None:
    # Overflow wraps; Div truncates toward zero (signed operands of every sign).
    info = np.iinfo(dtype)
    a = np.array([7, 100, info.max, info.min, 9, 1, 0, 6], dtype)
    b = np.array([2, 3, 2, 3, 4, 7, 5, 6], dtype)
    if info.min < 0:
        a[[4, 5, 6]] = np.array([-7, -9, -1], dtype)
        b[[1, 3]] = np.array([-3, -2], dtype)
    _check(op, {"a": a, "b": b}, opset=14)


def test_arithmetic_float16_and_folded() -> None:
    a, b = _normal(3, 4).astype(np.float16), _normal(4).astype(np.float16)
    _check("Mul", {"a": a, "b": b}, opset=14, rtol=1e-3)
    # Both operands constant: the node folds away and the model is a copy of a constant.
    node = helper.make_node("Add", ["a", "b"], ["s"])
    relu = helper.make_node("Relu", ["x"], ["r"])
    out = helper.make_node("Mul", ["r", "s"], ["y"])
    model = make_model([node, relu, out], {"x": (np.float32, (3, 4))}, ["y"],
                       {"a": _normal(3, 4), "b": _normal(4)}, 14)
    check_against_ort(model, {"x": _normal(3, 4)}, RTOL, ATOL)
    nodes = build_graph(model, BuildOptions()).nodes
    ops = [s["op"] for n in nodes for s in n.attrs.get("program", [{"op": n.op}])]
    assert sorted(ops) == ["Mul", "Relu"]


POW_TYPES = [(np.float32, np.float32), (np.float32, np.int32), (np.float32, np.int64),
             (np.int32, np.float32), (np.int64, np.int64), (np.int32, np.int32),
             (np.float64, np.float64)]


@pytest.mark.parametrize("base,exponent", POW_TYPES,
                         ids=[f"{np.dtype(a).name}^{np.dtype(b).name}" for a, b in POW_TYPES])
def test_pow_types(base: type, exponent: type) -> None:
    if np.dtype(base).kind == "f":
        a = np.abs(_normal(3, 4)).astype(base) + 0.1
    else:
        a = np.array([[2, 3, -2, 0], [1, -1, -1, 5], [4, -3, 7, 2]], base)
    if np.dtype(exponent).kind == "f":
        b = np.array([0.5, 2.0, 3.0, 1.5], exponent)
    else:
        b = np.array([2, 3, -1, 0], exponent)  # negative integer powers truncate
    _check("Pow", {"a": a, "b": b}, opset=15)


@pytest.mark.parametrize("fmod", [0, 1])
@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.int64, np.uint16])
def test_mod_integer(fmod: int, dtype: type) -> None:
    a = np.array([7, 9, 4, 100, 0, 5], dtype)
    b = np.array([3, 4, 4, 7, 3, 9], dtype)
    if np.dtype(dtype).kind == "i":
        a[[1, 3]] *= -1
        b[[2, 3]] = np.array([-4, -7], dtype)
    _check("Mod", {"a": a, "b": b}, {"fmod": fmod}, opset=13)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_mod_float_fmod(dtype: type) -> None:
    a, b = _normal(2, 5).astype(dtype), _normal(5).astype(dtype)
    _check("Mod", {"a": a, "b": b}, {"fmod": 1}, opset=13, rtol=1e-3 if dtype is np.float16
           else RTOL)


def test_mod_float_python_semantics() -> None:
    # fmod=0 on floats (opset 28): the sign of the divisor, as Python's %.
    a = np.array([5.5, -5.5, 5.5, -5.5, 0.0, -0.0, 3.0], np.float32)
    b = np.array([2.0, 2.0, -2.0, -2.0, -3.0, 3.0, np.inf], np.float32)
    node = helper.make_node("Mod", ["a", "b"], ["y"])
    model = make_model([node], {"a": (np.float32, a.shape), "b": (np.float32, b.shape)}, ["y"],
                       opset=28)
    (got,) = run_pydla(model, {"a": a, "b": b})
    want = np.array([math.fmod(x, y) if y == np.inf else x % y for x, y in zip(a.tolist(),
                                                                           b.tolist())])
    np.testing.assert_array_equal(got, want.astype(np.float32))
    assert np.signbit(got[4]) and not np.signbit(got[5])


@pytest.mark.parametrize("direction", ["LEFT", "RIGHT"])
@pytest.mark.parametrize("dtype", [np.uint8, np.uint32, np.uint64])
def test_bitshift(direction: str, dtype: type) -> None:
    x = np.array([1, 255, 16, 3, 128], dtype)
    s = np.array([1, 2, 3, 0, 7], dtype)
    _check("BitShift", {"x": x, "s": s}, {"direction": direction}, opset=11)


@pytest.mark.parametrize("op", ["BitwiseAnd", "BitwiseOr", "BitwiseXor"])
def test_bitwise(op: str) -> None:
    a = RNG.integers(-100, 100, (3, 4)).astype(np.int32)
    _check(op, {"a": a, "b": RNG.integers(-100, 100, 4).astype(np.int32)}, opset=18)
    _check(op, {"a": a.astype(np.uint8), "b": np.array(0x5A, np.uint8)}, opset=18)


def test_bitwise_not() -> None:
    _check("BitwiseNot", {"x": np.array([0, 1, -1, 127, -128], np.int8)}, opset=18)


@pytest.mark.parametrize("op", ["Sum", "Mean", "Min", "Max"])
def test_variadic(op: str) -> None:
    feeds = {"a": _normal(2, 3, 4), "b": _normal(3, 1), "c": _normal(4)}
    _check(op, feeds, opset=13)
    _check(op, {"a": feeds["a"]}, opset=8)


@pytest.mark.parametrize("op", ["Min", "Max"])
def test_min_max_integer_and_nan(op: str) -> None:
    _check(op, {"a": np.array([3, -7, 100], np.int8), "b": np.array([-1, 5, 2], np.int8),
                "c": np.array([0], np.int8)}, opset=13)
    _check(op, {"a": SPECIAL, "b": SPECIAL[::-1].copy()}, opset=13)


def test_bad_enum_attributes_fail_at_import() -> None:
    for op, attrs, opset in [("Gelu", {"approximate": "erf"}, 20), ("Mod", {"fmod": 2}, 13),
                             ("BitShift", {"direction": "UP"}, 11)]:
        dtype = np.uint8 if op == "BitShift" else np.float32
        names = ["x"] if op == "Gelu" else ["x", "z"]
        node = helper.make_node(op, names, ["y"], **attrs)
        graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(
            n, helper.np_dtype_to_tensor_dtype(np.dtype(dtype)), [2]) for n in names],
            [helper.make_tensor_value_info("y", 0, None)])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
        with pytest.raises(ModelImportError, match=f"{next(iter(attrs))}="):
            build_graph(model, BuildOptions())


# -- in place: fused pointwise programs run a kernel with its output aliasing an input -------

F32, I32 = np.float32, np.int32
IN_PLACE = [  # op, attrs, arity, dtype
    ("LeakyRelu", {"alpha": 0.1}, 1, F32), ("LeakyRelu", {"alpha": 3.0}, 1, F32),
    ("PRelu", {}, 2, F32), ("PRelu", {}, 2, I32), ("Elu", {"alpha": 1.0}, 1, F32),
    ("Selu", {"alpha": 1.67, "gamma": 1.05}, 1, F32), ("Celu", {"alpha": 0.5}, 1, F32),
    ("Swish", {"alpha": 1.5}, 1, F32), ("HardSwish", {}, 1, F32), ("Softplus", {}, 1, F32),
    ("Mish", {}, 1, F32), ("Softsign", {}, 1, F32), ("Gelu", {"approximate": "none"}, 1, F32),
    ("Gelu", {"approximate": "tanh"}, 1, F32), ("ThresholdedRelu", {"alpha": 0.5}, 1, F32),
    ("Erf", {}, 1, F32), ("Div", {}, 2, I32), ("Pow", {}, 2, I32), ("Pow", {}, 2, F32),
    ("Sum", {}, 3, F32), ("Max", {}, 3, I32), ("Mean", {}, 3, F32), ("Where", {}, 3, F32),
    ("Where", {}, 3, I32),
]


@pytest.mark.parametrize("op,attrs,arity,dtype", IN_PLACE,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(IN_PLACE)])
def test_kernel_in_place(op: str, attrs: dict, arity: int, dtype: type) -> None:
    xs = [(_normal(4, 5) * 4).astype(dtype) for _ in range(arity)]
    if op == "Where":
        xs[0] = xs[0] > 0
    if op in ("Div", "Pow") and dtype is np.int32:
        xs[1] = np.where(xs[1] == 0, 3, xs[1] % 5 - 2).astype(dtype)  # negative powers too
    dt = DType.from_numpy(xs[-1].dtype)
    spec = LayerSpec("t", op, attrs, tuple(TensorSpec(x.shape, DType.from_numpy(x.dtype))
                                           for x in xs), (TensorSpec((4, 5), dt),))
    run = bind_layer(spec)
    want = np.empty((4, 5), dt.np)
    with np.errstate(all="ignore"):
        run([x.copy() for x in xs], [want])
        for i, x in enumerate(xs):
            if x.dtype != want.dtype:
                continue
            ins = [y.copy() for y in xs]
            run(ins, [ins[i]])
            np.testing.assert_array_equal(ins[i], want, err_msg=f"output aliasing input {i}")
