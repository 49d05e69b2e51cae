"""fold_qdq before/after: which QDQ patterns become QConv/QGemm layers, which stay, and
that the folded graph computes what onnxruntime computes for the QDQ model (within one
quantization step of the output, nearly always exactly)."""

from __future__ import annotations

import numpy as np
from onnx import numpy_helper

from pydla.passes import PassContext
from pydla.passes.eliminate_dead import EliminateDead
from pydla.passes.fold_qdq import FoldQDQ
from tests.oracle import run_ort
from tests.unit.passes.helpers import apply, feeds_for, imported, model, node, ops, run_graph

RNG = np.random.default_rng(2)
YS = 0.05


def _qdq_conv(tail: str = "relu_q", w_axis: int = 0, gemm: bool = False):
    """x -> Q/DQ -> Conv or Gemm(DQ(w), DQ(b)) -> [Relu] -> [Q -> DQ] -> tail."""
    n_out = 6
    if gemm:
        wq = RNG.integers(-127, 128, (n_out, 12)).astype(np.int8)
        x_shape = [3, 12]
    else:
        wq = RNG.integers(-127, 128, (n_out, 4, 3, 3)).astype(np.int8)
        x_shape = [1, 4, 7, 7]
    ws = RNG.uniform(0.005, 0.02, n_out if w_axis == 0 else wq.shape[1]).astype(np.float32)
    xs = np.array(0.03, np.float32)
    inits = {"xs": xs, "xz": np.array(120, np.uint8), "wq": wq, "ws": ws,
             "wz": np.zeros(ws.size, np.int8), "ys": np.array(YS, np.float32),
             "yz": np.array(10, np.uint8),
             "bq": RNG.integers(-500, 500, n_out).astype(np.int32),
             "bs": xs * ws if w_axis == 0 else xs * np.float32(0.01),
             "bz": np.zeros(n_out if w_axis == 0 else (), np.int32)}
    nodes = [node("QuantizeLinear", ["x", "xs", "xz"], "xq"),
             node("DequantizeLinear", ["xq", "xs", "xz"], "xd"),
             node("DequantizeLinear", ["wq", "ws", "wz"], "wd", axis=w_axis),
             node("DequantizeLinear", ["bq", "bs", "bz"], "bd", axis=0)]
    if gemm:
        nodes.append(node("Gemm", ["xd", "wd", "bd"], "c", transB=1))
    else:
        nodes.append(node("Conv", ["xd", "wd", "bd"], "c", pads=[1, 1, 1, 1]))
    last = "c"
    if "relu" in tail:
        nodes.append(node("Relu", ["c"], "r"))
        last = "r"
    if "q" in tail:
        nodes += [node("QuantizeLinear", [last, "ys", "yz"], "yq"),
                  node("DequantizeLinear", ["yq", "ys", "yz"], "yd")]
        last = "yd"
    if "sigmoid" in tail:
        nodes.append(node("Sigmoid", [last], "s"))
        last = "s"
    m = model(nodes, {"x": x_shape}, [last], inits, opset=13)
    return m


def _folded(m):
    g = imported(m)
    ctx = PassContext()
    changed = apply(g, FoldQDQ(), EliminateDead(), ctx=ctx)
    return g, changed, ctx


def _check(m, g, step=YS):
    feeds = feeds_for(m, scale=2.0)
    got, want = run_graph(g, feeds)[0], run_ort(m, feeds)[0]
    diff = np.abs(got.astype(np.float64) - want.astype(np.float64))
    assert diff.max() <= step * 1.001 and np.mean(diff <= 1e-5) >= 0.99, diff.max()


def test_conv_relu_q_folds_into_one_layer():
    m = _qdq_conv("relu_q")
    g, changed, ctx = _folded(m)
    assert changed
    # The input's Q stays; Conv, its weight/bias DQs, Relu and Q/DQ become one QConv whose
    # output is dequantized directly (only a float graph output reads it).
    assert ops(g) == ["QuantizeLinear", "QConv"]
    qconv = g.nodes[1]
    assert qconv.attrs["clip"] == [0.0, float("inf")] and qconv.precision == "int8"
    assert qconv.inputs[8].dtype.name == "INT32"
    assert any("fold_qdq" in line for line in ctx.log)
    _check(m, g)


def test_int8_output_between_layers_stays_int8():
    m = _qdq_conv("relu_q")
    # A second quantized conv reads the first's Q output through its own DQ.
    extra = {"w2": RNG.integers(-127, 128, (3, 6, 1, 1)).astype(np.int8),
             "s2": np.array(0.01, np.float32)}
    m.graph.node.extend([node("DequantizeLinear", ["w2", "s2"], "w2d"),
                         node("Conv", ["yd", "w2d"], "z")])
    m.graph.initializer.extend(numpy_helper.from_array(v, k) for k, v in extra.items())
    m.graph.output[0].name = "z"
    m.graph.output[0].type.tensor_type.shape.dim[1].dim_value = 3
    g, _, _ = _folded(m)
    assert ops(g) == ["QuantizeLinear", "QConv", "QConv"]
    assert g.nodes[1].outputs[0].dtype.name == "UINT8"  # int8 tensor between the layers
    assert g.nodes[2].outputs[0].dtype.name == "FLOAT32"  # no Q after: float output
    feeds = feeds_for(m, scale=2.0)
    np.testing.assert_allclose(run_graph(g, feeds)[0], run_ort(m, feeds)[0], rtol=1e-4,
                               atol=1e-4)


def test_q_read_by_float_layers_outputs_float():
    m = _qdq_conv("q_sigmoid")
    g, _, _ = _folded(m)
    assert ops(g) == ["QuantizeLinear", "QConv", "Sigmoid"]
    assert g.nodes[1].outputs[0].dtype.name == "FLOAT32"
    _check(m, g)


def test_gemm_transposed_weights_fold():
    m = _qdq_conv("q", gemm=True)
    g, _, _ = _folded(m)
    assert ops(g) == ["QuantizeLinear", "QGemm"]
    assert g.nodes[1].inputs[3].shape == (12, 6)  # B as (K, N)
    _check(m, g)


def test_weights_quantized_on_another_axis_stay_float():
    m = _qdq_conv("relu_q", w_axis=1)
    g, changed, ctx = _folded(m)
    assert not changed and "Conv" in ops(g)
    assert any("kept Conv" in line and "per-output-channel" in line for line in ctx.log)
    _check(m, g)


def _residual_block(m, add_input: str):
    """Add a quantized 1x1 side branch of xd and Add(add_input, side) → Relu → Q → DQ."""
    extra = {"rs": np.array(0.04, np.float32), "rz": np.array(128, np.uint8),
             "w0": RNG.integers(-127, 128, (6, 4, 1, 1)).astype(np.int8),
             "s0": np.array(0.02, np.float32), "os": np.array(0.06, np.float32),
             "oz": np.array(20, np.uint8)}
    m.graph.node.extend([
        node("DequantizeLinear", ["w0", "s0"], "w0d"),
        node("Conv", ["xd", "w0d"], "side"),
        node("QuantizeLinear", ["side", "rs", "rz"], "sideq"),
        node("DequantizeLinear", ["sideq", "rs", "rz"], "sided"),
        node("Add", [add_input, "sided"], "sum"), node("Relu", ["sum"], "sr"),
        node("QuantizeLinear", ["sr", "os", "oz"], "outq"),
        node("DequantizeLinear", ["outq", "os", "oz"], "out")])
    m.graph.initializer.extend(numpy_helper.from_array(v, k) for k, v in extra.items())
    m.graph.output[0].name = "out"
    return m


def test_residual_add_relu_q_folds():
    """Conv → Add(DQ(r)) → Relu → Q becomes one QConv reading the int8 residual."""
    m = _residual_block(_qdq_conv(""), "c")
    g, _, _ = _folded(m)
    assert ops(g) == ["QuantizeLinear", "QConv", "QConv", "DequantizeLinear"], ops(g)
    fused = g.nodes[2]
    assert fused.attrs["residual"] == {"scale": np.float32(0.04).item(), "zero_point": 128}
    assert fused.inputs[9] is g.nodes[1].outputs[0]  # the int8 residual, read as int8
    _check(m, g, step=0.06)


def test_residual_block_with_qdq_between_keeps_the_add():
    """onnxruntime's QDQ residual block (Conv → Q → DQ → Add) keeps its Add: the Q clamps
    the conv's output to its own range first, which one rounding would skip."""
    m = _residual_block(_qdq_conv("q"), "yd")
    g, _, _ = _folded(m)
    assert ops(g) == ["QuantizeLinear", "QConv", "QConv", "Add", "Relu", "QuantizeLinear",
                      "DequantizeLinear"], ops(g)
    _check(m, g, step=0.06)


def test_maxpool_between_qdq_runs_on_int8():
    """Conv → Q → DQ → MaxPool → Q(same) → DQ → Conv: MaxPool reads and writes int8 and both
    convolutions keep int8 tensors."""
    from pydla.passes.fold_qdq_moves import FoldQDQMoves

    m = _qdq_conv("relu_q")
    extra = {"w2": RNG.integers(-127, 128, (3, 6, 1, 1)).astype(np.int8),
             "s2": np.array(0.01, np.float32)}
    m.graph.node.extend([node("MaxPool", ["yd"], "mp", kernel_shape=[3, 3], pads=[1, 1, 1, 1],
                              strides=[2, 2]),
                         node("QuantizeLinear", ["mp", "ys", "yz"], "mpq"),
                         node("DequantizeLinear", ["mpq", "ys", "yz"], "mpd"),
                         node("DequantizeLinear", ["w2", "s2"], "w2d"),
                         node("Conv", ["mpd", "w2d"], "z")])
    m.graph.initializer.extend(numpy_helper.from_array(v, k) for k, v in extra.items())
    m.graph.output[0].name = "z"
    del m.graph.output[0].type.tensor_type.shape.dim[:]
    g = imported(m)
    ctx = PassContext()
    apply(g, FoldQDQMoves(), FoldQDQ(), EliminateDead(), ctx=ctx)
    assert ops(g) == ["QuantizeLinear", "QConv", "MaxPool", "QConv"], ops(g)
    assert g.nodes[2].inputs[0].dtype.name == "UINT8" and g.nodes[2].precision == "int8"
    feeds = feeds_for(m, scale=2.0)
    np.testing.assert_allclose(run_graph(g, feeds)[0], run_ort(m, feeds)[0], rtol=1e-4,
                               atol=1e-4)
