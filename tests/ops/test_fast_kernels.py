"""The fast CPU tactics (kernels/fast_*.py) against the reference kernels and onnxruntime.

Each tactic runs a layer twice — through the RunFn and through its prebound step, as the
executor calls it — and must match the op's reference kernel within 1e-4 relative (fp32).
Small models built without autotuning (so the highest-priority tactic is chosen, which
the tests check) are compared with onnxruntime.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pytest
from onnx import helper

from pydla.backends.base import LayerSpec, TensorSpec
from pydla.backends.cpu.backend import bind_layer
from pydla.backends.cpu.kernels.fast_pointwise import compile_program
from pydla.backends.cpu.kernels.fast_pointwise_codegen import plan_layout
from pydla.backends.cpu.registry import REFERENCE, candidate_tactics
from pydla.backends.cpu.steps import prebind
from pydla.builder import BuildOptions, build
from pydla.dtypes import DType
from pydla.engine import LoadedModule
from tests.oracle import assert_close, make_model, run_ort

RNG = np.random.default_rng(11)
F32 = DType.FLOAT32
NO_TUNING = BuildOptions(autotune=False)


def _rand(*shape: int, scale: float = 1.0, dtype: Any = np.float32) -> np.ndarray:
    return (RNG.standard_normal(shape) * scale).astype(dtype)


def _spec(op: str, attrs: Mapping[str, Any], inputs: Sequence[np.ndarray | None],
          outputs: Sequence[tuple[tuple[int, ...], Any]], tactic: str) -> LayerSpec:
    def ts(shape: Sequence[int], dtype: Any) -> TensorSpec:
        return TensorSpec(tuple(shape), DType.from_numpy(np.dtype(dtype)))

    return LayerSpec("layer", op, dict(attrs),
                     tuple(None if x is None else ts(x.shape, x.dtype) for x in inputs),
                     tuple(ts(s, d) for s, d in outputs), tactic)


def run_layer(op: str, attrs: Mapping[str, Any], inputs: Sequence[np.ndarray | None],
              outputs: Sequence[tuple[tuple[int, ...], Any]], tactic: str
              ) -> list[np.ndarray]:
    """Run one layer with ``tactic``; the RunFn and its prebound step must agree."""
    spec = _spec(op, attrs, inputs, outputs, tactic)
    run = bind_layer(spec)
    # Outputs start as garbage (NaN, or a stray integer) so that unwritten values show.
    direct = [np.full(s, np.nan if np.dtype(d).kind == "f" else 77, d) for s, d in outputs]
    run(list(inputs), direct)
    bound = [np.full(s, np.nan if np.dtype(d).kind == "f" else 77, d) for s, d in outputs]
    prebind(run, list(inputs), bound)()
    for a, b in zip(direct, bound):
        np.testing.assert_array_equal(a, b)
    return direct


def check_tactic(op: str, attrs: Mapping[str, Any], inputs: Sequence[np.ndarray | None],
                 outputs: Sequence[tuple[tuple[int, ...], Any]], tactic: str,
                 rtol: float = 1e-4, atol: float = 1e-6) -> list[np.ndarray]:
    """``tactic`` applies to the layer and matches the reference kernel."""
    spec = _spec(op, attrs, inputs, outputs, tactic)
    assert tactic in [t.name for t in candidate_tactics(spec)], f"{tactic} does not apply"
    want = run_layer(op, attrs, inputs, outputs, REFERENCE)
    got = run_layer(op, attrs, inputs, outputs, tactic)
    assert_close(got, want, rtol=rtol, atol=atol)
    return got


def check_model(model: Any, feeds: Mapping[str, np.ndarray], tactics: Mapping[str, str],
                rtol: float = 1e-4, atol: float = 1e-5) -> LoadedModule:
    """Build without autotuning, check the chosen tactic per op, compare with onnxruntime."""
    module = LoadedModule(build(model, NO_TUNING))
    chosen = {layer.op: layer.tactic for layer in module.program.layers}
    for op, name in tactics.items():
        assert chosen.get(op) == name, f"{op}: {chosen.get(op)} chosen, expected {name}"
    got = module.run({k: v for k, v in feeds.items() if k in module.input_names})
    assert_close(got, run_ort(model, feeds), rtol=rtol, atol=atol)
    return module


def _step(op: str, regs: Sequence[int], shape: Sequence[int], dtype: str = "float32",
          **attrs: Any) -> dict[str, Any]:
    return {"op": op, "in": list(regs), "attrs": attrs, "shape": list(shape), "dtype": dtype}


# -- pointwise programs ------------------------------------------------------------------
def test_layout_groups_broadcast_patterns() -> None:
    full = (2, 3, 4, 5)
    assert plan_layout(full, [full, full]).extents == (120,)
    per_channel = plan_layout(full, [full, (1, 3, 1, 1)])
    assert per_channel.extents == (2, 3, 20) and per_channel.inner_full == (True, False)
    assert plan_layout(full, [full, ()]).extents == (120,)
    mask = plan_layout((2, 4, 6, 6), [(2, 4, 6, 6), (2, 1, 1, 6)])
    assert mask.extents == (2, 24, 6) and mask.strides[1] == (6, 0)
    assert plan_layout((2, 3, 4, 5, 6), [(2, 1, 4, 1, 6), (1, 3, 1, 5, 1)]) is None


UNARY = [("Relu", {}), ("Sigmoid", {}), ("Tanh", {}), ("Exp", {}), ("Erf", {}),
         ("Gelu", {"approximate": "none"}), ("Gelu", {"approximate": "tanh"}),
         ("HardSigmoid", {"alpha": 0.2, "beta": 0.5}), ("HardSwish", {}),
         ("LeakyRelu", {"alpha": 0.1}), ("Elu", {"alpha": 1.0}),
         ("Selu", {"alpha": 1.67, "gamma": 1.05}), ("Celu", {"alpha": 0.5}),
         ("Softplus", {}), ("Softsign", {}), ("Mish", {}), ("Neg", {}), ("Abs", {}),
         ("Sqrt", {}), ("Log", {}), ("Reciprocal", {}), ("Floor", {}), ("Ceil", {}),
         ("Round", {}), ("Sin", {}), ("Cos", {}), ("ThresholdedRelu", {"alpha": 0.5}),
         ("Swish", {"alpha": 1.5}), ("Clip", {"min": -0.5, "max": 0.75})]


@pytest.mark.parametrize("op,attrs", UNARY, ids=[f"{o}-{i}" for i, (o, _) in enumerate(UNARY)])
def test_unary_ops(op: str, attrs: dict[str, Any]) -> None:
    x = _rand(2, 3, 17, 9, scale=3.0)
    if op in ("Sqrt", "Log"):
        x = np.abs(x) + np.float32(0.01)
    if op == "Exp":
        x = np.clip(x, -80, 80)
    check_tactic(op, attrs, [x], [(x.shape, np.float32)], "fused_loop")


@pytest.mark.parametrize("a,b", [((2, 3, 4, 5), (2, 3, 4, 5)), ((2, 3, 4, 5), (1, 3, 1, 1)),
                                 ((2, 3, 4, 5), ()), ((1, 3, 1, 1), (2, 3, 4, 5)),
                                 ((2, 1, 1, 5), (2, 4, 5, 5)), ((5,), (3, 5))])
@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div", "Max", "Min", "Pow"])
def test_binary_broadcast(op: str, a: tuple[int, ...], b: tuple[int, ...]) -> None:
    x, y = _rand(*a), _rand(*b)
    if op == "Pow":
        x = np.abs(x) + np.float32(0.1)
    shape = np.broadcast_shapes(a, b)
    check_tactic(op, {}, [x, y], [(shape, np.float32)], "fused_loop")


def test_program_squeeze_excite_and_silu() -> None:
    se = [_step("HardSigmoid", [0], (2, 8, 1, 1), alpha=1 / 6, beta=0.5),
          _step("Mul", [1, 2], (2, 8, 5, 7))]
    check_tactic("Pointwise", {"program": se}, [_rand(2, 8, 1, 1), _rand(2, 8, 5, 7)],
                 [((2, 8, 5, 7), np.float32)], "fused_loop")
    silu = [_step("Sigmoid", [0], (1, 4, 9, 9)), _step("Mul", [0, 1], (1, 4, 9, 9))]
    check_tactic("Pointwise", {"program": silu}, [_rand(1, 4, 9, 9, scale=4)],
                 [((1, 4, 9, 9), np.float32)], "fused_loop")


def test_program_mask_cast_where_compare() -> None:
    mask = np.array([[1, 1, 0], [1, 0, 0]], np.int64)
    prog = [_step("Cast", [0], (2, 3)), _step("Sub", [1, 3], (2, 3)),
            _step("Mul", [4, 2], (2, 3))]
    check_tactic("Pointwise", {"program": prog}, [mask, np.float32(-1e4), np.float32(1)],
                 [((2, 3), np.float32)], "fused_loop")
    x, y = _rand(4, 6), _rand(4, 6)
    prog = [_step("Less", [0, 1], (4, 6), "bool"), _step("Where", [2, 0, 1], (4, 6)),
            _step("Relu", [3], (4, 6))]
    check_tactic("Pointwise", {"program": prog}, [x, y], [((4, 6), np.float32)], "fused_loop")


def test_program_large_parallel_and_dead_steps() -> None:
    # Big enough for the parallel loop, rows split into chunks; step 1 is dead.
    x, c = _rand(1, 3, 160, 160), _rand(1, 3, 1, 1)
    prog = [_step("Add", [0, 1], x.shape), _step("Exp", [1], (1, 3, 1, 1)),
            _step("Sigmoid", [2], x.shape), _step("Mul", [2, 4], x.shape)]
    check_tactic("Pointwise", {"program": prog}, [x, c], [(x.shape, np.float32)], "fused_loop")
    compiled = compile_program(prog, [TensorSpec(x.shape, F32), TensorSpec(c.shape, F32)],
                               TensorSpec(x.shape, F32))
    assert compiled is not None and compiled.parallel


def test_program_float16_layer() -> None:
    x, y = _rand(2, 4, 6, 6).astype(np.float16), _rand(1, 4, 1, 1).astype(np.float16)
    prog = [_step("Mul", [0, 1], x.shape, "float16"), _step("Tanh", [2], x.shape, "float16")]
    check_tactic("Pointwise", {"program": prog}, [x, y], [(x.shape, np.float16)], "fused_loop",
                 rtol=2e-3, atol=2e-3)


def test_unsupported_program_keeps_reference() -> None:
    x = _rand(2, 3).astype(np.float64)
    spec = _spec("Relu", {}, [x], [((2, 3), np.float64)], "fused_loop")
    assert "fused_loop" not in [t.name for t in candidate_tactics(spec)]
    ints = np.arange(6, dtype=np.int64).reshape(2, 3)
    spec = _spec("Div", {}, [ints, ints], [((2, 3), np.int64)], "fused_loop")
    assert "fused_loop" not in [t.name for t in candidate_tactics(spec)]


def test_pointwise_model_against_onnxruntime() -> None:
    nodes = [helper.make_node("Mul", ["x", "s"], ["m"]), helper.make_node("Sigmoid", ["m"], ["g"]),
             helper.make_node("Mul", ["m", "g"], ["y"])]
    model = make_model(nodes, {"x": (np.float32, (2, 6, 5, 5)), "s": (np.float32, (1, 6, 1, 1))},
                       ["y"])
    check_model(model, {"x": _rand(2, 6, 5, 5, scale=3), "s": _rand(1, 6, 1, 1)},
                {"Pointwise": "fused_loop"})


# -- Gemm / MatMul -------------------------------------------------------------------------
@pytest.mark.parametrize("attrs,c_shape", [
    ({}, None), ({}, (7,)), ({"transB": 1}, (3, 7)), ({"transA": 1, "alpha": 0.5}, (1,)),
    ({"transA": 1, "transB": 1, "beta": 2.0}, (7,)), ({"beta": 0.0}, (7,))])
@pytest.mark.parametrize("m", [1, 3, 64])
def test_gemm(attrs: dict[str, Any], c_shape: tuple[int, ...] | None, m: int) -> None:
    k, n = 33, 7 if c_shape != (3, 7) else 7
    if c_shape == (3, 7):
        c_shape = (m, n)
    a = _rand(k, m) if attrs.get("transA") else _rand(m, k)
    b = _rand(n, k) if attrs.get("transB") else _rand(k, n)
    ins = [a, b] + ([] if c_shape is None else [_rand(*c_shape)])
    check_tactic("Gemm", attrs, ins, [((m, n), np.float32)], "blas")


def test_gemm_parallel_blocks() -> None:
    # Large enough for the parallel product, split by rows and by columns.
    for m, k, n in ((96, 200, 80), (1, 2048, 1000)):
        check_tactic("Gemm", {"transB": 1}, [_rand(m, k), _rand(n, k), _rand(n)],
                     [((m, n), np.float32)], "blas", rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("attrs,c_shape", [
    ({}, None), ({}, (70,)), ({"transB": 1}, (13, 70)), ({"transB": 1, "alpha": 0.5}, (1,)),
    ({"beta": 2.0}, (70,))])
@pytest.mark.parametrize("m,k", [(13, 40), (64, 33), (130, 300)])
def test_gemm_packed_weights(attrs: dict[str, Any], c_shape: tuple[int, ...] | None, m: int,
                             k: int) -> None:
    """B packed once into micro-kernel panels; ragged row panels (13, 130 rows) and a
    ragged column strip (70 = 2·32 + 6), alpha, beta and bias as in the blas tactic."""
    n = 70
    if c_shape == (13, 70):
        c_shape = (m, n)
    b = _rand(n, k) if attrs.get("transB") else _rand(k, n)
    ins = [_rand(m, k), b] + ([] if c_shape is None else [_rand(*c_shape)])
    check_tactic("Gemm", attrs, ins, [((m, n), np.float32)], "packed", rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("a,b", [((2, 13, 40), (40, 33)), ((1, 128, 128), (128, 512))])
def test_matmul_packed_weights(a: tuple[int, ...], b: tuple[int, ...]) -> None:
    """A's batches fold into rows of one product with the packed weights; a weight fed as
    a (writable) input is packed again on every run."""
    shape = np.matmul(np.zeros(a), np.zeros(b)).shape
    x, w = _rand(*a), _rand(*b)
    check_tactic("MatMul", {}, [x, w], [(shape, np.float32)], "packed", rtol=1e-4, atol=1e-4)
    spec = _spec("MatMul", {}, [x, w], [(shape, np.float32)], "packed")
    run = prebind(bind_layer(spec), [x, w], [out := np.empty(shape, np.float32)])
    for _ in range(2):
        w[...] = _rand(*b)
        run()
        assert_close([out], [np.matmul(x, w)], rtol=1e-4, atol=1e-4)
    assert "packed" not in [t.name for t in candidate_tactics(
        _spec("MatMul", {}, [_rand(2, 3, 4), _rand(2, 4, 5)], [((2, 3, 5), np.float32)],
              "packed"))]  # one B per batch: blas only


@pytest.mark.parametrize("a,b", [((3, 4), (4, 5)), ((2, 3, 4), (4, 5)), ((2, 3, 4), (2, 4, 5)),
                                 ((2, 1, 3, 4), (5, 4, 6)), ((1, 3, 4), (2, 4, 2)),
                                 ((2, 2, 64, 16), (2, 2, 16, 64))])
def test_matmul_batches(a: tuple[int, ...], b: tuple[int, ...]) -> None:
    shape = np.matmul(np.zeros(a), np.zeros(b)).shape
    check_tactic("MatMul", {}, [_rand(*a), _rand(*b)], [(shape, np.float32)], "blas")


def test_gemm_native_epilogue() -> None:
    prog = [_step("Add", [0, 1], (4, 6)), _step("Tanh", [2], (4, 6))]
    attrs = {"transB": 1, "epilogue": {"program": prog, "inputs": 1}}
    check_tactic("Gemm", attrs, [_rand(4, 5), _rand(6, 5), _rand(6), _rand(4, 6)],
                 [((4, 6), np.float32)], "blas")



@pytest.mark.parametrize("flag", [False, True])
def test_gemm_where_epilogue_is_native(flag: bool) -> None:
    # openwakeword's head: an If on a bool flag folded into Where after the Sigmoid — run
    # inside the product's kernel, not by the generic numpy epilogue (25 µs for one value)
    prog = [_step("Sigmoid", [0], (1, 1)), _step("Where", [1, 3, 2], (1, 1))]
    attrs = {"transB": 1, "epilogue": {"program": prog, "inputs": 2}}
    ins = [_rand(1, 64), _rand(1, 64), _rand(1), np.array(flag), _rand(1, 1)]
    spec = _spec("Gemm", attrs, ins, [((1, 1), np.float32)], "blas")
    blas = next(t for t in candidate_tactics(spec) if t.name == "blas")
    assert blas.native_epilogue(prog)
    check_tactic("Gemm", attrs, ins, [((1, 1), np.float32)], "blas")

def test_matmul_epilogue_model_and_float16() -> None:
    # BERT's attention scores: MatMul, then Div by √d and Add of the mask as an epilogue.
    nodes = [helper.make_node("MatMul", ["q", "k"], ["s"]),
             helper.make_node("Div", ["s", "d"], ["t"]), helper.make_node("Add", ["t", "m"], ["y"])]
    model = make_model(nodes, {"q": (np.float32, (2, 2, 8, 4)), "k": (np.float32, (2, 2, 4, 8)),
                               "m": (np.float32, (2, 1, 1, 8))}, ["y"],
                       {"d": np.float32(2.0)})
    feeds = {"q": _rand(2, 2, 8, 4), "k": _rand(2, 2, 4, 8), "m": _rand(2, 1, 1, 8)}
    module = check_model(model, feeds, {"MatMul": "blas"})
    assert "epilogue" in module.program.layers[0].attrs
    x, w = _rand(3, 8).astype(np.float16), _rand(8, 5).astype(np.float16)
    check_tactic("MatMul", {}, [x, w], [((3, 5), np.float16)], "blas", rtol=2e-3, atol=2e-3)


def test_gemm_model_against_onnxruntime() -> None:
    nodes = [helper.make_node("Gemm", ["x", "w", "b"], ["g"], transB=1),
             helper.make_node("Relu", ["g"], ["y"])]
    model = make_model(nodes, {"x": (np.float32, (8, 32))}, ["y"],
                       {"w": _rand(16, 32), "b": _rand(16)})
    check_model(model, {"x": _rand(8, 32)}, {"Gemm": "blas"})


def test_tactics_register_by_name() -> None:
    x = _rand(2, 3)
    spec = _spec("Relu", {}, [x], [((2, 3), np.float32)], "fused_loop")
    assert [t.name for t in candidate_tactics(spec)][0] == "fused_loop"


# -- pooling -------------------------------------------------------------------------------
POOLS = [
    ("MaxPool", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ("MaxPool", {"kernel_shape": [5, 5], "strides": [1, 1], "pads": [2, 2, 2, 2]}),
    ("MaxPool", {"kernel_shape": [2, 1], "strides": [2, 1], "pads": [0, 0, 0, 0]}),
    ("MaxPool", {"kernel_shape": [3, 2], "strides": [2, 3], "pads": [1, 0, 1, 1],
                 "dilations": [2, 1]}),
    ("AveragePool", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1],
                     "count_include_pad": 0}),
    ("AveragePool", {"kernel_shape": [3, 3], "strides": [1, 1], "pads": [1, 1, 1, 1],
                     "count_include_pad": 1}),
    ("AveragePool", {"kernel_shape": [2, 2], "strides": [2, 2], "pads": [0, 0, 0, 0]}),
]


@pytest.mark.parametrize("op,attrs", POOLS, ids=[f"{o}-{i}" for i, (o, _) in enumerate(POOLS)])
@pytest.mark.parametrize("shape", [(1, 3, 9, 11), (2, 16, 40, 33), (1, 4, 13, 70)])
def test_window_pools(op: str, attrs: dict[str, Any], shape: tuple[int, ...]) -> None:
    x = _rand(*shape)
    nodes = [helper.make_node(op, ["x"], ["y"], **attrs)]
    model = make_model(nodes, {"x": (np.float32, shape)}, ["y"])
    module = check_model(model, {"x": x}, {op: "planes"})
    layer = module.program.layers[0]
    out = module.program.tensors[layer.outputs[0]].shape
    check_tactic(op, dict(layer.attrs), [x], [(out, np.float32)], "planes")
    if op == "MaxPool":
        x[0, 0, shape[2] // 2, 3] = np.nan  # a NaN in a window wins, as in the reference
        check_tactic(op, dict(layer.attrs), [x], [(out, np.float32)], "rows")


def test_pool_ceil_mode_against_onnxruntime() -> None:
    nodes = [helper.make_node("MaxPool", ["x"], ["m"], kernel_shape=[3, 3], strides=[2, 2],
                              ceil_mode=1),
             helper.make_node("AveragePool", ["m"], ["y"], kernel_shape=[3, 3], strides=[2, 2],
                              ceil_mode=1)]
    model = make_model(nodes, {"x": (np.float32, (2, 4, 18, 18))}, ["y"])
    check_model(model, {"x": _rand(2, 4, 18, 18)}, {"MaxPool": "planes", "AveragePool": "planes"})


@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool"])
@pytest.mark.parametrize("shape", [(1, 8, 7, 7), (8, 64, 40, 20), (2, 3, 5)])
def test_global_pools(op: str, shape: tuple[int, ...]) -> None:
    x = _rand(*shape)
    out = shape[:2] + (1,) * (len(shape) - 2)
    check_tactic(op, {}, [x], [(out, np.float32)], "planes")
    model = make_model([helper.make_node(op, ["x"], ["y"])], {"x": (np.float32, shape)}, ["y"])
    check_model(model, {"x": x}, {op: "planes"})


def test_pool_float16_layer() -> None:
    x = _rand(1, 4, 10, 10).astype(np.float16)
    attrs = {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}
    check_tactic("MaxPool", attrs, [x], [((1, 4, 5, 5), np.float16)], "planes", rtol=1e-3)
    check_tactic("GlobalAveragePool", {}, [x], [((1, 4, 1, 1), np.float16)], "planes",
                 rtol=2e-3, atol=1e-3)


# -- Softmax / LogSoftmax / LayerNormalization -------------------------------------------
@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("shape,axes", [((2, 3, 50), [2]), ((4, 2, 128, 128), [3]),
                                        ((2, 16, 4, 300), [1]), ((1, 16, 4, 2100), [1]),
                                        ((3, 4, 5), [1, 2])])
def test_softmax(op: str, shape: tuple[int, ...], axes: list[int]) -> None:
    x = _rand(*shape, scale=4)
    check_tactic(op, {"axes": axes}, [x], [(shape, np.float32)], "rows")


def test_softmax_model_and_float16() -> None:
    nodes = [helper.make_node("Softmax", ["x"], ["s"], axis=1),
             helper.make_node("LogSoftmax", ["s"], ["y"], axis=-1)]
    model = make_model(nodes, {"x": (np.float32, (2, 16, 4, 30))}, ["y"])
    check_model(model, {"x": _rand(2, 16, 4, 30, scale=3)},
                {"Softmax": "rows", "LogSoftmax": "rows"})
    x = _rand(3, 40, scale=3).astype(np.float16)
    check_tactic("Softmax", {"axes": [1]}, [x], [((3, 40), np.float16)], "rows",
                 rtol=2e-3, atol=1e-4)


@pytest.mark.parametrize("shape,axis,outputs", [((2, 128, 128), 2, 1), ((3, 5, 4, 6), 2, 3),
                                                ((4, 32), 1, 2)])
def test_layer_normalization(shape: tuple[int, ...], axis: int, outputs: int) -> None:
    x = _rand(*shape, scale=3) + np.float32(1.5)
    tail = shape[axis:]
    stat = shape[:axis] + (1,) * len(tail)
    outs = [(shape, np.float32)] + [(stat, np.float32)] * (outputs - 1)
    for bias in (_rand(*tail), None):
        ins = [x, _rand(*tail)] + ([bias] if bias is not None else [])
        check_tactic("LayerNormalization", {"axis": axis, "epsilon": 1e-5}, ins, outs, "rows")


def test_layer_normalization_recognised_in_model() -> None:
    from tests.models.netbuilder import Net

    n = Net("ln", seed=3)
    x = n.input("x", [2, 16, 64])
    model = n.model([n.layernorm_primitive(x, 64)])
    check_model(model, {"x": _rand(2, 16, 64, scale=2)}, {"LayerNormalization": "rows"})
    xh = _rand(4, 32).astype(np.float16)
    check_tactic("LayerNormalization", {"axis": 1, "epsilon": 1e-5},
                 [xh, _rand(32).astype(np.float16)], [((4, 32), np.float16)], "rows",
                 rtol=3e-3, atol=3e-3)


# -- Resize --------------------------------------------------------------------------------
RESIZES = [
    ({"mode": "nearest"}, (1, 1, 2, 2)),
    ({"mode": "nearest", "coordinate_transformation_mode": "asymmetric",
      "nearest_mode": "floor"}, (1, 1, 3, 2)),
    ({"mode": "nearest", "coordinate_transformation_mode": "half_pixel"}, (1, 1, 0.5, 0.5)),
    ({"mode": "linear", "coordinate_transformation_mode": "half_pixel"}, (1, 1, 2, 2)),
    ({"mode": "linear", "coordinate_transformation_mode": "half_pixel"}, (1, 1, 4, 8)),
    ({"mode": "linear", "coordinate_transformation_mode": "align_corners"}, (1, 1, 1.5, 2)),
    ({"mode": "linear", "coordinate_transformation_mode": "pytorch_half_pixel"}, (1, 1, 0.5, 1)),
]


@pytest.mark.parametrize("attrs,scales", RESIZES, ids=[str(i) for i in range(len(RESIZES))])
@pytest.mark.parametrize("shape", [(1, 3, 8, 6), (2, 5, 20, 24)])
def test_resize(attrs: dict[str, Any], scales: tuple[float, ...], shape: tuple[int, ...]) -> None:
    x = _rand(*shape)
    nodes = [helper.make_node("Resize", ["x", "", "s"], ["y"], **attrs)]
    model = make_model(nodes, {"x": (np.float32, shape)}, ["y"],
                       {"s": np.array(scales, np.float32)})
    module = check_model(model, {"x": x}, {"Resize": "gather"})
    layer = module.program.layers[0]
    out = module.program.tensors[layer.outputs[0]].shape
    check_tactic("Resize", dict(layer.attrs), [x], [(out, np.float32)], "gather")
    if shape[0] == 1 and attrs["mode"] == "nearest":
        xh = x.astype(np.float16)
        check_tactic("Resize", dict(layer.attrs), [xh], [(out, np.float16)], "gather", rtol=1e-3)


def test_resize_of_batch_or_channels_keeps_reference() -> None:
    nodes = [helper.make_node("Resize", ["x", "", "s"], ["y"], mode="nearest")]
    model = make_model(nodes, {"x": (np.float32, (1, 2, 4, 4))}, ["y"],
                       {"s": np.array([1, 2, 2, 2], np.float32)})
    check_model(model, {"x": _rand(1, 2, 4, 4)}, {"Resize": "reference"})


# -- LSTM ----------------------------------------------------------------------------------
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
# The recurrent product per batch: fast_gemv's loop (1, 3), the micro-kernel over a packed
# Rᵀ (8: one padded panel; 13: a whole panel and a ragged one), sgemm (20).
@pytest.mark.parametrize("batch,with_state", [(1, False), (3, True), (8, True), (13, False),
                                              (20, False)])
def test_lstm(direction: str, batch: int, with_state: bool) -> None:
    steps, size = 7, 12
    hidden = 20 if batch == 13 else 16  # 80 gate columns: a ragged strip of the packed Rᵀ
    dirs = 2 if direction == "bidirectional" else 1
    ins = ["x", "w", "r", "b"] + (["", "h0", "c0"] if with_state else [])
    node = helper.make_node("LSTM", ins, ["y", "yh", "yc"], hidden_size=hidden,
                            direction=direction)
    inputs = {"x": (np.float32, (steps, batch, size))}
    if with_state:
        inputs |= {"h0": (np.float32, (dirs, batch, hidden)),
                   "c0": (np.float32, (dirs, batch, hidden))}
    model = make_model([node], inputs, ["y", "yh", "yc"],
                       {"w": _rand(dirs, 4 * hidden, size, scale=0.3),
                        "r": _rand(dirs, 4 * hidden, hidden, scale=0.3),
                        "b": _rand(dirs, 8 * hidden, scale=0.1)})
    feeds = {"x": _rand(steps, batch, size)}
    if with_state:
        feeds |= {"h0": _rand(dirs, batch, hidden, scale=0.5),
                  "c0": _rand(dirs, batch, hidden, scale=0.5)}
    module = check_model(model, feeds, {"LSTM": "fused_gates"})
    layer = module.program.layers[0]
    args = [feeds["x"], *(module.program.weight(module.program.tensors[i])
                          for i in layer.inputs[1:4])]
    if with_state:
        args += [None, feeds["h0"], feeds["c0"]]
    outs = [(module.program.tensors[i].shape, np.float32) for i in layer.outputs]
    check_tactic("LSTM", dict(layer.attrs), args, outs, "fused_gates")


def test_lstm_float16_and_unsupported() -> None:
    steps, batch, size, hidden = 4, 2, 6, 8
    attrs = {"direction": "forward", "hidden_size": hidden, "layout": 0, "clip": None,
             "activations": ["sigmoid", "tanh", "tanh"], "activation_alpha": [0.0] * 3,
             "activation_beta": [0.0] * 3, "input_forget": 0}
    x = _rand(steps, batch, size).astype(np.float16)
    w = _rand(1, 4 * hidden, size, scale=0.3).astype(np.float16)
    r = _rand(1, 4 * hidden, hidden, scale=0.3).astype(np.float16)
    check_tactic("LSTM", attrs, [x, w, r], [((steps, 1, batch, hidden), np.float16)],
                 "fused_gates", rtol=3e-3, atol=3e-3)
    spec = _spec("LSTM", {**attrs, "clip": 3.0}, [x, w, r],
                 [((steps, 1, batch, hidden), np.float16)], "fused_gates")
    assert not candidate_tactics(spec)


# -- Gather --------------------------------------------------------------------------------
@pytest.mark.parametrize("shape,idx,axis", [((50, 8), (2, 6), 0), ((3, 7, 5), (4,), 1),
                                            ((2, 4, 6), (), 2), ((9,), (3, 2), 0)])
@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.float16])
def test_gather(shape: tuple[int, ...], idx: tuple[int, ...], axis: int, dtype: Any) -> None:
    x = _rand(*shape, scale=10).astype(dtype)
    dim = shape[axis]
    ids = RNG.integers(-dim, dim, idx).astype(np.int64)
    out = shape[:axis] + idx + shape[axis + 1:]
    check_tactic("Gather", {"axis": axis}, [x, ids], [(out, dtype)], "rows", rtol=0, atol=0)
    check_tactic("Gather", {"axis": axis}, [x, ids.astype(np.int32)], [(out, dtype)], "rows",
                 rtol=0, atol=0)


def test_gather_bad_index_names_the_layer() -> None:
    from pydla.errors import KernelError

    x, ids = _rand(5, 3), np.array([1, 5], np.int64)
    with pytest.raises(KernelError, match="index 5 is out of range"):
        run_layer("Gather", {"axis": 0}, [x, ids], [((2, 3), np.float32)], "rows")


def test_embedding_model_against_onnxruntime() -> None:
    nodes = [helper.make_node("Gather", ["table", "ids"], ["e"], axis=0),
             helper.make_node("Gather", ["e", "zero"], ["y"], axis=1)]
    model = make_model(nodes, {"ids": (np.int64, (2, 7))}, ["y"],
                       {"table": _rand(40, 16), "zero": np.int64(0)})
    check_model(model, {"ids": RNG.integers(0, 40, (2, 7)).astype(np.int64)}, {"Gather": "rows"})


# -- copies: Concat, Split, reshapes -------------------------------------------------------
@pytest.mark.parametrize("batch", [1, 8])
@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.float16])
def test_concat_split_reshape(batch: int, dtype: Any) -> None:
    a, b = _rand(batch, 3, 40, 40).astype(dtype), _rand(batch, 5, 40, 40).astype(dtype)
    out = (batch, 8, 40, 40)
    tol = 0 if dtype != np.float16 else 1e-3
    check_tactic("Concat", {"axis": 1}, [a, b], [(out, dtype)], "parallel_copy", rtol=tol,
                 atol=tol)
    x = np.concatenate([a, b], axis=1)
    check_tactic("Split", {"axis": 1, "split": [3, 5]}, [x],
                 [(a.shape, dtype), (b.shape, dtype)], "parallel_copy", rtol=tol, atol=tol)
    check_tactic("Reshape", {"shape": [batch, 8, 1600]}, [x], [((batch, 8, 1600), dtype)],
                 "parallel_copy", rtol=tol, atol=tol)


def test_copies_in_model_against_onnxruntime() -> None:
    nodes = [helper.make_node("Split", ["x", "s"], ["a", "b"], axis=2),
             helper.make_node("Concat", ["b", "a", "b"], ["c"], axis=2),
             helper.make_node("Reshape", ["c", "shape"], ["y"])]
    model = make_model(nodes, {"x": (np.float32, (4, 3, 10, 6))}, ["y"],
                       {"s": np.array([4, 6], np.int64), "shape": np.array([4, -1], np.int64)})
    check_model(model, {"x": _rand(4, 3, 10, 6)},
                {"Split": "parallel_copy", "Concat": "parallel_copy",
                 "Reshape": "parallel_copy"})


def test_program_in_place_twin() -> None:
    # The executor runs a layer in place when the planner aliases its output to input 0:
    # the generated in-place twin must give what the out-of-place loop gives.
    x, c = _rand(2, 4, 30, 30), _rand(1, 4, 1, 1)
    prog = [_step("Mul", [0, 1], x.shape), _step("Sigmoid", [2], x.shape),
            _step("Mul", [0, 3], x.shape)]
    want = run_layer("Pointwise", {"program": prog}, [x, c], [(x.shape, np.float32)],
                     "fused_loop")[0]
    spec = _spec("Pointwise", {"program": prog}, [x, c], [(x.shape, np.float32)], "fused_loop")
    run = bind_layer(spec)
    assert run.module.run_par_inplace.signatures or run.module.run_seq_inplace.signatures
    buf = x.copy()
    prebind(run, [buf, c], [buf])()
    np.testing.assert_array_equal(buf, want)
