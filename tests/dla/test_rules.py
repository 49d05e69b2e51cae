"""Every DLA rule, with a model just inside and one just outside its documented limit.

Each case is one layer (plus the constants it needs) on a small input; ``inside`` must be
supported, ``outside`` refused by exactly the named rule. A test also fails when a rule of
``pydla.dla.rules`` has no case here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from pydla.dla import check_model
from pydla.dla.rules import RULES
from pydla.errors import NotConstantError, ShapeError

F = TensorProto.FLOAT


@dataclass
class Layer:
    """One ONNX node on input ``x`` (shape ``shape``), with constant inputs."""

    op: str
    shape: tuple[int, ...]
    attrs: dict[str, Any] = field(default_factory=dict)
    consts: list[np.ndarray | None] = field(default_factory=list)
    x_type: int = F
    second_input: tuple[int, ...] | None = None  # an activation as input 1
    second_type: int = F
    precision: str = "fp16"
    cast_after: bool = False

    def model(self) -> onnx.ModelProto:
        inputs = [helper.make_tensor_value_info("x", self.x_type, list(self.shape))]
        names, inits = ["x"], []
        if self.second_input is not None:
            inputs.append(helper.make_tensor_value_info("x2", self.second_type,
                                                        list(self.second_input)))
            names.append("x2")
        for i, c in enumerate(self.consts):
            if c is None:
                names.append("")
                continue
            inits.append(numpy_helper.from_array(np.asarray(c), f"c{i}"))
            names.append(f"c{i}")
        nodes = [helper.make_node(self.op, names, ["y"], name="layer", **self.attrs)]
        out = "y"
        if self.cast_after:
            nodes.append(helper.make_node("Cast", ["y"], ["z"], to=F, name="cast"))
            out = "z"
        graph = helper.make_graph(nodes, "g", inputs,
                                  [helper.make_tensor_value_info(out, TensorProto.UNDEFINED,
                                                                 None)], inits)
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _w(*shape: int) -> np.ndarray:
    return np.random.default_rng(0).standard_normal(shape).astype(np.float32)


def conv(k: int = 3, stride: int = 1, pad: int = 1, dil: int = 1, oc: int = 8, group: int = 1,
         c: int = 8, hw: int = 40) -> Layer:
    return Layer("Conv", (1, c, hw, hw), dict(strides=[stride] * 2, pads=[pad] * 4,
                                               dilations=[dil] * 2, group=group),
                 [_w(oc, c // group, k, k)])


def deconv(k: tuple[int, int] = (2, 2), stride: tuple[int, int] = (2, 2), pad: int = 0,
           group: int = 1, dil: int = 1, oc: int = 8) -> Layer:
    return Layer("ConvTranspose", (1, 8, 16, 16),
                 dict(strides=list(stride), pads=[pad] * 4, group=group,
                      dilations=[dil] * 2), [_w(8, oc // group, *k)])


def pool(op: str = "MaxPool", k: int = 2, stride: int = 2, pad: int = 0) -> Layer:
    return Layer(op, (1, 8, 40, 40), dict(kernel_shape=[k, k], strides=[stride] * 2,
                                           pads=[pad] * 4))


def resize(scale: float, mode: str = "nearest", ctm: str = "asymmetric",
           nearest: str = "floor", scales: list[float] | None = None) -> Layer:
    attrs: dict[str, Any] = dict(mode=mode, coordinate_transformation_mode=ctm)
    if mode == "nearest":
        attrs["nearest_mode"] = nearest
    return Layer("Resize", (1, 4, 4, 4), attrs,
                 [None, np.array(scales or [1, 1, scale, scale], np.float32)])


def sl(starts: list[int], ends: list[int], steps: list[int] | None = None,
       shape: tuple[int, ...] = (2, 8, 8, 8)) -> Layer:
    consts = [np.array(starts), np.array(ends), np.arange(len(starts))]
    if steps is not None:
        consts.append(np.array(steps))
    return Layer("Slice", shape, {}, consts)


def softmax(shape: tuple[int, ...], axis: int) -> Layer:
    return Layer("Softmax", shape, dict(axis=axis))


# rule → (inside, outside): the outside model breaks exactly that rule.
CASES: dict[str, tuple[Layer, Layer]] = {
    "general.precision": (Layer("Relu", (1, 8, 4, 4), precision="fp16"),
                          Layer("Relu", (1, 8, 4, 4), precision="fp32")),
    "general.dtype": (Layer("Abs", (1, 8, 4, 4)),
                      Layer("Abs", (1, 8, 4, 4), x_type=TensorProto.INT32)),
    "general.batch": (Layer("Relu", (4096, 2, 1, 1)), Layer("Relu", (4097, 2, 1, 1))),
    "general.dims": (Layer("Relu", (1, 8192, 1, 1)), Layer("Relu", (1, 8193, 1, 1))),
    "general.layer": (Layer("Relu", (1, 8, 4, 4)),
                      Layer("Einsum", (1, 8, 4, 4), dict(equation="nchw->nhwc"))),
    "activation.types": (Layer("LeakyRelu", (1, 8, 4, 4), dict(alpha=0.1)),
                         Layer("HardSwish", (1, 8, 4, 4))),
    "activation.rank": (Layer("Sigmoid", (1, 8, 4, 4)), Layer("Sigmoid", (1, 8, 4))),
    "prelu.slope": (Layer("PRelu", (1, 8, 4, 4), consts=[np.full((8, 1, 1), 0.1, np.float32)]),
                    Layer("PRelu", (1, 8, 4, 4), second_input=(1, 8, 4, 4))),
    "comparison.precision": (
        Layer("Greater", (1, 8, 4, 4), consts=[np.zeros((1,), np.float32)], precision="int8",
              cast_after=True),
        Layer("Greater", (1, 8, 4, 4), consts=[np.zeros((1,), np.float32)], precision="fp16",
              cast_after=True)),
    "concat.axis": (Layer("Concat", (1, 8, 4, 4), dict(axis=1), [_w(1, 2, 4, 4)]),
                    Layer("Concat", (1, 8, 4, 4), dict(axis=3), [_w(1, 8, 4, 2)])),
    "concat.inputs": (Layer("Concat", (1, 8, 4, 4), dict(axis=1), [_w(1, 2, 4, 4)]),
                      Layer("Concat", (1, 8, 4, 4), dict(axis=1))),
    "conv.rank": (conv(), Layer("Conv", (1, 8, 40), dict(pads=[1, 1]), [_w(8, 8, 3)])),
    "conv.kernel": (conv(k=32, pad=0), conv(k=33, pad=0)),
    "conv.stride": (conv(stride=8), conv(stride=9)),
    "conv.padding": (conv(k=32, pad=31), conv(k=3, pad=3)),
    "conv.dilation": (conv(k=2, dil=32, pad=0, hw=40), conv(k=2, dil=33, pad=0, hw=40)),
    "conv.output_maps": (conv(k=1, pad=0, oc=8192, c=1, hw=2),
                         conv(k=1, pad=0, oc=8193, c=1, hw=2)),
    "conv.groups": (conv(k=1, pad=0, oc=8192, c=8192, group=8192, hw=1),
                    conv(k=1, pad=0, oc=8193, c=8193, group=8193, hw=1)),
    "conv.weights": (conv(), Layer("Conv", (1, 8, 8, 8), {}, [],
                                   second_input=(8, 8, 3, 3))),
    "fc.rank": (Layer("Gemm", (2, 16), dict(transB=1), [_w(10, 16)]),
                Layer("MatMul", (2, 5, 16), {}, [_w(16, 10)])),
    "fc.weights": (Layer("MatMul", (2, 16), {}, [_w(16, 10)]),
                   Layer("MatMul", (2, 16), {}, [], second_input=(16, 10))),
    "deconv.rank": (deconv(), Layer("ConvTranspose", (1, 8, 16), dict(strides=[2]),
                                    [_w(8, 8, 2)])),
    "deconv.kernel": (deconv(k=(1, 64), stride=(1, 1)), deconv(k=(64, 64), stride=(1, 1))),
    "deconv.stride": (deconv(k=(2, 2), stride=(32, 32)), deconv(k=(2, 2), stride=(33, 33))),
    "deconv.padding": (deconv(k=(3, 3), stride=(2, 2), pad=0),
                       deconv(k=(3, 3), stride=(2, 2), pad=1)),
    "deconv.groups": (deconv(group=1), deconv(group=2)),
    "deconv.dilation": (deconv(dil=1), deconv(dil=2)),
    "deconv.output_maps": (Layer("ConvTranspose", (1, 1, 2, 2), {}, [_w(1, 8192, 1, 1)]),
                           Layer("ConvTranspose", (1, 1, 2, 2), {}, [_w(1, 8193, 1, 1)])),
    "eltwise.ops": (Layer("Pow", (1, 8, 4, 4), consts=[np.full((1,), 2.0, np.float32)]),
                    Layer("Mod", (1, 8, 4, 4), dict(fmod=1),
                          consts=[np.full((1,), 2.0, np.float32)])),
    "eltwise.rank": (Layer("Add", (1, 8, 4, 4), second_input=(1, 8, 1, 1)),
                     Layer("Add", (1, 8, 4, 4), second_input=(1, 1, 4, 4))),
    "lrn.window": (Layer("LRN", (1, 8, 4, 4), dict(size=9)),
                   Layer("LRN", (1, 8, 4, 4), dict(size=11))),
    "pool.rank": (pool(), Layer("MaxPool", (1, 8, 40), dict(kernel_shape=[2]))),
    "pool.window": (pool(k=8), pool(k=9)),
    "pool.stride": (pool(k=2, stride=16), pool(k=2, stride=17)),
    "pool.padding": (pool(k=8, pad=7), pool(k=8, pad=8)),
    "reduce.ops": (Layer("ReduceMax", (1, 8, 4, 4), dict(axes=[1])),
                   Layer("ReduceMean", (1, 8, 4, 4), dict(axes=[2, 3]))),
    "reduce.axes": (Layer("ReduceMax", (2, 8, 4, 4), dict(axes=[1])),
                    Layer("ReduceMax", (2, 8, 4, 4), dict(axes=[0]))),
    "resize.scales": (resize(2), resize(2, scales=[1, 2, 2, 2])),
    "resize.factor": (resize(32), resize(33)),
    "resize.mode": (resize(2, "nearest", "half_pixel", "round_prefer_ceil"),
                    resize(2, "nearest", "align_corners", "floor")),
    "scale.rank": (Layer("BatchNormalization", (1, 8, 4, 4), {}, [np.ones(8, np.float32)] * 4),
                   Layer("BatchNormalization", (1, 8, 4, 4, 2), {},
                         [np.ones(8, np.float32)] * 4)),
    "shuffle.rank": (Layer("Transpose", (1, 8, 4, 6), dict(perm=[0, 1, 3, 2])),
                     Layer("Transpose", (2, 8, 4, 6), dict(perm=[1, 0, 2, 3]))),
    "slice.stride": (sl([0, 0, 0, 0], [2, 8, 8, 8], [1, 1, 1, 1]),
                     sl([0, 0, 0, 0], [2, 8, 8, 8], [1, 2, 1, 1])),
    "slice.first_dim": (sl([0, 2, 0, 0], [2, 8, 8, 8]), sl([1, 0, 0, 0], [2, 8, 8, 8])),
    "slice.rank": (sl([0, 2, 0, 0], [2, 8, 8, 8]),
                   sl([0, 2, 0], [2, 8, 8], shape=(2, 8, 8))),
    "softmax.axis": (softmax((2, 8, 4, 4), 1), softmax((2, 8, 4, 4), 0)),
    "softmax.size": (softmax((1, 8192, 1, 1), 1), softmax((1, 1025, 2, 1), 1)),
    "unary.ops": (Layer("Abs", (1, 8, 4, 4)), Layer("Sqrt", (1, 8, 4, 4))),
    "qdq.precision": (
        Layer("QuantizeLinear", (1, 8, 4, 4), consts=[np.array(0.1, np.float32),
                                                      np.array(0, np.int8)], precision="int8"),
        Layer("QuantizeLinear", (1, 8, 4, 4), consts=[np.array(0.1, np.float32),
                                                      np.array(0, np.int8)])),
    "qdq.per_tensor": (
        Layer("QuantizeLinear", (1, 8, 4, 4), consts=[np.array(0.1, np.float32),
                                                      np.array(0, np.int8)], precision="int8"),
        Layer("QuantizeLinear", (1, 8, 4, 4), dict(axis=1),
              consts=[np.full(8, 0.1, np.float32), np.zeros(8, np.int8)], precision="int8")),
}
# Rules checked on whole networks rather than one layer (tests below).
NETWORK_RULES = {"general.dynamic", "general.loadables", "general.internal_bytes",
                 "comparison.cast", "slice.constant"}


def _verdict(layer: Layer):  # noqa: ANN202
    report = check_model(layer.model(), precision=layer.precision)
    return next(v for v in report.layers if v.name == "layer")


def test_every_rule_has_cases():
    assert set(RULES) == set(CASES) | NETWORK_RULES


@pytest.mark.parametrize("rule", sorted(CASES))
def test_inside_and_outside(rule):
    inside, outside = CASES[rule]
    ok = _verdict(inside)
    assert ok.supported, f"{rule}: the inside case was refused: {ok.refusal and ok.refusal.reason}"
    bad = _verdict(outside)
    assert not bad.supported and bad.refusal is not None
    assert bad.refusal.rule == rule, bad.refusal.reason


def test_comparison_needs_an_immediate_cast():
    inside = Layer("Less", (1, 8, 4, 4), consts=[np.zeros((1,), np.float32)],
                   precision="int8", cast_after=True)
    assert _verdict(inside).supported
    outside = Layer("Less", (1, 8, 4, 4), consts=[np.zeros((1,), np.float32)],
                    precision="int8")
    v = _verdict(outside)
    assert not v.supported and v.refusal.rule == "comparison.cast"


def test_dynamic_dims_need_shapes():
    model = Layer("Relu", (1, 8, 4, 4)).model()
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "N"
    with pytest.raises(ShapeError, match="--shapes"):
        check_model(model)
    assert check_model(model, shapes={"x": (2, 8, 4, 4)}).supported_layers == 1


def _chain(n_breaks: int, hw: int = 4, c: int = 8) -> onnx.ModelProto:
    """Relu, then ``n_breaks`` × (HardSwish, Relu): n_breaks + 1 DLA subgraphs."""
    nodes, prev = [helper.make_node("Relu", ["x"], ["r0"], name="r0")], "r0"
    for i in range(n_breaks):
        nodes.append(helper.make_node("HardSwish", [prev], [f"h{i}"], name=f"h{i}"))
        nodes.append(helper.make_node("Relu", [f"h{i}"], [f"r{i + 1}"], name=f"r{i + 1}"))
        prev = f"r{i + 1}"
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, [1, c, hw, hw])],
                              [helper.make_tensor_value_info(prev, F, [1, c, hw, hw])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_loadables_per_core():
    inside = check_model(_chain(15))
    assert len(inside.segments) == 16 and not inside.notes
    outside = check_model(_chain(16))
    assert len(outside.segments) == 17
    assert any("[general.loadables]" in n for n in outside.notes)


def test_internal_tensors_of_a_subgraph_under_1_gib():
    # 8192 x 8192 x 8 fp16 = 1 GiB of internal tensor between the two layers.
    def model(c: int) -> onnx.ModelProto:
        nodes = [helper.make_node("Relu", ["x"], ["a"], name="a"),
                 helper.make_node("Relu", ["a"], ["b"], name="b")]
        shape = [1, c, 8192, 8192]
        graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, shape)],
                                  [helper.make_tensor_value_info("b", F, shape)])
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])

    assert check_model(model(7)).supported_layers == 2
    report = check_model(model(8))
    assert report.supported_layers == 0
    assert {v.refusal.rule for v in report.layers} == {"general.internal_bytes"}
    # INT8 halves the bytes: the same network fits.
    assert check_model(model(8), precision="int8").supported_layers == 2


def test_runtime_slice_bounds_are_refused_at_import():
    inside = sl([0, 0, 0, 0], [2, 4, 8, 8])
    assert _verdict(inside).supported
    outside = Layer("Slice", (2, 8, 8, 8), {}, [np.array([4]), np.array([1])],
                    second_input=(1,), second_type=TensorProto.INT64)
    with pytest.raises(NotConstantError, match="build-time constant"):
        check_model(outside.model())


def test_docs_list_every_rule():
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "dla.md").read_text()
    assert [r for r in RULES if f"`{r}`" not in text] == []
