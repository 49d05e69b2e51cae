"""fold_qdq_pointwise and the QPointwise layer: float pointwise chains between Q/DQ nodes (a
QDQ model's batch norms, HardSwish, residual Adds) run as one 8-bit layer and compute what
onnxruntime computes for the QDQ model; the compiled loop matches the reference kernel bit
for bit."""

from __future__ import annotations

import numpy as np
import pytest

from pydla.backends.base import LayerSpec, TensorSpec
from pydla.backends.cpu.kernels import qlinear_pointwise
from pydla.builder import BuildOptions, build
from pydla.dtypes import DType
from pydla.engine import LoadedModule
from pydla.errors import KernelError
from pydla.loadable import read_loadable
from pydla.passes import PassContext, fold_qdq_pointwise
from pydla.passes.eliminate_dead import EliminateDead
from pydla.passes.fold_qdq_pointwise import FoldQDQPointwise
from tests.oracle import run_ort
from tests.unit.passes.helpers import apply, feeds_for, imported, model, node, ops

RNG = np.random.default_rng(5)


def _q(name: str, src: str, scale: str, zp: str) -> list:
    return [node("QuantizeLinear", [src, scale, zp], f"{name}_q"),
            node("DequantizeLinear", [f"{name}_q", scale, zp], f"{name}_d")]


def _bn_hardswish(signed: bool = False):
    """x → Q/DQ → BatchNormalization → Q/DQ → HardSwish → Q/DQ (PP-LCNet's QDQ blocks)."""
    c = 8
    zt = np.int8 if signed else np.uint8
    inits = {"s0": np.float32(0.04), "z0": zt(3 if signed else 128),
             "s1": np.float32(0.05), "z1": zt(-5 if signed else 120),
             "s2": np.float32(0.03), "z2": zt(-100 if signed else 20),
             "g": RNG.uniform(0.5, 1.5, c).astype(np.float32),
             "b": RNG.uniform(-0.5, 0.5, c).astype(np.float32),
             "m": RNG.uniform(-0.3, 0.3, c).astype(np.float32),
             "v": RNG.uniform(0.5, 2.0, c).astype(np.float32)}
    nodes = [*_q("a", "x", "s0", "z0"),
             node("BatchNormalization", ["a_d", "g", "b", "m", "v"], "bn"),
             *_q("b", "bn", "s1", "z1"),
             node("HardSwish", ["b_d"], "hs"),
             *_q("c", "hs", "s2", "z2")]
    return model(nodes, {"x": [1, c, 5, 7]}, ["c_d"], inits, opset=14)


def _residual_affine(hw: tuple[int, int] = (4, 5)):
    """Two 8-bit tensors added, then Sub/Mul/Add by constants, each behind Q/DQ (open_nsfw's
    TensorFlow batch norm after a residual Add); the Mul's operand a quantized constant."""
    c = 6
    shape = [1, c, 1, 1]
    inits = {"sa": np.float32(0.05), "za": np.uint8(128), "sb": np.float32(0.03),
             "zb": np.uint8(100), "s1": np.float32(0.07), "z1": np.uint8(110),
             "s2": np.float32(0.06), "z2": np.uint8(90), "s3": np.float32(0.04),
             "z3": np.uint8(127), "s4": np.float32(0.05), "z4": np.uint8(0),
             "mean": RNG.uniform(-0.5, 0.5, shape).astype(np.float32),
             "kq": RNG.integers(0, 255, shape).astype(np.uint8), "ks": np.float32(0.01),
             "kz": np.uint8(0), "beta": RNG.uniform(-1, 1, shape).astype(np.float32)}
    nodes = [*_q("a", "x", "sa", "za"), *_q("b", "y", "sb", "zb"),
             node("Add", ["a_d", "b_d"], "add"), *_q("c", "add", "s1", "z1"),
             node("Sub", ["c_d", "mean"], "sub"), *_q("d", "sub", "s2", "z2"),
             node("DequantizeLinear", ["kq", "ks", "kz"], "k"),
             node("Mul", ["d_d", "k"], "mul"), *_q("e", "mul", "s3", "z3"),
             node("Add", ["e_d", "beta"], "aff"), *_q("f", "aff", "s4", "z4"),
             node("Relu", ["f_d"], "out")]
    return model(nodes, {"x": [2, c, *hw], "y": [2, c, *hw]}, ["out"], inits, opset=13)


def _built(m, feeds):
    data = build(m, BuildOptions(autotune=False))
    layers = read_loadable(data).layers
    module = LoadedModule(data)
    return layers, module.run([feeds[k] for k in module.input_names])


@pytest.mark.parametrize("signed", [False, True])
def test_batchnorm_hardswish_chain_is_one_8bit_layer(signed: bool) -> None:
    m = _bn_hardswish(signed)
    feeds = feeds_for(m, scale=3.0)
    layers, got = _built(m, feeds)
    assert [lay.op for lay in layers] == ["QuantizeLinear", "QPointwise", "DequantizeLinear"]
    assert layers[1].tactic == "fused_loop"
    want = run_ort(m, feeds)[0]
    step = np.abs(got[0].astype(np.float64) - want.astype(np.float64)) / 0.03
    assert step.max() <= 1.001 and np.mean(step < 1e-3) >= 0.999


def test_residual_add_and_affine_chain_matches_onnxruntime() -> None:
    m = _residual_affine()
    feeds = feeds_for(m, scale=2.0)
    layers, got = _built(m, feeds)
    q = [lay for lay in layers if lay.op == "QPointwise"]
    assert len(q) == 1 and q[0].tactic == "fused_loop"
    assert "Add" not in [lay.op for lay in layers]
    want = run_ort(m, feeds)[0]
    step = np.abs(got[0].astype(np.float64) - want.astype(np.float64)) / 0.05
    assert step.max() <= 1.001 and np.mean(step < 1e-3) >= 0.999


def test_long_tail_after_a_residual_add_becomes_a_table() -> None:
    """Large enough, the per-channel tail after the Add's Q is a layer of its own that runs
    as a table lookup; the Add and its Q stay one loop."""
    m = _residual_affine((32, 32))
    feeds = feeds_for(m, scale=2.0)
    layers, got = _built(m, feeds)
    assert sorted(lay.tactic for lay in layers if lay.op == "QPointwise") == \
        ["fused_loop", "table"]
    want = run_ort(m, feeds)[0]
    step = np.abs(got[0].astype(np.float64) - want.astype(np.float64)) / 0.05
    # onnxruntime fuses DQ → Add → Q into QLinearAdd, whose own rounding lands one step
    # off on 0.2 % of these outputs (the same with the loop alone: the table is exact)
    assert step.max() <= 1.001 and np.mean(step < 1e-3) >= 0.99


def test_long_head_before_a_residual_add_becomes_a_table(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A per-channel chain on one tensor before it meets another: the head is a table."""
    c, shape = 4, [1, 4, 32, 32]
    inits = {f"s{k}": np.float32(0.03 + 0.01 * k) for k in range(6)}
    inits |= {f"z{k}": np.uint8(100 + k) for k in range(6)}
    inits |= {f"c{k}": RNG.uniform(0.5, 1.5, (1, c, 1, 1)).astype(np.float32)
              for k in range(3)}
    nodes = [*_q("a", "x", "s0", "z0"), node("Mul", ["a_d", "c0"], "m0"),
             *_q("b", "m0", "s1", "z1"), node("Add", ["b_d", "c1"], "m1"),
             *_q("c", "m1", "s2", "z2"), node("Mul", ["c_d", "c2"], "m2"),
             *_q("d", "m2", "s3", "z3"), *_q("y", "y", "s4", "z4"),
             node("Add", ["d_d", "y_d"], "sum"), *_q("e", "sum", "s5", "z5")]
    m = model(nodes, {"x": shape, "y": shape}, ["e_d"], inits, opset=13)
    feeds = feeds_for(m, scale=2.0)
    layers, got = _built(m, feeds)
    assert sorted(lay.tactic for lay in layers if lay.op == "QPointwise") == \
        ["fused_loop", "table"]
    # onnxruntime runs these as QLinearMul/QLinearAdd, rounding its own way: within a step
    want = run_ort(m, feeds)[0]
    step = np.abs(got[0].astype(np.float64) - want.astype(np.float64)) / 0.08
    assert step.max() <= 1.001
    # the table is exact: the same outputs as one loop over the whole chain
    monkeypatch.setattr(fold_qdq_pointwise, "TABLE_QUANTIZE", 99)
    layers, whole = _built(m, feeds)
    assert [lay.tactic for lay in layers if lay.op == "QPointwise"] == ["fused_loop"]
    np.testing.assert_array_equal(got[0], whole[0])


def test_pass_log_target_and_shared_dequantize() -> None:
    m = _bn_hardswish()
    g = imported(m)
    assert not apply(g, FoldQDQPointwise(), ctx=PassContext(target="cuda"))
    ctx = PassContext()
    assert apply(g, FoldQDQPointwise(), EliminateDead(), ctx=ctx)
    assert ops(g) == ["QuantizeLinear", "QPointwise", "DequantizeLinear"]
    assert any("fold_qdq_pointwise" in line for line in ctx.log)
    # A DequantizeLinear another layer reads too stays; the program dequantizes its input.
    m.graph.output.append(_output_info("a_d", [1, 8, 5, 7]))
    g = imported(m)
    apply(g, FoldQDQPointwise(), EliminateDead())
    assert ops(g).count("DequantizeLinear") == 2 and "QPointwise" in ops(g)


def _output_info(name: str, shape: list[int]):
    from onnx import TensorProto, helper

    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def _spec(program, ins, out) -> LayerSpec:
    return LayerSpec("qp", "QPointwise", {"program": program}, tuple(ins), (out,))


def _step(op, regs, shape, dtype="float32", **attrs):
    return {"op": op, "in": regs, "attrs": attrs, "shape": list(shape), "dtype": dtype}


@pytest.mark.parametrize("out_type", ["uint8", "int8"])
def test_compiled_loop_is_the_reference_bit_for_bit(out_type: str) -> None:
    shape = (2, 16, 9, 11)
    ins = [TensorSpec(shape, DType.UINT8), TensorSpec(shape, DType.INT8),
           TensorSpec((1, 16, 1, 1), DType.FLOAT32)]
    program = [
        _step("DequantizeLinear", [0], shape, scale=0.021, zero_point=131),
        _step("DequantizeLinear", [1], shape, scale=0.017, zero_point=-7),
        _step("Add", [3, 4], shape),
        _step("Mul", [5, 2], shape),
        _step("QuantizeLinear", [6], shape, "int8", scale=0.02, zero_point=4),
        _step("DequantizeLinear", [7], shape, scale=0.02, zero_point=4),
        _step("HardSwish", [8], shape),
        _step("Sigmoid", [9], shape),
        _step("Sub", [10, 8], shape),
        _step("QuantizeLinear", [11], shape, out_type, scale=0.013,
              zero_point=3 if out_type == "int8" else 200),
    ]
    out = TensorSpec(shape, DType.from_name(out_type))
    spec = _spec(program, ins, out)
    arrays = [RNG.integers(0, 256, shape).astype(np.uint8),
              RNG.integers(-128, 128, shape).astype(np.int8),
              RNG.uniform(-3, 3, (1, 16, 1, 1)).astype(np.float32)]
    want = np.empty(shape, out.dtype.np)
    qlinear_pointwise.bind_qpointwise(spec)(arrays, [want])
    got = np.empty_like(want)
    qlinear_pointwise.bind_fused_loop(spec)(arrays, [got])
    np.testing.assert_array_equal(got, want)
    assert len(np.unique(want)) > 20  # not saturated into a few values


def test_bad_programs_name_the_step() -> None:
    shape = (1, 4)
    x = TensorSpec(shape, DType.FLOAT32)
    bad = [([_step("DequantizeLinear", [0], shape, scale=0.1, zero_point=0)], "8-bit"),
           ([_step("QuantizeLinear", [0], shape, "uint8", scale=0.0, zero_point=0)],
            "positive scale"),
           ([_step("Conv", [0], shape)], "not a pointwise op"),
           ([_step("Relu", [3], shape)], "out of range")]
    for program, words in bad:
        out = TensorSpec(shape, DType.from_name(program[-1]["dtype"]))
        with pytest.raises(KernelError, match=words):
            qlinear_pointwise.bind_qpointwise(_spec(program, [x], out))
        assert not qlinear_pointwise._applies(_spec(program, [x], out))


@pytest.mark.parametrize("layout", ["nchw", "nhwc", "int8"])
def test_table_tactic_is_the_reference_bit_for_bit(layout: str) -> None:
    """A long chain of one full 8-bit input and per-channel operands runs as a table
    lookup; constants fill it once, a writeable (run-time) operand at every run."""
    shape, small = ((1, 8, 16, 21), (1, 8, 1, 1)) if layout != "nhwc" else \
        ((1, 16, 21, 8), (1, 1, 1, 8))
    xt = "int8" if layout == "int8" else "uint8"
    ins = [TensorSpec(shape, DType.from_name(xt)), TensorSpec(small, DType.FLOAT32)]
    program = [_step("DequantizeLinear", [0], shape, scale=0.05, zero_point=-3 if xt == "int8"
                     else 120)]
    reg = 2
    for k, op in enumerate(["Mul", "Add", "HardSwish"]):
        program.append(_step(op, [reg] if op == "HardSwish" else [reg, 1], shape))
        program.append(_step("QuantizeLinear", [reg + 1], shape, "uint8",
                             scale=0.04 + 0.01 * k, zero_point=100 + k))
        program.append(_step("DequantizeLinear", [reg + 2], shape, scale=0.04 + 0.01 * k,
                             zero_point=100 + k))
        reg += 3
    program.pop()  # the last Q is the result
    spec = _spec(program, ins, TensorSpec(shape, DType.UINT8))
    assert qlinear_pointwise._table_plan(spec) is not None
    x = RNG.integers(-128, 128, shape).astype(xt) if xt == "int8" else \
        RNG.integers(0, 256, shape).astype(np.uint8)
    for writeable in (False, True):
        c = RNG.uniform(-2, 2, small).astype(np.float32)
        c.flags.writeable = writeable
        want = np.empty(shape, np.uint8)
        qlinear_pointwise.bind_qpointwise(spec)([x, c], [want])
        got = np.empty_like(want)
        run = qlinear_pointwise.bind_table(spec)
        run([x, c], [got])
        np.testing.assert_array_equal(got, want)
        if writeable:  # the table follows the operand's new values
            c[...] = -c
            qlinear_pointwise.bind_qpointwise(spec)([x, c], [want])
            run([x, c], [got])
            np.testing.assert_array_equal(got, want)
