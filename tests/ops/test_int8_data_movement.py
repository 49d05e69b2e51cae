"""What quantized networks move as 8-bit tensors, one and two threads: NCHW↔NHWC
Transposes of bytes in 16×16 register tiles (fast_transpose.transpose16_bytes) against
numpy; MaxPool (fast_pooling_int8) against the reference kernel, element for element —
strides, pads, dilations, ceil_mode's partial windows."""

from __future__ import annotations

import numpy as np
import pytest

from pydla.backends.base import LayerSpec, TensorSpec
from pydla.backends.cpu import threads
from pydla.backends.cpu.backend import bind_layer
from pydla.backends.cpu.registry import candidate_tactics
from pydla.backends.cpu.steps import prebind
from pydla.dtypes import DType


@pytest.mark.parametrize("count", [1, 2])
@pytest.mark.parametrize("shape, perm", [((1, 64, 112, 112), (0, 2, 3, 1)),
                                         ((2, 56, 56, 48), (0, 3, 1, 2)),
                                         ((1, 35, 17, 40), (0, 2, 3, 1))])
@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_byte_transposes_in_tiles(shape, perm, dtype: type, count: int) -> None:
    from pydla.backends.cpu.kernels.fast_transpose import bind_strided_copy

    x = np.random.default_rng(1).integers(-128, 128, shape).astype(np.int16).astype(dtype)
    dt = DType.from_numpy(x.dtype)
    out_shape = tuple(shape[a] for a in perm)
    spec = LayerSpec("t", "Transpose", {"perm": list(perm)}, (TensorSpec(shape, dt),),
                     (TensorSpec(out_shape, dt),), "strided_copy")
    y = np.zeros(out_shape, dtype)
    threads.set_num_threads(count)
    try:
        prebind(bind_strided_copy(spec), [x], [y])()
    finally:
        threads.set_num_threads(None)
    np.testing.assert_array_equal(y, x.transpose(perm))


def _pool(x: np.ndarray, out_hw: tuple[int, int], attrs: dict, tactic: str) -> np.ndarray:
    dt = DType.from_numpy(x.dtype)
    spec = LayerSpec("pool", "MaxPool", attrs, (TensorSpec(x.shape, dt),),
                     (TensorSpec((*x.shape[:2], *out_hw), dt),), tactic)
    out = np.empty((*x.shape[:2], *out_hw), x.dtype)
    prebind(bind_layer(spec), [x], [out])()
    return out


CASES = [  # x shape, kernel, strides, pads, dilations, output (h, w)
    ((1, 32, 40, 40), (2, 2), (2, 2), (0, 0, 0, 0), (1, 1), (20, 20)),
    ((2, 5, 13, 11), (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), (7, 6)),
    ((1, 3, 12, 17), (3, 2), (1, 3), (0, 1, 2, 0), (2, 1), (10, 6)),
    ((1, 4, 9, 9), (2, 2), (2, 2), (0, 0, 0, 0), (1, 1), (5, 5)),  # ceil_mode: partial edge
    ((1, 64, 113, 113), (3, 3), (2, 2), (0, 0, 0, 0), (1, 1), (56, 56)),  # open_nsfw's
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}-k{c[1]}-s{c[2]}")
@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("count", [1, 2])
def test_int8_maxpool_matches_reference(case: tuple, dtype: type, count: int) -> None:
    shape, kernel, strides, pads, dil, out_hw = case
    info = np.iinfo(dtype)
    x = np.random.default_rng(sum(shape)).integers(info.min, info.max + 1, shape).astype(dtype)
    attrs = {"kernel_shape": list(kernel), "strides": list(strides), "pads": list(pads),
             "dilations": list(dil), "storage_order": 0}
    threads.set_num_threads(count)
    try:
        got = _pool(x, out_hw, attrs, "int8")
    finally:
        threads.set_num_threads(None)
    np.testing.assert_array_equal(got, _pool(x, out_hw, attrs, "reference"))


def test_int8_maxpool_scope() -> None:
    spec = LayerSpec("pool", "MaxPool", {"kernel_shape": [2, 2], "storage_order": 0},
                     (TensorSpec((1, 2, 4, 4), DType.FLOAT32),),
                     (TensorSpec((1, 2, 3, 3), DType.FLOAT32),))
    assert "int8" not in [t.name for t in candidate_tactics(spec)]


def test_split_and_gather_between_qdq_run_on_the_8bit_tensor() -> None:
    """DQ → Split → Q per output and DQ → Gather → Q (a quantized LSTM's gates and time
    steps): the Split and the Gather move bytes, with no Q/DQ layer left around them."""
    from onnx import TensorProto, helper

    from pydla.builder import BuildOptions, build
    from pydla.engine import LoadedModule
    from pydla.loadable import read_loadable
    from tests.oracle import run_ort

    s, z = np.float32(0.05), np.uint8(128)
    inits = [helper.make_tensor("s", TensorProto.FLOAT, [], [s]),
             helper.make_tensor("z", TensorProto.UINT8, [], [int(z)]),
             helper.make_tensor("i", TensorProto.INT64, [2], [3, 0])]
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"]),
             helper.make_node("Split", ["xd"], ["a", "b"], axis=1, num_outputs=2),
             helper.make_node("Gather", ["xd", "i"], ["g"], axis=0)]
    outs = []
    for name in ("a", "b", "g"):
        nodes += [helper.make_node("QuantizeLinear", [name, "s", "z"], [f"{name}q"]),
                  helper.make_node("DequantizeLinear", [f"{name}q", "s", "z"], [f"{name}d"])]
        outs.append(helper.make_tensor_value_info(f"{name}d", TensorProto.FLOAT, None))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [4, 6, 5])], outs, inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    data = build(m, BuildOptions(autotune=False))
    ops = [(lay.op, lay.precision) for lay in read_loadable(data).layers]
    assert ("Split", "int8") in ops and ("Gather", "int8") in ops
    assert [op for op, _ in ops].count("QuantizeLinear") == 1
    x = np.random.default_rng(4).standard_normal((4, 6, 5)).astype(np.float32) * 3
    got = LoadedModule(data).run([x])
    for g, w in zip(got, run_ort(m, {"x": x})):
        np.testing.assert_array_equal(g, w)


def test_transpose_after_an_activation_moves_onto_the_8bit_tensor() -> None:
    """DQ → Relu → Transpose → Q (a TensorFlow export's NHWC → NCHW after its activation):
    the Transpose moves bytes ahead of the DQ and the rest is one 8-bit layer."""
    from onnx import TensorProto, helper

    from pydla.builder import BuildOptions, build
    from pydla.engine import LoadedModule
    from pydla.loadable import read_loadable
    from tests.oracle import run_ort

    inits = [helper.make_tensor("s", TensorProto.FLOAT, [], [0.05]),
             helper.make_tensor("z", TensorProto.UINT8, [], [120]),
             helper.make_tensor("s2", TensorProto.FLOAT, [], [0.03]),
             helper.make_tensor("z2", TensorProto.UINT8, [], [0])]
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"]),
             helper.make_node("Relu", ["xd"], ["r"]),
             helper.make_node("Transpose", ["r"], ["t"], perm=[0, 3, 1, 2]),
             helper.make_node("QuantizeLinear", ["t", "s2", "z2"], ["tq"]),
             helper.make_node("DequantizeLinear", ["tq", "s2", "z2"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [1, 9, 10, 16])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, None)], inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    data = build(m, BuildOptions(autotune=False))
    layers = read_loadable(data).layers
    assert [lay.op for lay in layers] == ["QuantizeLinear", "Transpose", "QPointwise",
                                          "DequantizeLinear"]
    x = np.random.default_rng(5).standard_normal((1, 9, 10, 16)).astype(np.float32) * 3
    np.testing.assert_array_equal(LoadedModule(data).run([x])[0], run_ort(m, {"x": x})[0])
