"""A tiny ONNX graph builder for test networks (onnx.helper underneath)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


class Net:
    """Accumulates nodes and initializers; each method returns its output tensor name."""

    def __init__(self, name: str, seed: int = 0) -> None:
        self.name = name
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.inputs: list[onnx.ValueInfoProto] = []
        self.count = 0

    def fresh(self, base: str) -> str:
        self.count += 1
        return f"{base}_{self.count}"

    def input(self, name: str, shape: Sequence[int | str], dtype: int = TensorProto.FLOAT) -> str:
        self.inputs.append(helper.make_tensor_value_info(name, dtype, list(shape)))
        return name

    def const(self, value: np.ndarray, base: str = "c") -> str:
        name = self.fresh(base)
        self.inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def weight(self, *shape: int, scale: float | None = None, base: str = "w") -> str:
        fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else shape[0]
        s = scale if scale is not None else 1.0 / np.sqrt(max(fan_in, 1))
        return self.const((self.rng.standard_normal(shape) * s).astype(np.float32), base)

    def op(self, op_type: str, inputs: Sequence[str], n_out: int = 1, **attrs) -> str | list[str]:
        outs = [self.fresh(op_type.lower()) for _ in range(n_out)]
        self.nodes.append(helper.make_node(op_type, list(inputs), outs,
                                           name=self.fresh(op_type), **attrs))
        return outs[0] if n_out == 1 else outs

    # -- common blocks ------------------------------------------------------------------
    def bn(self, x: str, c: int) -> str:
        r = self.rng
        scale = self.const((1 + 0.1 * r.standard_normal(c)).astype(np.float32), "bn_s")
        bias = self.const((0.1 * r.standard_normal(c)).astype(np.float32), "bn_b")
        mean = self.const((0.1 * r.standard_normal(c)).astype(np.float32), "bn_m")
        var = self.const((1 + 0.1 * r.random(c)).astype(np.float32), "bn_v")
        return self.op("BatchNormalization", [x, scale, bias, mean, var], epsilon=1e-5)

    def act(self, x: str, kind: str | None) -> str:
        if kind is None:
            return x
        if kind == "silu":
            return self.op("Mul", [x, self.op("Sigmoid", [x])])
        if kind == "hardswish":
            return self.op("HardSwish", [x])
        if kind == "hardsigmoid":
            return self.op("HardSigmoid", [x], alpha=1 / 6, beta=0.5)
        if kind == "relu6":
            return self.op("Clip", [x, self.const(np.float32(0)), self.const(np.float32(6))])
        names = {"relu": "Relu", "sigmoid": "Sigmoid", "tanh": "Tanh", "gelu": "Gelu"}
        return self.op(names.get(kind, kind), [x])

    def conv(self, x: str, cin: int, cout: int, k: int = 3, s: int = 1, groups: int = 1,
             act: str | None = "relu", bn: bool = True, bias: bool = False,
             pad: int | None = None) -> str:
        w = self.weight(cout, cin // groups, k, k)
        ins = [x, w] + ([self.const(np.zeros(cout, np.float32) + 0.01, "b")] if bias else [])
        p = k // 2 if pad is None else pad
        y = self.op("Conv", ins, kernel_shape=[k, k], strides=[s, s], pads=[p] * 4, group=groups)
        if bn:
            y = self.bn(y, cout)
        return self.act(y, act)

    def linear(self, x: str, cin: int, cout: int) -> str:
        y = self.op("MatMul", [x, self.weight(cin, cout)])
        return self.op("Add", [y, self.const((0.01 * self.rng.standard_normal(cout))
                                             .astype(np.float32), "lin_b")])

    def layernorm_primitive(self, x: str, c: int, axis: int = -1) -> str:
        """LayerNorm written with primitive ops, as exporters emit it."""
        mean = self.op("ReduceMean", [x], axes=[axis], keepdims=1)
        d = self.op("Sub", [x, mean])
        var = self.op("ReduceMean", [self.op("Pow", [d, self.const(np.float32(2))])],
                      axes=[axis], keepdims=1)
        std = self.op("Sqrt", [self.op("Add", [var, self.const(np.float32(1e-5))])])
        y = self.op("Div", [d, std])
        y = self.op("Mul", [y, self.const((1 + 0.1 * self.rng.standard_normal(c))
                                          .astype(np.float32))])
        return self.op("Add", [y, self.const((0.1 * self.rng.standard_normal(c))
                                             .astype(np.float32))])

    def gelu_erf(self, x: str) -> str:
        e = self.op("Erf", [self.op("Div", [x, self.const(np.float32(np.sqrt(2)))])])
        return self.op("Mul", [self.op("Mul", [x, self.op("Add", [e, self.const(
            np.float32(1))])]), self.const(np.float32(0.5))])

    def shape_const(self, values: Sequence[int]) -> str:
        return self.const(np.array(values, np.int64), "shape")

    def model(self, outputs: Sequence[str], opset: int = 17) -> onnx.ModelProto:
        outs = [helper.make_empty_tensor_value_info(o) for o in outputs]
        graph = helper.make_graph(self.nodes, self.name, self.inputs, outs, self.inits)
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
        m.ir_version = 8
        inferred = onnx.shape_inference.infer_shapes(m)
        known = {vi.name: vi for vi in list(inferred.graph.value_info)
                 + list(inferred.graph.output) if vi.type.tensor_type.elem_type}
        del m.graph.output[:]
        for o in outputs:
            vi = onnx.ValueInfoProto()
            vi.CopyFrom(known[o])
            m.graph.output.append(vi)
        onnx.checker.check_model(m)
        return m
