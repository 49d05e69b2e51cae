"""Each CUDA kernel family against the CPU backend on small nets (fp32, fp16, bf16)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.gpu.gpu import cosine, relative_error, require_gpu

cp = require_gpu()

from pydla.backends.cuda import CudaBackend  # noqa: E402
from pydla.builder import BuildOptions, build  # noqa: E402
from pydla.dtypes import DType  # noqa: E402
from pydla.engine.module import LoadedModule  # noqa: E402
from tests.models.netbuilder import Net  # noqa: E402

N, C, H, W = 2, 12, 13, 11  # odd sizes and channels that are not a multiple of 8


def _net(body):  # noqa: ANN001, ANN202
    n = Net("k", seed=3)
    x = n.input("x", [N, C, H, W])
    return n.model([body(n, x)])


CASES = {
    "conv3x3_bn_relu": lambda n, x: n.conv(x, C, 16, 3),
    "conv3x3_s2": lambda n, x: n.conv(x, C, 16, 3, 2),
    "conv1x1_linear": lambda n, x: n.conv(x, C, 24, 1, act=None),
    "conv_residual_relu": lambda n, x: n.op("Relu", [n.op("Add", [n.conv(x, C, C, 1, act=None),
                                                                 x])]),
    "conv_relu6": lambda n, x: n.conv(x, C, 16, 1, act="relu6"),
    "conv_silu": lambda n, x: n.conv(x, C, 16, 3, act="silu"),
    "conv_bias_hardswish": lambda n, x: n.conv(x, C, 8, 3, act="hardswish", bn=False,
                                               bias=True),
    "depthwise_relu6": lambda n, x: n.conv(x, C, C, 3, 1, groups=C, act="relu6"),
    "depthwise_s2": lambda n, x: n.conv(x, C, C, 3, 2, groups=C, act="relu"),
    "depthwise_5x5_residual": lambda n, x: n.op("Add", [x, n.conv(x, C, C, 5, groups=C,
                                                                  act=None)]),
    "grouped_conv": lambda n, x: n.conv(x, C, 8, 3, groups=4),
    "asymmetric_pads": lambda n, x: n.op("Conv", [x, n.weight(8, C, 3, 3)], kernel_shape=[3, 3],
                                         pads=[0, 1, 2, 1], strides=[1, 2]),
    "maxpool": lambda n, x: n.op("MaxPool", [n.conv(x, C, 16, 3)], kernel_shape=[3, 3],
                                 strides=[2, 2], pads=[1, 1, 1, 1]),
    "avgpool_pad": lambda n, x: n.op("AveragePool", [n.conv(x, C, 16, 3)], kernel_shape=[3, 3],
                                     strides=[1, 1], pads=[1, 1, 1, 1], count_include_pad=1),
    "avgpool_nopad": lambda n, x: n.op("AveragePool", [n.conv(x, C, 16, 3)],
                                       kernel_shape=[2, 2], strides=[2, 2]),
    "gap_flatten_gemm": lambda n, x: n.op("Gemm", [
        n.op("Flatten", [n.op("GlobalAveragePool", [n.conv(x, C, 32, 3)])], axis=1),
        n.weight(10, 32), n.const(np.arange(10, dtype=np.float32) * 0.1)], transB=1),
    "flatten_map_gemm_softmax": lambda n, x: n.op("Softmax", [n.op("Gemm", [
        n.op("Flatten", [n.conv(x, C, 4, 3, 2)], axis=1), n.weight(4 * 7 * 6, 10)])], axis=1),
    "concat_channels": lambda n, x: n.op("Concat", [n.conv(x, C, 8, 3), n.conv(x, C, 4, 1)],
                                         axis=1),
    "transpose": lambda n, x: n.op("Transpose", [n.conv(x, C, 8, 1)], perm=[0, 2, 3, 1]),
    "pointwise_chain": lambda n, x: n.op("Mul", [n.op("Sigmoid", [x]),
                                                 n.op("Tanh", [n.op("Add", [x, x])])]),
}


def _run(model, precision: DType | None) -> tuple[list[np.ndarray], list[np.ndarray]]:  # noqa: ANN001
    data = build(model, BuildOptions(autotune=False, autocast=precision, target="cuda"))
    x = np.random.default_rng(7).standard_normal((N, C, H, W)).astype(np.float32)
    want = LoadedModule(data).run([x])
    gpu = LoadedModule(data, CudaBackend())
    got = gpu.run([x])
    again = gpu.run([x])  # the graph replays to the same result
    for a, b in zip(got, again):
        np.testing.assert_array_equal(a, b)
    gpu.bound.close()
    return got, want


@pytest.mark.parametrize("name", sorted(CASES))
def test_fp32_matches_cpu(name):
    got, want = _run(_net(CASES[name]), None)
    for g, w in zip(got, want):
        assert g.shape == w.shape
        assert relative_error(g, w) < 1e-2, (name, relative_error(g, w))


@pytest.mark.parametrize("precision", [DType.FLOAT16, DType.BFLOAT16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_half_matches_cpu(name, precision):
    got, want = _run(_net(CASES[name]), precision)
    limit = 0.999 if precision is DType.FLOAT16 else 0.995
    for g, w in zip(got, want):
        assert cosine(g, w) >= limit, (name, cosine(g, w))
