"""Put QuantizeLinear/DequantizeLinear pairs into the float IR around the layers chosen to run
int8, in the form onnxruntime's ``quantize_static`` (QDQ, per-channel) gives a model, so an
implicitly quantized network takes the explicit path from here on (pydla.passes.fold_qdq
folds DQ→Conv/Gemm/MatMul→Q into QConv/QGemm layers). Where no pass folds them, the pairs
run as float ops: the network computes the int8 model's values (fake quantization).

- Activations: int8, zero point 0, symmetric (TensorRT's scheme): scale = range / 127, one
  Q→DQ pair per tensor, read only by the int8 layers (a float reader keeps the float tensor).
- Weights: int8 per output channel, symmetric, in [-127, 127] (TensorRT's), stored as an
  initializer behind a per-axis DQ; scale = max|w| of the channel / 127 (1 for a zero channel).
- Bias: int32 with scale x_scale * w_scale per channel, behind a DQ, as onnxruntime does.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from pydla.dtypes import DType
from pydla.ir import Graph, Node, Value
from pydla.quantization.policy import Decision

_INT32 = np.iinfo(np.int32)


def activation_scale(amax: float) -> np.float32:
    return np.float32(amax / 127.0)


def insert_qdq(graph: Graph, decisions: Mapping[str, Decision],
               ranges: Mapping[str, float]) -> int:
    """Quantize the inputs, weights and biases of every layer decided int8; returns how many
    layers were quantized."""
    pairs: dict[int, Value] = {}
    nodes: list[Node] = []
    count = 0

    def const(base: str, data: np.ndarray, dtype: DType) -> Value:
        return Value(graph.unique_name(base), data.shape, dtype, const=data)

    def dequantize(q: Value, scale: Value, zero_point: Value | None, axis: int,
                   base: str) -> Value:
        out = Value(graph.unique_name(f"{base}_DequantizeLinear_Output"), q.shape,
                    DType.FLOAT32)
        nodes.append(Node("DequantizeLinear", graph.unique_node_name(f"{base}_DequantizeLinear"),
                          [q, scale, zero_point], [out], {"axis": axis, "block_size": 0}))
        return out

    def fake_quantized(x: Value) -> Value:
        if id(x) not in pairs:
            scale = const(f"{x.name}_scale", np.array(activation_scale(ranges[x.name])),
                          DType.FLOAT32)
            zero = const(f"{x.name}_zero_point", np.array(0, np.int8), DType.INT8)
            q = Value(graph.unique_name(f"{x.name}_QuantizeLinear_Output"), x.shape, DType.INT8)
            nodes.append(Node("QuantizeLinear", graph.unique_node_name(f"{x.name}_QuantizeLinear"),
                              [x, scale, zero], [q],
                              {"axis": 0, "block_size": 0, "precision": int(DType.FLOAT32)}))
            pairs[id(x)] = dequantize(q, scale, zero, 0, x.name)
        return pairs[id(x)]

    def quantized_bias(bias: Value | None, scale: np.ndarray) -> Value | None:
        """An int32 bias behind a DQ when it is a constant vector of one value per channel;
        anything else (a broadcast scalar, a 2-D C of a Gemm) stays float."""
        n = scale.shape[0]
        if bias is None or bias.const is None or bias.dtype is not DType.FLOAT32 or not (
                bias.shape == (n,) or bias.shape == (1, n)):
            return bias
        q = np.clip(np.rint(bias.const.astype(np.float64) / scale.reshape(bias.shape)),
                    _INT32.min, _INT32.max).astype(np.int32)
        return dequantize(const(f"{bias.name}_quantized", q, DType.INT32),
                          const(f"{bias.name}_scale", scale.astype(np.float32), DType.FLOAT32),
                          None, len(bias.shape) - 1, bias.name)

    for node in graph.nodes:
        if decisions.get(node.name, Decision("fp32", "")).precision != "int8":
            nodes.append(node)
            continue
        x, w = node.inputs[0], node.inputs[1]
        assert x is not None and w is not None and w.const is not None
        axis = _channel_axis(node)
        w_q, w_scale = quantize_weights(w.const, axis)
        w_scale_v = const(f"{w.name}_scale", w_scale, DType.FLOAT32)
        inputs: list[Value | None] = [
            fake_quantized(x),
            dequantize(const(f"{w.name}_quantized", w_q, DType.INT8), w_scale_v,
                       const(f"{w.name}_zero_point", np.zeros(w_scale.shape, np.int8),
                             DType.INT8), axis, w.name)]
        if len(node.inputs) > 2:
            inputs.append(quantized_bias(node.inputs[2],
                                         activation_scale(ranges[x.name]) * w_scale))
        node.inputs = inputs + node.inputs[3:]
        nodes.append(node)
        count += 1
    graph.nodes = nodes
    return count


def _channel_axis(node: Node) -> int:
    """The weights' output-channel axis: Conv (M, C/g, kh, kw) 0; Gemm B (N, K) with transB,
    else (K, N); MatMul (K, N)."""
    if node.op == "Conv":
        return 0
    if node.op == "Gemm" and node.attrs.get("transB"):
        return 0
    return 1


def quantize_weights(w: np.ndarray, axis: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-channel symmetric int8 weights in [-127, 127] and their float32 scales."""
    reduce = tuple(i for i in range(w.ndim) if i != axis)
    amax = np.max(np.abs(w.astype(np.float32)), axis=reduce)
    scale = np.where(amax > 0, amax / np.float32(127.0), np.float32(1.0)).astype(np.float32)
    shape = [1] * w.ndim
    shape[axis] = -1
    q = np.clip(np.rint(w / scale.reshape(shape)), -127, 127).astype(np.int8)
    return q, scale
