import numpy as np
import pytest

from pydla.passes import PassContext
from pydla.passes.fold_batchnorm import FoldBatchNorm
from pydla.passes.matmul_to_gemm import MatMulToGemm
from tests.unit.passes.helpers import F32, apply, assert_matches_ort, imported, model, node, ops

RNG = np.random.default_rng(0)
W = RNG.standard_normal((8, 5)).astype(F32)


def linear(bias: np.ndarray, bias_first: bool = False):
    add_in = ["b", "y"] if bias_first else ["y", "b"]
    return model([node("MatMul", ["x", "w"], "y"), node("Add", add_in, "z")],
                 {"x": [4, 8]}, ["z"], {"w": W, "b": bias})


@pytest.mark.parametrize("bias,bias_first", [
    (RNG.standard_normal(5).astype(F32), False),
    (RNG.standard_normal(5).astype(F32), True),
    (RNG.standard_normal((1, 5)).astype(F32), False),
    (RNG.standard_normal((4, 1)).astype(F32), False),  # per-row C is still Gemm's C
    (np.array(0.5, F32), True),
])
def test_matmul_and_bias_become_one_gemm(bias, bias_first):
    m = linear(bias, bias_first)
    g = imported(m)
    assert apply(g, MatMulToGemm())
    assert ops(g) == ["Gemm"]
    gemm = g.nodes[0]
    assert gemm.attrs == {"alpha": 1.0, "beta": 1.0, "transA": 0, "transB": 0}
    assert gemm.inputs[2].const is not None
    assert sorted(gemm.fused_from) == ["Add_z", "MatMul_y"]
    assert g.outputs[0].name == "z"
    assert_matches_ort(m, g)


def test_transposes_fold_into_trans_flags():
    m = model([node("Transpose", ["a"], "at", perm=[1, 0]),
               node("Transpose", ["k"], "kt", perm=[1, 0]),
               node("Gemm", ["at", "kt", "c"], "y", transB=1, alpha=0.5)],
              {"a": [8, 4], "k": [8, 5]}, ["y"], {"c": RNG.standard_normal(5).astype(F32)})
    g = imported(m)
    assert apply(g, MatMulToGemm())
    assert ops(g) == ["Gemm"]
    attrs = g.nodes[0].attrs
    assert (attrs["transA"], attrs["transB"], attrs["alpha"]) == (1, 0, 0.5)
    assert [v.name for v in g.nodes[0].inputs[:2]] == ["a", "k"]
    assert_matches_ort(m, g)


def test_matmul_add_then_transpose_of_a():
    m = model([node("Transpose", ["a"], "at", perm=[1, 0]), node("MatMul", ["at", "w"], "y"),
               node("Add", ["y", "b"], "z")], {"a": [8, 4]}, ["z"],
              {"w": W, "b": RNG.standard_normal(5).astype(F32)})
    g = imported(m)
    assert apply(g, MatMulToGemm())
    assert ops(g) == ["Gemm"] and g.nodes[0].attrs["transA"] == 1
    assert_matches_ort(m, g)


def test_gemm_from_matmul_takes_a_batchnorm_scale():
    scale = RNG.standard_normal(5).astype(F32)
    m = model([node("MatMul", ["x", "w"], "y"), node("Add", ["y", "b"], "z"),
               node("Mul", ["z", "s"], "out")], {"x": [4, 8]}, ["out"],
              {"w": W, "b": RNG.standard_normal(5).astype(F32), "s": scale})
    g = imported(m)
    assert apply(g, MatMulToGemm(), FoldBatchNorm())
    assert ops(g) == ["Gemm"]
    assert_matches_ort(m, g)


@pytest.mark.parametrize("case", ["batched", "runtime_weight", "runtime_addend",
                                  "product_is_output", "bias_grows_rank"])
def test_refuses(case):
    inputs = {"x": [4, 8]}
    outputs = ["z"]
    inits = {"w": W, "b": RNG.standard_normal(5).astype(F32)}
    nodes = [node("MatMul", ["x", "w"], "y"), node("Add", ["y", "b"], "z")]
    if case == "batched":
        inputs = {"x": [2, 4, 8]}
    elif case == "runtime_weight":
        inputs["w"] = [8, 5]
        del inits["w"]
    elif case == "runtime_addend":
        inputs["b"] = [4, 5]
        del inits["b"]
    elif case == "product_is_output":
        outputs = ["z", "y"]
    elif case == "bias_grows_rank":
        inits["b"] = RNG.standard_normal((3, 4, 5)).astype(F32)
    m = model(nodes, inputs, outputs, inits)
    g = imported(m)
    ctx = PassContext()
    assert not apply(g, MatMulToGemm(), ctx=ctx)
    assert ops(g) == ["MatMul", "Add"]
    if case == "bias_grows_rank":
        assert any("does not broadcast" in line for line in ctx.log)
    assert_matches_ort(m, g)


def test_transpose_with_another_reader_stays():
    m = model([node("Transpose", ["a"], "at", perm=[1, 0]),
               node("Gemm", ["at", "w"], "y"), node("Relu", ["at"], "r")],
              {"a": [8, 4]}, ["y", "r"], {"w": W})
    g = imported(m)
    assert not apply(g, MatMulToGemm())
    assert ops(g) == ["Transpose", "Gemm", "Relu"]
