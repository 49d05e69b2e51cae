"""``pydla check --target=cuda`` on the ops issue 26's coverage work gave CUDA kernels
(GRU, TopK, the quantize family): what runs and what is still refused, with its reason,
known without a GPU."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from pydla.backends.cuda.coverage import CUDA_OPS, check_cuda_model
from pydla.dla.checker import LayerVerdict


def _verdicts(nodes: list[onnx.NodeProto], inputs: list[onnx.ValueInfoProto],
              outputs: list[str], inits: list[onnx.TensorProto]) -> dict[str, LayerVerdict]:
    graph = helper.make_graph(nodes, "g", inputs,
                              [helper.make_empty_tensor_value_info(o) for o in outputs], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    model.ir_version = 9
    return {v.name: v for v in check_cuda_model(model).layers}


def _gru_weights(prefix: str, dirs: int = 1) -> list[onnx.TensorProto]:
    rng = np.random.default_rng(0)
    return [numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32),
                                    f"{prefix}{name}")
            for name, shape in (("w", (dirs, 12, 3)), ("r", (dirs, 12, 4)),
                                ("b", (dirs, 24)))]


def test_gru_runs_with_run_time_lengths_and_refuses_what_its_kernel_does_not() -> None:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [5, 2, 3])
    lens = helper.make_tensor_value_info("lens", TensorProto.INT32, [2])
    b_in = helper.make_tensor_value_info("b_in", TensorProto.FLOAT, [1, 24])
    gru = helper.make_node
    nodes = [gru("GRU", ["x", "a_w", "a_r", "a_b", "lens"], ["ya"], name="bidir_lens",
                 hidden_size=4, direction="bidirectional", linear_before_reset=1),
             gru("GRU", ["x", "b_w", "b_r", "b_in"], ["yb"], name="bias_input",
                 hidden_size=4),
             gru("GRU", ["x", "c_w", "c_r", "c_b"], ["yc"], name="relu", hidden_size=4,
                 activations=["Relu", "Tanh"])]
    inits = [*_gru_weights("a_", 2), *_gru_weights("b_")[:2], *_gru_weights("c_")]
    by_name = _verdicts(nodes, [x, lens, b_in], ["ya", "yb", "yc"], inits)
    assert "GRU" in CUDA_OPS
    assert by_name["bidir_lens"].supported, by_name["bidir_lens"].refusal
    bias = by_name["bias_input"].refusal
    assert bias is not None and bias.rule == "cuda.shape" and "constant weights" in bias.reason
    relu = by_name["relu"].refusal
    assert relu is not None and relu.rule == "cuda.shape"
    assert "default ones (sigmoid, tanh)" in relu.reason


def test_topk_runs_on_float_and_integer_tensors() -> None:
    k = numpy_helper.from_array(np.array([2], np.int64), "k")
    nodes = [helper.make_node("TopK", ["x", "k"], ["v", "i"], name="topk_float", axis=1),
             helper.make_node("TopK", ["n", "k"], ["nv", "ni"], name="topk_int64",
                              largest=0)]
    by_name = _verdicts(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                              [2, 5, 3, 3]),
                                helper.make_tensor_value_info("n", TensorProto.INT64, [6])],
                        ["v", "i", "nv", "ni"], [k])
    assert "TopK" in CUDA_OPS
    assert all(by_name[n].supported for n in ("topk_float", "topk_int64")), by_name


def test_quantize_family_and_integer_products_run() -> None:
    scale = numpy_helper.from_array(np.array([0.1, 0.2, 0.3], np.float32), "scale")
    zp = numpy_helper.from_array(np.array([1, 2, 3], np.int8), "zp")
    nodes = [helper.make_node("QuantizeLinear", ["x", "scale", "zp"], ["q"], name="quantize",
                              axis=1),
             helper.make_node("DequantizeLinear", ["q", "scale", "zp"], ["d"],
                              name="dequantize", axis=1),
             helper.make_node("DynamicQuantizeLinear", ["d"], ["u", "s", "z"],
                              name="dynamic")]
    w = numpy_helper.from_array(np.ones((16, 5), np.int8), "w")
    nodes.append(helper.make_node("Reshape", ["u", "shape"], ["u2"], name="flat"))
    nodes.append(helper.make_node("MatMulInteger", ["u2", "w", "z"], ["acc"], name="qgemm"))
    shape = numpy_helper.from_array(np.array([6, 16], np.int64), "shape")
    by_name = _verdicts(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                              [2, 3, 4, 4])],
                        ["s", "acc"], [scale, zp, w, shape])
    assert {"QGemm", "QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear"} <= CUDA_OPS
    for name in ("quantize", "dequantize", "dynamic", "qgemm"):
        assert by_name[name].supported, (name, by_name[name].refusal)


def test_tree_ensemble_rules() -> None:
    """Multi-class classifiers and regressors run; MIN/MAX, PROBIT and two-class rules are
    refused with the reason, by the same rules the kernel applies at bind."""
    from pydla.backends.cuda.tree_rules import tree_ensemble_refusal

    assert "TreeEnsemble" in CUDA_OPS
    runs = {"kind": "classifier", "n_targets": 4, "aggregate": "SUM",
            "post_transform": "SOFTMAX"}
    assert tree_ensemble_refusal(runs) is None
    assert tree_ensemble_refusal({**runs, "kind": "regressor", "aggregate": "AVERAGE",
                                  "post_transform": "LOGISTIC", "n_targets": 2}) is None
    for change, words in (({"aggregate": "MAX"}, "aggregate MAX"),
                          ({"post_transform": "PROBIT"}, "post_transform PROBIT"),
                          ({"n_targets": 2}, "two-class classifier"),
                          ({"kind": "regressor", "n_targets": 1}, "single-target regressor")):
        why = tree_ensemble_refusal({**runs, **change})
        assert why is not None and words in why, (change, why)
