"""Small networks over the ops issue 26's coverage work gave CUDA kernels: GRU (both
``linear_before_reset`` forms, every direction, layout 1, initial states, constant and
run-time ``sequence_lens``, inside a small model), TopK, the quantize family and 3-D
convolutions. Built
without CUDA: ``scripts/cuda_emulate.py`` runs their (non-cooperating) kernels on the host
and ``tests/gpu/test_coverage_ops_gpu.py`` on the GPU, both against the CPU backend.

``EXACT_CASES`` must match bit for bit (``FLOAT_CASES`` too, in fp16 and bf16 builds as
well); ``TOLERANT_CASES`` within their relative error."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx
from onnx import TensorProto

from tests.models.netbuilder import Net

Feeds = dict[str, np.ndarray]
Case = Callable[[], tuple[onnx.ModelProto, Feeds]]


def _rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def _gru(direction: str, before: int, *, layout: int = 0, h0: bool = False,
         lens: str | None = None, clip: float | None = None, bias: bool = True) -> Case:
    """One GRU (T 5, batch 3, input 4, hidden 6) with every output; ``lens`` "input" (a
    run-time int32 tensor, one empty row) or "const" (rows of 5, 2, 4)."""
    def case() -> tuple[onnx.ModelProto, Feeds]:
        steps, batch, size, hidden = 5, 3, 4, 6
        dirs = 2 if direction == "bidirectional" else 1
        n = Net(f"gru_{direction}_{before}", seed=4)
        x_shape = (batch, steps, size) if layout else (steps, batch, size)
        x = n.input("x", x_shape)
        feeds: Feeds = {"x": _rng(1).standard_normal(x_shape).astype(np.float32)}
        ins = [x, n.weight(dirs, 3 * hidden, size, scale=0.6),
               n.weight(dirs, 3 * hidden, hidden, scale=0.6),
               n.weight(dirs, 6 * hidden, scale=0.3) if bias else ""]
        if lens == "input":
            ins.append(n.input("lens", (batch,), TensorProto.INT32))
            feeds["lens"] = np.array([3, 0, 5], np.int32)
        elif lens == "const":
            ins.append(n.const(np.array([5, 2, 4], np.int32)))
        else:
            ins.append("")
        if h0:
            state = (batch, dirs, hidden) if layout else (dirs, batch, hidden)
            ins.append(n.input("h0", state))
            feeds["h0"] = _rng(2).standard_normal(state).astype(np.float32)
        attrs = {"hidden_size": hidden, "direction": direction, "linear_before_reset": before,
                 "layout": layout}
        if clip is not None:
            attrs["clip"] = clip
        y, yh = n.op("GRU", [i for i in ins], n_out=2, **attrs)
        return n.model([y, yh], opset=14), feeds

    return case


def _gru_model() -> tuple[onnx.ModelProto, Feeds]:
    """A GRU between a 1-D convolution and a linear head, as the corpus' sequence models:
    [N, C, T] → Conv → [T, N, C] → bidirectional GRU → [T, N, 2H] → MatMul + Add."""
    n = Net("gru_model", seed=5)
    batch, chans, steps, hidden = 2, 8, 12, 16
    x = n.input("x", (batch, chans, steps))
    c = n.op("Relu", [n.op("Conv", [x, n.weight(12, chans, 3), n.weight(12, scale=0.1)],
                           pads=[1, 1])])
    t = n.op("Transpose", [c], perm=[2, 0, 1])
    y, _ = n.op("GRU", [t, n.weight(2, 3 * hidden, 12), n.weight(2, 3 * hidden, hidden),
                        n.weight(2, 6 * hidden, scale=0.2)], n_out=2, hidden_size=hidden,
                direction="bidirectional", linear_before_reset=1)
    y = n.op("Reshape", [n.op("Transpose", [y], perm=[0, 2, 1, 3]),
                         n.shape_const([steps, batch, 2 * hidden])])
    out = n.linear(y, 2 * hidden, 5)
    return n.model([out]), {"x": _rng(3).standard_normal((batch, chans, steps))
                            .astype(np.float32)}


def _dq_lstm(direction: str, extras: bool) -> Case:
    """com.microsoft DynamicQuantizeLSTM (int8 weights dequantized at build; X and every
    step's h through a dynamic uint8 round trip: the LSTM's ``quantize_hidden``)."""
    def case() -> tuple[onnx.ModelProto, Feeds]:
        steps, batch, size, hidden = 7, 2, 5, 6
        dirs = 2 if direction == "bidirectional" else 1
        r = _rng(25)
        inits = {"w": r.integers(-128, 128, (dirs, size, 4 * hidden)).astype(np.int8),
                 "r": r.integers(-128, 128, (dirs, hidden, 4 * hidden)).astype(np.int8),
                 "b": r.normal(0, 0.3, (dirs, 8 * hidden)).astype(np.float32),
                 "ws": r.uniform(0.005, 0.015, dirs).astype(np.float32),
                 "wz": np.zeros(dirs, np.int8),
                 "rs": r.uniform(0.004, 0.01, dirs).astype(np.float32),
                 "rz": np.zeros(dirs, np.int8)}
        names = ["x", "w", "r", "b", "", "", "", "", "ws", "wz", "rs", "rz"]
        state = (dirs, batch, hidden)
        if extras:
            inits |= {"h0": r.normal(0, 0.5, state).astype(np.float32),
                      "c0": r.normal(0, 1, state).astype(np.float32)}
            names[5:7] = ["h0", "c0"]
        node = onnx.helper.make_node("DynamicQuantizeLSTM", names, ["y", "yh", "yc"],
                                     domain="com.microsoft", direction=direction,
                                     hidden_size=hidden)
        info = onnx.helper.make_tensor_value_info
        graph = onnx.helper.make_graph(
            [node], "dq_lstm", [info("x", TensorProto.FLOAT, [steps, batch, size])],
            [info("y", TensorProto.FLOAT, [steps, dirs, batch, hidden]),
             info("yh", TensorProto.FLOAT, list(state)), info("yc", TensorProto.FLOAT,
                                                              list(state))],
            [onnx.numpy_helper.from_array(v, k) for k, v in inits.items()])
        model = onnx.helper.make_model(graph, opset_imports=[
            onnx.helper.make_opsetid("", 17), onnx.helper.make_opsetid("com.microsoft", 1)])
        model.ir_version = 8
        return model, {"x": r.normal(0, 1, (steps, batch, size)).astype(np.float32)}

    return case


GRU_CASES: dict[str, Case] = {
    "gru_bidir_before_h0": _gru("bidirectional", 1, h0=True),
    "gru_forward_after_clip": _gru("forward", 0, clip=0.9),
    "gru_reverse_after_lens_input": _gru("reverse", 0, h0=True, lens="input"),
    "gru_bidir_before_lens_const_layout1": _gru("bidirectional", 1, layout=1, lens="const",
                                                h0=True),
    "gru_bidir_after_no_bias": _gru("bidirectional", 0, bias=False),
    "gru_model": _gru_model,
}

_TOPK_TYPES = {"float32": TensorProto.FLOAT, "float16": TensorProto.FLOAT16,
               "int64": TensorProto.INT64, "int32": TensorProto.INT32,
               "uint8": TensorProto.UINT8, "int8": TensorProto.INT8}


def _topk(dtype: str) -> Case:
    """TopK over every axis of a rank-4 tensor (channels-last on the GPU) and a rank-2
    one, largest and smallest, k of 1, some and all, with many ties (and NaN, ±0 and ±inf
    in float data); a vector of lengths sorted largest first, as piper's GRU blocks do."""
    def case() -> tuple[onnx.ModelProto, Feeds]:
        n = Net(f"topk_{dtype}")
        x = n.input("x", (2, 5, 3, 4), _TOPK_TYPES[dtype])
        m = n.input("m", (3, 9), _TOPK_TYPES[dtype])
        lens = n.input("lens", (6,), TensorProto.INT64)
        outs: list[str] = []
        for axis, k, largest in ((1, 3, 1), (1, 5, 0), (3, 2, 1), (0, 1, 0), (2, 3, 1)):
            outs += n.op("TopK", [x, n.shape_const([k])], n_out=2, axis=axis, largest=largest)
        for k, largest in ((1, 1), (4, 0), (9, 1), (9, 0)):
            outs += n.op("TopK", [m, n.shape_const([k])], n_out=2, axis=-1, largest=largest)
        outs += n.op("TopK", [lens, n.shape_const([6])], n_out=2, axis=-1, largest=1)
        r = _rng(11)
        if dtype.startswith("float"):
            vx = np.round(r.standard_normal((2, 5, 3, 4)) * 2) / 2  # ties
            vm = np.round(r.standard_normal((3, 9)))
            vm[0, [1, 4]] = np.nan
            vm[1, :4] = [np.inf, -np.inf, 0.0, -0.0]
            vm[2, [0, 3, 8]] = np.nan
            vx[0, :, 1, 2] = np.nan
        else:
            vx, vm = r.integers(0, 4, (2, 5, 3, 4)), r.integers(-3, 3, (3, 9))
            if dtype[0] == "u":
                vm = vm + 3
        return n.model(outs), {"x": vx.astype(dtype), "m": vm.astype(dtype),
                               "lens": np.array([7, 3, 9, 3, 1, 9], np.int64)}

    return case


def _quantize() -> tuple[onnx.ModelProto, Feeds]:
    """QuantizeLinear per tensor, per axis of a channels-last tensor and per block, to every
    integer type, with ties (half to even), saturation and ±inf; DequantizeLinear of the
    results and of int32; float16 scales and outputs."""
    n = Net("quantize")
    x = n.input("x", (2, 4, 3, 5))
    v = n.input("v", (6, 8))
    h = n.input("h", (6, 8), TensorProto.FLOAT16)
    i32 = n.input("i32", (6, 8), TensorProto.INT32)
    r = _rng(21)
    per_c = n.const((0.05 + r.random(4) * 0.2).astype(np.float32))
    outs = [n.op("QuantizeLinear", [x, n.const(np.float32(0.1)), n.const(np.uint8(128))]),
            n.op("QuantizeLinear", [x, per_c, n.const(np.array([0, -3, 5, 127], np.int8))],
                 axis=1),
            n.op("QuantizeLinear", [v, n.const(np.float32(0.002)),
                                    n.const(np.int16(-7))]),
            n.op("QuantizeLinear", [v, n.const(np.float32(0.5))]),  # uint8, zero point 0
            n.op("QuantizeLinear", [v, n.const((0.1 + r.random((6, 3))).astype(np.float32)),
                                    n.const(r.integers(0, 9, (6, 3)).astype(np.uint16))],
                 axis=1, block_size=3),
            n.op("QuantizeLinear", [h, n.const(np.float16(0.25)), n.const(np.int8(1))])]
    q8 = n.op("QuantizeLinear", [x, per_c, n.const(np.array([0, -3, 5, 127], np.int8))],
              axis=1)
    outs += [n.op("DequantizeLinear", [q8, per_c, n.const(np.array([0, -3, 5, 127], np.int8))],
                  axis=1),
             n.op("DequantizeLinear", [outs[0], n.const(np.float32(0.1)),
                                       n.const(np.uint8(128))]),
             n.op("DequantizeLinear", [i32, n.const(np.float32(1e-3))]),
             n.op("DequantizeLinear", [outs[3], n.const(np.float16(0.3))]),
             n.op("DequantizeLinear", [outs[2], n.const(np.array([0.7], np.float32)),
                                       n.const(np.array([3], np.int16))])]
    vx = r.standard_normal((2, 4, 3, 5)).astype(np.float32) * 8
    vx[0, 0, 0, :] = [0.05, 0.15, -0.25, np.inf, -np.inf]  # ties at scale 0.1, saturation
    vv = (r.standard_normal((6, 8)) * 40).astype(np.float32)
    vv[0, :4] = [0.25, 0.75, -1.25, 1e9]  # ties at scale 0.5
    vh = np.clip(vv / 30, -1e4, 1e4).astype(np.float16)
    vi = r.integers(-(1 << 30), 1 << 30, (6, 8)).astype(np.int32)
    return n.model(outs, opset=21), {"x": vx, "v": vv, "h": vh, "i32": vi}


def _dynamic_quantize() -> tuple[onnx.ModelProto, Feeds]:
    """DynamicQuantizeLinear of mixed-sign, all-positive and all-zero data (scale 1)."""
    n = Net("dynamic_quantize")
    a = n.input("a", (3, 4, 5, 6))
    b = n.input("b", (7, 9))
    z = n.input("z", (4,))
    outs: list[str] = []
    for t in (a, b, z):
        outs += n.op("DynamicQuantizeLinear", [t], n_out=3)
    r = _rng(22)
    return n.model(outs), {"a": r.standard_normal((3, 4, 5, 6)).astype(np.float32),
                           "b": (r.random((7, 9)) * 3 + 1).astype(np.float32),
                           "z": np.zeros(4, np.float32)}


def _conv3d() -> tuple[onnx.ModelProto, Feeds]:
    """A general 3-D convolution (groups, strides, pads, dilations, bias, a fused Relu and
    per-channel Add): the direct kernel."""
    n = Net("conv3d", seed=6)
    x = n.input("x", (2, 4, 5, 6, 7))
    c = n.op("Conv", [x, n.weight(6, 2, 3, 3, 2), n.weight(6, scale=0.1)], group=2,
             strides=[2, 1, 1], pads=[1, 2, 0, 1, 2, 1], dilations=[1, 2, 1])
    shift = n.const(np.linspace(-0.5, 0.5, 6, dtype=np.float32).reshape(6, 1, 1, 1))
    y = n.op("Relu", [n.op("Add", [c, shift])])
    return n.model([y]), {"x": _rng(7).standard_normal((2, 4, 5, 6, 7)).astype(np.float32)}


def _conv3d_flat() -> tuple[onnx.ModelProto, Feeds]:
    """3-D convolutions of depth 1 under 1×k×k filters (RivaGAN's), run as 2-D ones: bias,
    a fused rank-5 extra input and Tanh."""
    n = Net("conv3d_flat", seed=8)
    x = n.input("x", (1, 3, 1, 9, 10))
    a = n.op("Conv", [x, n.weight(8, 3, 1, 5, 5), n.weight(8, scale=0.1)],
             pads=[0, 2, 2, 0, 2, 2])
    a = n.op("Tanh", [n.op("Add", [a, n.const(np.linspace(-1, 1, 8, dtype=np.float32)
                                               .reshape(1, 8, 1, 1, 1))])])
    b = n.op("Conv", [a, n.weight(3, 8, 1, 3, 3)], pads=[0, 1, 1, 0, 1, 1], strides=[1, 2, 2])
    return n.model([a, b]), {"x": _rng(9).standard_normal((1, 3, 1, 9, 10)).astype(np.float32)}


def _qgemm() -> tuple[onnx.ModelProto, Feeds]:
    """The int8 products: QLinearMatMul (batched, per-column weight scale and zero point,
    uint8 out), MatMulInteger (per-row activation zero point, int32 out), and onnxruntime's
    dynamic pattern (DynamicQuantizeLinear → MatMulInteger → Cast → Mul by both scales: a
    QGemm whose x_scale is computed at run time)."""
    n = Net("qgemm")
    a = n.input("a", (2, 5, 8), TensorProto.UINT8)
    a2 = n.input("a2", (5, 8), TensorProto.UINT8)
    x = n.input("x", (4, 8))
    r = _rng(23)
    w8 = n.const(r.integers(-128, 128, (8, 6)).astype(np.int8))
    y = n.op("QLinearMatMul", [a, n.const(np.float32(0.05)), n.const(np.uint8(120)), w8,
                               n.const((0.01 + r.random(6) * 0.02).astype(np.float32)),
                               n.const(np.zeros(6, np.int8)), n.const(np.float32(0.3)),
                               n.const(np.uint8(100))])
    acc = n.op("MatMulInteger", [a2, n.const(r.integers(0, 256, (8, 6)).astype(np.uint8)),
                                 n.const(r.integers(0, 256, 5).astype(np.uint8)),
                                 n.const(r.integers(0, 256, 6).astype(np.uint8))])
    q, q_scale, q_zp = n.op("DynamicQuantizeLinear", [x], n_out=3)
    w_scale = n.const(np.float32(0.02))
    dyn = n.op("MatMulInteger", [q, n.const(r.integers(-128, 128, (8, 6)).astype(np.int8)),
                                 q_zp])
    real = n.op("Mul", [n.op("Cast", [dyn], to=TensorProto.FLOAT),
                        n.op("Mul", [q_scale, w_scale])])
    return n.model([y, acc, real], opset=21), {
        "a": r.integers(0, 256, (2, 5, 8)).astype(np.uint8),
        "a2": r.integers(0, 256, (5, 8)).astype(np.uint8),
        "x": r.standard_normal((4, 8)).astype(np.float32)}


def _ms_qgemm() -> tuple[onnx.ModelProto, Feeds]:
    """com.microsoft QGemm: transposed constant B, int32 bias, float output (no y_scale),
    and a second one requantized to int8."""
    r = _rng(24)
    inits = [onnx.numpy_helper.from_array(v, name) for name, v in (
        ("a_s", np.float32(0.04)), ("a_z", np.uint8(130)),
        ("b", r.integers(-128, 128, (6, 8)).astype(np.int8)),
        ("b_s", np.float32(0.03)), ("b_z", np.int8(0)),
        ("c", r.integers(-500, 500, 6).astype(np.int32)),
        ("y_s", np.float32(0.2)), ("y_z", np.int8(-3)))]
    ms = "com.microsoft"
    nodes = [onnx.helper.make_node("QGemm", ["a", "a_s", "a_z", "b", "b_s", "b_z", "c"],
                                   ["f"], domain=ms, transB=1),
             onnx.helper.make_node("QGemm", ["a", "a_s", "a_z", "b", "b_s", "b_z", "c", "y_s",
                                             "y_z"], ["q"], domain=ms, transB=1)]
    graph = onnx.helper.make_graph(
        nodes, "ms_qgemm", [onnx.helper.make_tensor_value_info("a", TensorProto.UINT8, [5, 8])],
        [onnx.helper.make_tensor_value_info("f", TensorProto.FLOAT, [5, 6]),
         onnx.helper.make_tensor_value_info("q", TensorProto.INT8, [5, 6])], inits)
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 17),
                                                         onnx.helper.make_opsetid(ms, 1)])
    model.ir_version = 8
    return model, {"a": r.integers(0, 256, (5, 8)).astype(np.uint8)}


def _random_trees(r: np.random.Generator, trees: int, depth: int, features: int,
                  targets: int) -> tuple[dict[str, list], dict[str, list]]:
    """Full binary trees of ``depth`` over random features and thresholds (every branch
    mode, some nodes sending NaN to their true child), leaves weighting random targets:
    (node attributes, leaf attributes) of ai.onnx.ml's tree ensembles."""
    modes = ["BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT", "BRANCH_EQ", "BRANCH_NEQ"]
    nodes: dict[str, list] = {k: [] for k in ("nodes_treeids", "nodes_nodeids",
                                              "nodes_featureids", "nodes_values", "nodes_modes",
                                              "nodes_truenodeids", "nodes_falsenodeids",
                                              "nodes_missing_value_tracks_true")}
    leaves: dict[str, list] = {"treeids": [], "nodeids": [], "ids": [], "weights": []}
    inner = 2 ** depth - 1
    for t in range(trees):
        for i in range(2 ** (depth + 1) - 1):
            leaf = i >= inner
            nodes["nodes_treeids"].append(t)
            nodes["nodes_nodeids"].append(i)
            nodes["nodes_featureids"].append(0 if leaf else int(r.integers(features)))
            nodes["nodes_values"].append(0.0 if leaf else float(np.round(r.normal(), 1)))
            nodes["nodes_modes"].append("LEAF" if leaf else modes[int(r.integers(6))])
            nodes["nodes_truenodeids"].append(0 if leaf else 2 * i + 1)
            nodes["nodes_falsenodeids"].append(0 if leaf else 2 * i + 2)
            nodes["nodes_missing_value_tracks_true"].append(int(r.integers(2)))
            if leaf:
                for j in r.choice(targets, int(r.integers(1, 3)), replace=False):
                    leaves["treeids"].append(t)
                    leaves["nodeids"].append(i)
                    leaves["ids"].append(int(j))
                    leaves["weights"].append(float(np.float32(r.normal())))
    return nodes, leaves


def _trees() -> tuple[onnx.ModelProto, Feeds]:
    """A four-class TreeEnsembleClassifier (SOFTMAX, base values) and a two-target
    TreeEnsembleRegressor (AVERAGE, LOGISTIC), over features with NaN and values equal to
    thresholds."""
    r = _rng(26)
    nodes, leaves = _random_trees(r, 6, 3, 5, 4)
    clf = onnx.helper.make_node(
        "TreeEnsembleClassifier", ["x"], ["label", "probs"], domain="ai.onnx.ml",
        classlabels_int64s=[10, 20, 30, 40], post_transform="SOFTMAX",
        base_values=[0.1, -0.2, 0.0, 0.3], class_treeids=leaves["treeids"],
        class_nodeids=leaves["nodeids"], class_ids=leaves["ids"],
        class_weights=leaves["weights"], **nodes)
    nodes, leaves = _random_trees(r, 5, 2, 5, 2)
    reg = onnx.helper.make_node(
        "TreeEnsembleRegressor", ["x"], ["values"], domain="ai.onnx.ml", n_targets=2,
        aggregate_function="AVERAGE", post_transform="LOGISTIC",
        target_treeids=leaves["treeids"], target_nodeids=leaves["nodeids"],
        target_ids=leaves["ids"], target_weights=leaves["weights"], **nodes)
    info = onnx.helper.make_tensor_value_info
    graph = onnx.helper.make_graph(
        [clf, reg], "trees", [info("x", TensorProto.FLOAT, [7, 5])],
        [info("label", TensorProto.INT64, [7]), info("probs", TensorProto.FLOAT, [7, 4]),
         info("values", TensorProto.FLOAT, [7, 2])])
    model = onnx.helper.make_model(graph, opset_imports=[
        onnx.helper.make_opsetid("", 17), onnx.helper.make_opsetid("ai.onnx.ml", 3)])
    model.ir_version = 8
    x = np.round(r.normal(size=(7, 5)), 1).astype(np.float32)  # ties with the thresholds
    x[1, :3] = np.nan
    return model, {"x": x}


EXACT_CASES: dict[str, Case] = {**{f"topk_{t}": _topk(t) for t in _TOPK_TYPES},
                                "quantize": _quantize, "dynamic_quantize": _dynamic_quantize,
                                "qgemm": _qgemm, "ms_qgemm": _ms_qgemm}
# exact cases over float data, run again in fp16 and bf16 builds (autocast: the data, and
# DynamicQuantizeLinear's scale, become half types)
FLOAT_CASES: dict[str, Case] = {"topk_float32_half": _topk("float32"),
                                "dynamic_quantize_half": _dynamic_quantize}
# float32 recurrences and direct convolutions summed in another order than the CPU
# backend's: 1e-5 relative; cuDNN convolutions (TF32: the GRU model's, the 2-D candidates of
# flat 3-D convolutions): 1e-2 (the H200 measured 4.2e-5 for the GRU model)
TOLERANT_CASES: dict[str, tuple[Case, float]] = {
    **{name: (case, 1e-5) for name, case in GRU_CASES.items()}, "gru_model": (_gru_model, 1e-2),
    "conv3d": (_conv3d, 1e-5), "conv3d_flat": (_conv3d_flat, 1e-2),
    "dq_lstm_bidirectional": (_dq_lstm("bidirectional", False), 1e-5),
    "dq_lstm_reverse_states": (_dq_lstm("reverse", True), 1e-5),
    # float64 sums in another order, float32 exp: labels exact, scores within 1e-6
    "trees": (_trees, 1e-6)}
