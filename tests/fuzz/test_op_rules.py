"""Load-time shape rules of the ops whose kernels are numpy references (issue 29): each
op's just-valid loadable is read; the same loadable with the layer's output re-shaped (same
bytes, so only the rule can notice) or an attribute or input tampered, and re-signed, is
refused with a LoadableError naming the layer. And every registered CPU kernel has a rule
(or a bind-time check)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from pydla import formats
from pydla.backends.cpu import CpuBackend
from pydla.builder import BuildOptions, build
from pydla.dtypes import DType
from pydla.errors import LoadableError
from pydla.loadable import read_loadable
from tests.oracle import make_model
from tests.unit.test_loadable import meta_of, resign

OPS = CpuBackend().supported_ops()
F, I64, U8, I8 = np.float32, np.int64, np.uint8, np.int8
Meta = dict[str, Any]


def _rand(*shape: int) -> np.ndarray:
    return np.random.default_rng(0).standard_normal(shape).astype(F)


def _node(op: str, ins: list[str], outs: list[str], **attrs: Any):
    return helper.make_node(op, ins, outs, **attrs)


def _set(key: str, value: Any) -> Callable[[Meta, dict], None]:
    return lambda meta, layer: layer["attrs"].__setitem__(key, value)


def _extra_input(meta: Meta, layer: dict) -> None:
    layer["inputs"].append(layer["inputs"][0])


# op: (nodes, graph inputs, outputs, initializers, opset, tamper, what the refusal names)
CASES: dict[str, tuple] = {
    "AffineGrid": ([_node("AffineGrid", ["t", "s"], ["y"])], {"t": (F, [2, 2, 3])}, ["y"],
                   {"s": np.array([2, 1, 3, 4], I64)}, 20, _set("size", [2, 1, 4, 4]),
                   "outputs"),
    "Attention": ([_node("Attention", ["q", "k", "v"], ["y"])],
                  {"q": (F, [1, 2, 3, 4]), "k": (F, [1, 2, 5, 4]), "v": (F, [1, 2, 5, 4])},
                  ["y"], {}, 23, _set("q_num_heads", 2), "q_num_heads"),
    "BitCast": ([_node("BitCast", ["x"], ["y"], to=6)], {"x": (F, [2, 3])}, ["y"], {}, 26,
                _set("to", int(DType.FLOAT64)), "attrs.to"),
    "CausalConvWithState": ([_node("CausalConvWithState", ["x", "w"], ["y", "s"])],
                            {"x": (F, [1, 2, 5]), "w": (F, [2, 1, 3])}, ["y", "s"], {}, 27,
                            _set("activation", "relu"), "activation"),
    "Col2Im": ([_node("Col2Im", ["x", "i", "b"], ["y"])], {"x": (F, [1, 4, 9])}, ["y"],
               {"i": np.array([4, 4], I64), "b": np.array([2, 2], I64)}, 18,
               _set("strides", [2, 2]), "inputs"),
    "DFT": ([_node("DFT", ["x"], ["y"], axis=1)], {"x": (F, [1, 8, 1])}, ["y"], {}, 17,
            _set("length", 6), "outputs"),
    "DeformConv": ([_node("DeformConv", ["x", "w", "o"], ["y"])],
                   {"x": (F, [1, 2, 4, 4]), "w": (F, [3, 2, 2, 2]), "o": (F, [1, 8, 3, 3])},
                   ["y"], {}, 19, _set("pads", [1, 1, 1, 1]), "offset"),
    "DequantizeLinear": ([_node("DequantizeLinear", ["x", "s"], ["y"], axis=1)],
                         {"x": (I8, [2, 3])}, ["y"], {"s": np.full(3, 0.1, F)}, 13,
                         _set("axis", 0), "scale"),
    "Det": ([_node("Det", ["x"], ["y"])], {"x": (F, [3, 2, 2])}, ["y"], {}, 11,
            _extra_input, "inputs"),
    "DynamicQuantizeLinear": ([_node("DynamicQuantizeLinear", ["x"], ["y", "s", "z"])],
                              {"x": (F, [2, 3])}, ["y", "s", "z"], {}, 11, _extra_input,
                              "inputs"),
    "Einsum": ([_node("Einsum", ["a", "b"], ["y"], equation="ij,jk->ik")],
               {"a": (F, [2, 3]), "b": (F, [3, 4])}, ["y"], {}, 12,
               _set("equation", "ij,jk->ki"), "outputs"),
    "GatherElements": ([_node("GatherElements", ["x", "i"], ["y"])],
                       {"x": (F, [3, 4]), "i": (I64, [4, 2])}, ["y"], {}, 13,
                       _set("axis", 1), "exceed"),
    "GatherND": ([_node("GatherND", ["x", "i"], ["y"])],
                 {"x": (F, [2, 3, 4]), "i": (I64, [2, 2])}, ["y"], {}, 13,
                 _set("batch_dims", 1), "outputs"),
    "GridSample": ([_node("GridSample", ["x", "g"], ["y"])],
                   {"x": (F, [1, 1, 4, 4]), "g": (F, [1, 3, 3, 2])}, ["y"], {}, 16,
                   _set("mode", "bilinear"), "attrs.mode"),
    "LinearAttention": ([_node("LinearAttention", ["q", "k", "v"], ["y", "s"], q_num_heads=2,
                               kv_num_heads=1, update_rule="linear")],
                        {"q": (F, [1, 3, 4]), "k": (F, [1, 3, 2]), "v": (F, [1, 3, 4])},
                        ["y", "s"], {}, 27, _set("update_rule", "delta"), "update_rule"),
    "MaxUnpool": ([_node("MaxUnpool", ["x", "i"], ["y"], kernel_shape=[2, 2], strides=[2, 2])],
                  {"x": (F, [1, 1, 2, 2]), "i": (I64, [1, 1, 2, 2])}, ["y"], {}, 11,
                  _set("unpooled_shape", [1, 2, 4, 4]), "unpooled_shape"),
    "NegativeLogLikelihoodLoss": ([_node("NegativeLogLikelihoodLoss", ["x", "t"], ["y"])],
                                  {"x": (F, [3, 4]), "t": (I64, [3])}, ["y"], {}, 13,
                                  _set("reduction", "avg"), "reduction"),
    "OneHot": ([_node("OneHot", ["i", "d", "v"], ["y"])], {"i": (I64, [3])}, ["y"],
               {"d": np.array(5, I64), "v": np.array([0, 1], F)}, 11, _set("depth", 6),
               "outputs"),
    "QuantizeLinear": ([_node("QuantizeLinear", ["x", "s", "z"], ["y"])], {"x": (F, [2, 3])},
                       ["y"], {"s": np.array(0.1, F), "z": np.array(3, U8)}, 13,
                       _set("precision", int(DType.INT64)), "precision"),
    "ReverseSequence": ([_node("ReverseSequence", ["x", "n"], ["y"])],
                        {"x": (F, [4, 2, 3]), "n": (I64, [2])}, ["y"], {}, 10,
                        _set("batch_axis", 0), "time_axis"),
    "RoiAlign": ([_node("RoiAlign", ["x", "r", "b"], ["y"])],
                 {"x": (F, [1, 2, 5, 5]), "r": (F, [3, 4]), "b": (I64, [3])}, ["y"], {}, 16,
                 _set("output_height", 2), "outputs"),
    "RotaryEmbedding": ([_node("RotaryEmbedding", ["x", "c", "s"], ["y"])],
                        {"x": (F, [1, 2, 3, 4]), "c": (F, [1, 3, 2]), "s": (F, [1, 3, 2])},
                        ["y"], {}, 23, _set("rotary_embedding_dim", 3), "odd"),
    "STFT": ([_node("STFT", ["x", "step", "", "n"], ["y"])], {"x": (F, [1, 16, 1])}, ["y"],
             {"step": np.array(4, I64), "n": np.array(8, I64)}, 17, _set("frame_step", 2),
             "outputs"),
    "ScatterElements": ([_node("ScatterElements", ["x", "i", "u"], ["y"])],
                        {"x": (F, [3, 4]), "i": (I64, [2, 4]), "u": (F, [2, 4])}, ["y"], {},
                        13, _set("reduction", "sub"), "reduction"),
    "ScatterND": ([_node("ScatterND", ["x", "i", "u"], ["y"])],
                  {"x": (F, [4, 3]), "i": (I64, [2, 1]), "u": (F, [2, 3])}, ["y"], {}, 13,
                  _set("reduction", "xor"), "reduction"),
    "SoftmaxCrossEntropyLoss": ([_node("SoftmaxCrossEntropyLoss", ["x", "t"], ["y"],
                                       reduction="none")],
                                {"x": (F, [3, 4]), "t": (I64, [3])}, ["y"], {}, 13,
                                _set("reduction", "mean"), "outputs"),
    "TensorScatter": ([_node("TensorScatter", ["p", "u"], ["y"])],
                      {"p": (F, [1, 2, 6, 4]), "u": (F, [1, 2, 2, 4])}, ["y"], {}, 24,
                      _set("axis", 0), "axis"),
    "TopK": ([_node("TopK", ["x", "k"], ["v", "i"])], {"x": (F, [2, 5])}, ["v", "i"],
             {"k": np.array([3], I64)}, 11, _set("k", 4), "outputs"),
}


def _qlinear_softmax_model():
    node = helper.make_node("QLinearSoftmax", ["x", "xs", "xz", "ys", "yz"], ["y"],
                            domain="com.microsoft", axis=-1, opset=13)
    inits = [numpy_helper.from_array(np.array(0.1, F), "xs"),
             numpy_helper.from_array(np.array(3, U8), "xz"),
             numpy_helper.from_array(np.array(1 / 256, F), "ys"),
             numpy_helper.from_array(np.array(0, U8), "yz")]
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(
        "x", TensorProto.UINT8, [2, 5])], [helper.make_tensor_value_info(
            "y", TensorProto.UINT8, [2, 5])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13),
                                                    helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 8
    return model


def _loadable(op: str) -> bytes:
    if op == "QLinearSoftmax":
        return build(_qlinear_softmax_model(), BuildOptions(opt_level=0))
    nodes, ins, outs, inits, opset = CASES[op][:5]
    return build(make_model(nodes, ins, outs, inits, opset), BuildOptions(opt_level=0))


def _constant_of_shape() -> bytes:
    """A ConstantOfShape layer: the builder folds every one it can store, so a Relu layer
    is rewritten into one (x then feeds nothing, which the reader allows)."""
    data = build(make_model([_node("Relu", ["x"], ["y"])], {"x": (F, [2, 3])}, ["y"]),
                 BuildOptions(opt_level=0))
    meta = meta_of(data)
    meta["layers"][0].update(op="ConstantOfShape", inputs=[], attrs={"value": 1.5})
    return resign(data, meta)


def _layer(meta: Meta, op: str) -> tuple[int, dict]:
    return next((i, lay) for i, lay in enumerate(meta["layers"]) if lay["op"] == op)


def _reshape_output(meta: Meta, layer: dict) -> None:
    """Give the layer's first output another shape of the same bytes (and its I/O
    descriptor to match), so the buffers still fit and only the op's rule can object."""
    index = layer["outputs"][0]
    t = meta["tensors"][index]
    shape = tuple(t["shape"])
    count = int(np.prod(shape, dtype=np.int64))
    rank = max(len(shape), 1)
    for new in [(1,) * (rank - 1) + (count,), (count,) + (1,) * (rank - 1),
                (count, 1), (1, count, 1)]:
        if new != shape:
            break
    t["shape"] = list(new)
    for io in meta["outputs"]:
        if io["tensor"] == index:
            desc = formats.describe(t["name"], io["format"], new, DType.from_name(io["dtype"]))
            io["descriptor"] = {k: list(v) if isinstance(v, tuple) else v
                                for k, v in desc.__dict__.items()}


@pytest.fixture(scope="module")
def loadables() -> dict[str, bytes]:
    return {}


def _seed(loadables: dict[str, bytes], op: str) -> bytes:
    if op not in loadables:
        loadables[op] = _constant_of_shape() if op == "ConstantOfShape" else _loadable(op)
    return loadables[op]


ALL_OPS = sorted([*CASES, "QLinearSoftmax", "ConstantOfShape"])


@pytest.mark.parametrize("op", ALL_OPS)
def test_valid_loadable_is_read(loadables: dict[str, bytes], op: str) -> None:
    prog = read_loadable(_seed(loadables, op), OPS)
    assert op in [lay.op for lay in prog.layers]


@pytest.mark.parametrize("op", [op for op in ALL_OPS if op != "ConstantOfShape"])
def test_autocast_loadable_is_read(op: str) -> None:
    """--autocast fp16 retypes float tensors around these layers (half scales, a half input
    to BitCast): the rules accept what the builder makes."""
    model = _qlinear_softmax_model() if op == "QLinearSoftmax" else make_model(*CASES[op][:5])
    prog = read_loadable(build(model, BuildOptions(autocast=DType.FLOAT16)), OPS)
    assert op in [lay.op for lay in prog.layers]


def _refused(data: bytes, op: str, mutate: Callable[[Meta, dict], None], what: str) -> None:
    meta = meta_of(data)
    index, layer = _layer(meta, op)
    mutate(meta, layer)
    with pytest.raises(LoadableError, match=rf"layers\[{index}\].*{layer['name']!r}"
                       rf".*\({op}\)") as err:
        read_loadable(resign(data, meta), OPS)
    assert what in str(err.value), str(err.value)


@pytest.mark.parametrize("op", [op for op in ALL_OPS if op != "ConstantOfShape"])
def test_reshaped_output_is_refused(loadables: dict[str, bytes], op: str) -> None:
    _refused(_seed(loadables, op), op, _reshape_output, "outputs[0]")


TAMPERS: dict[str, tuple[Callable[[Meta, dict], None], str]] = {
    op: (case[5], case[6]) for op, case in CASES.items()}
TAMPERS["QLinearSoftmax"] = (_set("axes", [1, 1]), "repeated axis")
TAMPERS["ConstantOfShape"] = (_set("value", "one"), "attrs.value")


@pytest.mark.parametrize("op", ALL_OPS)
def test_tampered_layer_is_refused(loadables: dict[str, bytes], op: str) -> None:
    mutate, what = TAMPERS[op]
    _refused(_seed(loadables, op), op, mutate, what)


def test_every_cpu_kernel_has_a_rule_or_a_bind_check() -> None:
    """No registered CPU kernel may run a layer the reader has not proved (issue 29): each
    has a shape rule, or derives and checks its geometry when it is bound."""
    from pydla.backends.cpu.registry import KERNELS, TACTICS
    from pydla.loadable.validate import BIND_CHECKED, RULES

    unproved = sorted(op for op in {*KERNELS, *TACTICS} if op not in RULES
                      and op not in BIND_CHECKED)
    assert unproved == []


@pytest.mark.parametrize("op", ALL_OPS)
def test_mutated_op_loadables_end_typed(loadables: dict[str, bytes], op: str) -> None:
    """A few structure-aware mutations of each op's loadable (the long run: scripts/fuzz.py
    over tests/fuzz/seeds): each is refused or runs, always typed."""
    from tests.fuzz.harness import run_input
    from tests.fuzz.loadables import mutated_loadable

    seed = _seed(loadables, op)
    outcomes = {i: run_input("structure", mutated_loadable(seed, "structure", i))
                for i in range(8)}
    assert {i: o for i, o in outcomes.items() if o.split(":")[0] not in ("ok", "typed")} == {}
