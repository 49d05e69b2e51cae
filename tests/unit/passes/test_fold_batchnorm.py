import numpy as np
import onnx
import pytest

from pydla.passes.fold_batchnorm import FoldBatchNorm, LowerBatchNorm
from tests.unit.passes.helpers import F32, apply, assert_matches_ort, imported, model, node, ops

RNG = np.random.default_rng(5)


def randn(*shape: int, scale: float = 1.0) -> np.ndarray:
    return (scale * RNG.standard_normal(shape)).astype(F32)


def with_bn(host: onnx.NodeProto, inputs: dict, inits: dict, c: int,
            extra: tuple[str, ...] = ()) -> onnx.ModelProto:
    """``host`` writes "h"; a BatchNormalization over its c channels writes "y"."""
    params = {"s": 1 + randn(c, scale=0.2), "b": randn(c, scale=0.1),
              "m": randn(c, scale=0.1), "v": (1 + 0.2 * RNG.random(c)).astype(F32)}
    nodes = [host, node("BatchNormalization", ["h", "s", "b", "m", "v"], "y", epsilon=1e-3)]
    return model(nodes, inputs, ["y", *extra], {**inits, **params})


def check_folded(m: onnx.ModelProto, host: str) -> None:
    g = imported(m)
    assert apply(g, FoldBatchNorm())
    assert ops(g) == [host]
    assert "BatchNormalization_y" in g.nodes[0].fused_from
    assert g.outputs[0].name == "y"
    assert_matches_ort(m, g)


@pytest.mark.parametrize("bias", [False, True])
def test_conv(bias):
    inits = {"w": randn(6, 3, 3, 3, scale=0.3)}
    if bias:
        inits["cb"] = randn(6)
    conv = node("Conv", ["x", "w", "cb"] if bias else ["x", "w"], "h", pads=[1, 1, 1, 1])
    check_folded(with_bn(conv, {"x": [1, 3, 5, 5]}, inits, 6), "Conv")


@pytest.mark.parametrize("group", [1, 2])
def test_conv_transpose(group):
    # W is [C_in, C_out / group, k, k]: the channel of each column depends on its group.
    inits = {"w": randn(4, 3, 2, 2, scale=0.3), "cb": randn(3 * group)}
    convt = node("ConvTranspose", ["x", "w", "cb"], "h", strides=[2, 2], group=group)
    check_folded(with_bn(convt, {"x": [1, 4, 3, 3]}, inits, 3 * group), "ConvTranspose")


@pytest.mark.parametrize("trans_b", [0, 1])
@pytest.mark.parametrize("with_c", [False, True])
def test_gemm(trans_b, with_c):
    w = randn(5, 8) if trans_b else randn(8, 5)
    inits = {"w": w, **({"c": randn(5)} if with_c else {})}
    gemm = node("Gemm", ["x", "w", "c"] if with_c else ["x", "w"], "h", transB=trans_b,
                alpha=0.7, beta=1.3)
    check_folded(with_bn(gemm, {"x": [4, 8]}, inits, 5), "Gemm")


def test_per_channel_mul_then_add():
    m = model([node("Conv", ["x", "w"], "h"), node("Mul", ["h", "k"], "hk"),
               node("Add", ["q", "hk"], "y")], {"x": [1, 3, 4, 4]}, ["y"],
              {"w": randn(4, 3, 1, 1), "k": randn(1, 4, 1, 1), "q": randn(4, 1, 1)})
    g = imported(m)
    assert apply(g, FoldBatchNorm())
    assert ops(g) == ["Conv"]
    assert_matches_ort(m, g)


def test_not_folded_when_the_conv_output_has_another_reader():
    # the conv's weights stay; the BatchNormalization becomes a per-channel Mul and Add
    m = with_bn(node("Conv", ["x", "w"], "h"), {"x": [1, 3, 4, 4]}, {"w": randn(4, 3, 1, 1)}, 4,
                extra=("h",))
    g = imported(m)
    assert not apply(g, FoldBatchNorm())
    assert ops(g) == ["Conv", "BatchNormalization"]
    assert apply(g, LowerBatchNorm())
    assert ops(g) == ["Conv", "Mul", "Add"]
    assert g.nodes[0].inputs[1].name == "w"
    assert_matches_ort(m, g)


def test_an_unfoldable_batchnorm_becomes_mul_and_add():
    m = with_bn(node("MaxPool", ["x"], "h", kernel_shape=[2, 2], strides=[2, 2]),
                {"x": [2, 5, 6, 6]}, {}, 5)
    g = imported(m)
    assert apply(g, LowerBatchNorm())
    assert ops(g) == ["MaxPool", "Mul", "Add"]
    assert all("BatchNormalization_y" in n.fused_from for n in g.nodes[1:])
    assert g.outputs[0].name == "y"
    assert_matches_ort(m, g)


def test_refuses_a_scale_that_varies_in_space():
    m = model([node("Conv", ["x", "w"], "h"), node("Mul", ["h", "k"], "y")],
              {"x": [1, 3, 4, 4]}, ["y"], {"w": randn(4, 3, 1, 1), "k": randn(1, 4, 4, 1)})
    g = imported(m)
    assert not apply(g, FoldBatchNorm())
    assert ops(g) == ["Conv", "Mul"]


def test_refuses_runtime_statistics():
    params = {"s": randn(4), "b": randn(4), "v": (1 + RNG.random(4)).astype(F32),
              "w": randn(4, 3, 1, 1)}
    m = model([node("Conv", ["x", "w"], "h"),
               node("BatchNormalization", ["h", "s", "b", "mean", "v"], "y")],
              {"x": [1, 3, 4, 4], "mean": [4]}, ["y"], params)
    g = imported(m)
    assert not apply(g, FoldBatchNorm())
    assert ops(g) == ["Conv", "BatchNormalization"]
