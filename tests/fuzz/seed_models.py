"""Small ONNX models whose loadables seed the fuzzers: one per kernel family, built with the
builder's default passes, layouts and tactic choice (``scripts/fuzz.py --make-seeds``)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx
from onnx import helper

from tests.oracle import make_model

F = np.float32


def _conv_net() -> onnx.ModelProto:
    rng = np.random.default_rng(1)
    return make_model(
        [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
         helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
         helper.make_node("Conv", ["r1", "w2"], ["c2"], group=16, pads=[1, 1, 1, 1],
                          name="dw"),
         helper.make_node("MaxPool", ["c2"], ["p"], kernel_shape=[2, 2], strides=[2, 2],
                          name="pool"),
         helper.make_node("GlobalAveragePool", ["p"], ["g"], name="gap"),
         helper.make_node("Flatten", ["g"], ["f"], name="flat"),
         helper.make_node("Gemm", ["f", "wf", "bf"], ["y"], transB=1, name="fc")],
        {"x": (F, [1, 3, 8, 8])}, ["y"],
        {"w1": rng.standard_normal((16, 3, 3, 3)).astype(F), "b1": np.zeros(16, F),
         "w2": rng.standard_normal((16, 1, 3, 3)).astype(F),
         "wf": rng.standard_normal((4, 16)).astype(F), "bf": np.ones(4, F)})


def _attention_block() -> onnx.ModelProto:
    rng = np.random.default_rng(2)
    return make_model(
        [helper.make_node("MatMul", ["x", "wq"], ["q"], name="q"),
         helper.make_node("Transpose", ["x"], ["xt"], perm=[0, 2, 1], name="t"),
         helper.make_node("MatMul", ["q", "xt"], ["s"], name="scores"),
         helper.make_node("Softmax", ["s"], ["p"], axis=-1, name="softmax"),
         helper.make_node("MatMul", ["p", "x"], ["o"], name="ctx"),
         helper.make_node("LayerNormalization", ["o", "g", "b"], ["n"], axis=-1, name="ln"),
         helper.make_node("ReduceMean", ["n"], ["m"], axes=[-1], keepdims=1, name="mean"),
         helper.make_node("Sub", ["n", "m"], ["y"], name="center")],
        {"x": (F, [2, 5, 8])}, ["y"],
        {"wq": rng.standard_normal((8, 8)).astype(F), "g": np.ones(8, F),
         "b": np.zeros(8, F)})


def _shapes() -> onnx.ModelProto:
    rng = np.random.default_rng(3)
    return make_model(
        [helper.make_node("Concat", ["x", "x2"], ["c"], axis=1, name="cat"),
         helper.make_node("Reshape", ["c", "shp"], ["r"], name="reshape"),
         helper.make_node("Gather", ["emb", "ids"], ["e"], axis=0, name="gather"),
         helper.make_node("Slice", ["r", "st", "en", "axs"], ["s"], name="slice"),
         helper.make_node("Pad", ["s", "pads"], ["p"], name="pad"),
         helper.make_node("Split", ["p"], ["a", "b"], axis=1, num_outputs=2, name="split"),
         helper.make_node("Mul", ["a", "b"], ["m"], name="mul"),
         helper.make_node("Add", ["m", "e"], ["y"], name="add"),
         helper.make_node("Tanh", ["y"], ["z"], name="tanh")],
        {"x": (F, [2, 3, 4]), "x2": (F, [2, 5, 4]), "ids": (np.int64, [2])}, ["z"],
        {"shp": np.array([2, 32], np.int64), "emb": rng.standard_normal((10, 8)).astype(F),
         "st": np.array([0], np.int64), "en": np.array([14], np.int64),
         "axs": np.array([1], np.int64), "pads": np.array([0, 1, 0, 1], np.int64)},
        opset=18)


def _resize_pointwise() -> onnx.ModelProto:
    return make_model(
        [helper.make_node("Resize", ["x", "", "sc"], ["r"], mode="nearest", name="up"),
         helper.make_node("Sigmoid", ["r"], ["s"], name="sig"),
         helper.make_node("Mul", ["r", "s"], ["m"], name="swish"),
         helper.make_node("AveragePool", ["m"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1],
                          name="avg")],
        {"x": (F, [1, 4, 4, 4])}, ["y"], {"sc": np.array([1, 1, 2, 2], F)})


def _index_ops() -> onnx.ModelProto:
    """The numpy-reference ops whose indices are data (issue 29): each layer's rule and
    each kernel's run-time bound check meet mutated metadata here."""
    i64 = np.int64
    return make_model(
        [helper.make_node("TopK", ["x", "k"], ["v", "i"], axis=1, name="topk"),
         helper.make_node("GatherElements", ["x", "i"], ["g"], axis=1, name="gather_el"),
         helper.make_node("Einsum", ["g", "v"], ["e"], equation="ij,kj->ik", name="einsum"),
         helper.make_node("ScatterElements", ["x", "i", "v"], ["s"], axis=1,
                          reduction="add", name="scatter_el"),
         helper.make_node("GatherND", ["s", "nd"], ["n"], name="gather_nd"),
         helper.make_node("OneHot", ["i", "depth", "onoff"], ["oh"], axis=-1, name="onehot"),
         helper.make_node("ReduceSum", ["oh", "ax"], ["hits"], keepdims=0, name="hits"),
         helper.make_node("QuantizeLinear", ["s", "qs", "qz"], ["q"], name="quant"),
         helper.make_node("DequantizeLinear", ["q", "qs", "qz"], ["dq"], name="dequant"),
         helper.make_node("Add", ["dq", "hits"], ["y"], name="add")],
        {"x": (F, [2, 6])}, ["y", "e", "n"],
        {"k": np.array([3], i64), "nd": np.array([[0, 5], [1, 0]], i64),
         "depth": np.array(6, i64), "onoff": np.array([0, 1], F), "ax": np.array([1], i64),
         "qs": np.array(0.05, F), "qz": np.array(128, np.uint8)}, opset=18)


def _sampling_ops() -> onnx.ModelProto:
    """Sampling, pooling-index, spectral and attention references (issue 29's rules)."""
    rng = np.random.default_rng(4)
    i64 = np.int64
    return make_model(
        [helper.make_node("AffineGrid", ["theta", "size"], ["grid"], name="affine"),
         helper.make_node("GridSample", ["x", "grid"], ["gs"], name="sample"),
         helper.make_node("MaxPool", ["gs"], ["mp", "mi"], kernel_shape=[2, 2],
                          strides=[2, 2], name="pool"),
         helper.make_node("MaxUnpool", ["mp", "mi"], ["un"], kernel_shape=[2, 2],
                          strides=[2, 2], name="unpool"),
         helper.make_node("RoiAlign", ["un", "rois", "bi"], ["roi"], output_height=2,
                          output_width=2, name="roialign"),
         helper.make_node("Reshape", ["un", "sq"], ["mats"], name="mats"),
         helper.make_node("Det", ["mats"], ["det"], name="det"),
         helper.make_node("DFT", ["sig", "", "dax"], ["spec"], name="dft"),
         helper.make_node("RotaryEmbedding", ["q", "cos", "sin"], ["rq"], name="rope"),
         helper.make_node("Attention", ["rq", "q", "q"], ["att"], is_causal=1, name="attn")],
        {"theta": (F, [1, 2, 3]), "x": (F, [1, 1, 4, 4]), "sig": (F, [1, 8, 1]),
         "q": (F, [1, 2, 3, 4])}, ["roi", "det", "spec", "att"],
        {"size": np.array([1, 1, 4, 4], i64), "rois": np.array([[0, 0, 3, 3], [1, 1, 2, 3]], F),
         "bi": np.array([0, 0], i64), "sq": np.array([4, 2, 2], i64),
         "dax": np.array(1, i64), "cos": rng.standard_normal((1, 3, 2)).astype(F),
         "sin": rng.standard_normal((1, 3, 2)).astype(F)}, opset=23)


SEED_MODELS: dict[str, Callable[[], onnx.ModelProto]] = {
    "conv_net": _conv_net, "attention": _attention_block, "shapes": _shapes,
    "resize_pointwise": _resize_pointwise, "index_ops": _index_ops,
    "sampling_ops": _sampling_ops,
}
