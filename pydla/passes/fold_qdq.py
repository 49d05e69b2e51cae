"""Fold quantized Conv/Gemm/MatMul (QDQ form) into the int8 layers QConv and QGemm.

Pattern (onnxruntime's quantize_static QDQ output, and pydla.quantization.insert_qdq's):

    DQ(xq) ─┐
    DQ(wq) ─┼─ Conv/Gemm/MatMul ─[Relu | Clip]─[Q ─(only DQs)]
    DQ(b)? ─┘                   └ Add(residual) ─[Relu | Clip]─[Q]

becomes one QConv/QGemm reading xq and wq directly (int32 accumulation), with
- the bias in int32 at scale x_scale·w_scale (a float bias, or one quantized at another
  scale, is requantized to it: onnxruntime's fusion assumes that scale),
- the activation as the output clamp (exact: quantization is monotonic),
- the output: int8/uint8 when a Q follows; float when none does; float computed as
  DQ(Q(·)) when the Q's output is only dequantized and no foldable layer reads it,
- a residual Add (then Relu/Clip, then Q) as the epilogue: see ``_residual_output``.
The x/w DequantizeLinear nodes stay for other readers (eliminate_dead drops them
otherwise); Q/DQ pairs no layer absorbs run as they are, int8 between them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pydla.dtypes import DType
from pydla.ir import Graph, Node, Value
from pydla.passes.base import PassContext
from pydla.passes.patterns import RewritePass, is_add, other_operand, produced_by, refuse
from pydla.passes.rewrite import Uses, const_scalar, forward, merge_provenance, place_at

HOSTS = ("Conv", "Gemm", "MatMul")
_INT8 = (DType.INT8, DType.UINT8)
_INT32 = np.iinfo(np.int32)


@dataclass
class _Quantized:
    """A DequantizeLinear's quantized input and its constant parameters."""

    q: Value
    scale: Value
    zero_point: Value | None
    node: Node


def _dequantized(v: Value | None, *, const: bool, channels: int = 1,
                 axis: int | None = None) -> _Quantized | None:
    """``v`` = DQ(int8/uint8 q) with constant parameters: per tensor, or per ``axis``
    with ``channels`` values when ``axis`` is given."""
    dq = produced_by(v, "DequantizeLinear")
    if dq is None:
        return None
    q, scale, zp = dq.inputs[0], dq.inputs[1], dq.inputs[2]
    if q is None or scale is None or q.dtype not in _INT8 or scale.const is None or \
            (zp is not None and zp.const is None) or (const and q.const is None) or \
            dq.outputs[0].dtype is not DType.FLOAT32:
        return None
    if scale.size != 1 and not (axis is not None and scale.size == channels
                                and int(dq.attrs.get("axis", 1)) % len(q.shape) == axis
                                and not int(dq.attrs.get("block_size", 0))):
        return None
    return _Quantized(q, scale, zp, dq)


def _params_equal(a: Node, b: Node) -> bool:
    """Two Q/DQ nodes with equal constant scale and zero point."""
    for x, y in zip(a.inputs[1:3], b.inputs[1:3]):
        if (x is None) != (y is None):
            return False
        if x is not None and y is not None and (x.const is None or y.const is None or
                                                not np.array_equal(x.const, y.const)):
            return False
    return len(a.inputs) >= 2


class FoldQDQ(RewritePass):
    name = "fold_qdq"
    ensures = ("qdq_folded",)

    def rewrite(self, graph: Graph, uses: Uses, host: Node, ctx: PassContext) -> bool:
        if host.op not in HOSTS or "epilogue" in host.attrs or len(host.outputs) != 1:
            return False
        x = _dequantized(host.inputs[0], const=False)
        if x is None or len(x.q.shape) < 2:
            return False
        layout = self._weight_layout(host)
        if layout is None:
            refuse(ctx, f"fold_qdq: kept {host.op} {host.name!r} float: its attributes or "
                   "weight shape have no int8 layer")
            return False
        channels, axis, transpose = layout
        w = _dequantized(host.inputs[1], const=True, channels=channels, axis=axis)
        if w is None:
            refuse(ctx, f"fold_qdq: kept {host.op} {host.name!r} float: its weights are not a "
                   "per-tensor or per-output-channel DequantizeLinear of constant int8")
            return False
        bias = self._bias(graph, host, x, w, channels, ctx)
        if bias is False:
            return False
        wq, ws, wzp = w.q, w.scale, w.zero_point
        if transpose:  # Gemm's B transposed: QGemm multiplies by (K, N)
            wq = Value(graph.unique_name(f"{wq.name}_t"), wq.shape[::-1], wq.dtype,
                       const=np.ascontiguousarray(wq.const.T))  # type: ignore[union-attr]
        attrs = {k: v for k, v in host.attrs.items()
                 if k in ("strides", "pads", "dilations", "group")}
        folded = self._residual_output(uses, host)
        if folded is not None:
            chain, clip, out_q, residual, residual_attrs = folded
            dq_outs: list[Value] = []
            if residual_attrs:
                attrs["residual"] = residual_attrs
        else:
            chain, clip, out_q, dq_outs = self._output(graph, uses, host)
            residual = None
        ys = out_q.inputs[1] if out_q is not None else None
        yzp = out_q.inputs[2] if out_q is not None else None
        inputs = [x.q, x.scale, x.zero_point, wq, ws, wzp, ys, yzp, bias or None, residual]
        if clip is not None:
            attrs["clip"] = [float(clip[0]), float(clip[1])]
        if dq_outs:
            result = dq_outs[0]
        else:
            result = chain[-1].outputs[0]
        op = "QConv" if host.op == "Conv" else "QGemm"
        node = Node(op, graph.unique_node_name(host.name), inputs, [result], attrs)
        node.fused_from = []
        node.precision = "int8"
        merge_provenance(node, *chain)
        for extra in dq_outs[1:]:
            forward(graph, extra, result)
        # The latest node of the match: a residual may be computed after the host.
        order = {id(n): i for i, n in enumerate(graph.nodes)}
        place_at(graph, node, max(chain, key=lambda n: order[id(n)]), chain)
        kind = ("float (dequantized)" if dq_outs else result.dtype.name.lower())
        ctx.note(f"fold_qdq: {' + '.join(n.op for n in chain)} {host.name!r} -> {op} "
                 f"{node.name!r} ({x.q.dtype.name.lower()} in, {kind} out)")
        return True

    @staticmethod
    def _weight_layout(host: Node) -> tuple[int, int, bool] | None:
        """(output channels, their axis in the weights, whether B is transposed)."""
        w = host.inputs[1]
        if w is None:
            return None
        if host.op == "Conv":
            return (w.shape[0], 0, False) if len(w.shape) >= 3 else None
        if len(w.shape) != 2:
            return None
        if host.op == "MatMul":
            return w.shape[1], 1, False
        a = host.attrs
        if float(a.get("alpha", 1.0)) != 1.0 or int(a.get("transA", 0)) or \
                (host.inputs[2] is not None and float(a.get("beta", 1.0)) != 1.0):
            return None
        trans = bool(int(a.get("transB", 0)))
        return (w.shape[0], 0, True) if trans else (w.shape[1], 1, False)

    @staticmethod
    def _bias(graph: Graph, host: Node, x: _Quantized, w: _Quantized, channels: int,
              ctx: PassContext) -> Value | None | bool:
        """The bias as an int32 constant at scale x_scale·w_scale; None without one; False
        (refused) when it is not a constant per-channel vector."""
        b = host.inputs[2] if len(host.inputs) > 2 and host.op != "MatMul" else None
        if b is None:
            return None
        x_scale = np.float32(const_scalar(x.scale))
        w_scale = w.scale.const.astype(np.float32).reshape(-1)  # type: ignore[union-attr]
        scale = (x_scale * w_scale).astype(np.float32)
        qb = _dequantized(b, const=True, channels=channels, axis=0)
        if qb is None and b.producer is not None and b.producer.op == "DequantizeLinear":
            dq = b.producer
            src = dq.inputs[0]
            if src is not None and src.const is not None and src.dtype is DType.INT32 and \
                    dq.inputs[1] is not None and dq.inputs[1].const is not None:
                zp = dq.inputs[2]
                raw = src.const.astype(np.int64) - (0 if zp is None or zp.const is None
                                                    else zp.const.astype(np.int64))
                given = dq.inputs[1].const.astype(np.float32).reshape(-1)
                if raw.size == channels and given.size in (1, channels) and \
                        np.allclose(given, scale, rtol=1e-6, atol=0):
                    data = raw.reshape(-1).astype(np.int32)
                    return Value(graph.unique_name(f"{host.name}_bias_int32"), (channels,),
                                 DType.INT32, const=data)
                real = raw.astype(np.float64) * given.astype(np.float64)
                return FoldQDQ._quantized_bias(graph, host, real, scale, channels)
        if b.const is None or b.size != channels:
            refuse(ctx, f"fold_qdq: kept {host.op} {host.name!r} float: its bias is not a "
                   f"constant of {channels} values")
            return False
        return FoldQDQ._quantized_bias(graph, host, b.const.astype(np.float64), scale, channels)

    @staticmethod
    def _quantized_bias(graph: Graph, host: Node, real: np.ndarray, scale: np.ndarray,
                        channels: int) -> Value:
        q = np.clip(np.rint(real.reshape(-1) / scale.astype(np.float64)), _INT32.min,
                    _INT32.max).astype(np.int32)
        return Value(graph.unique_name(f"{host.name}_bias_int32"), (channels,), DType.INT32,
                     const=np.broadcast_to(q, (channels,)).copy())

    @staticmethod
    def _output(graph: Graph, uses: Uses, host: Node
                ) -> tuple[list[Node], tuple[float, float] | None, Node | None, list[Value]]:
        """The nodes folded after the host: an activation, a Q, and the DQs reading it
        (when the layer can output float directly). Returns (host and folded nodes, clip,
        the Q, the DQ outputs the layer writes instead)."""
        chain = [host]
        clip: tuple[float, float] | None = None
        reader = uses.only_user(host.outputs[0])
        if reader is not None and reader.op in ("Relu", "Clip"):
            bounds = FoldQDQ._activation(reader)
            if bounds is not None:
                clip = bounds
                chain.append(reader)
                reader = uses.only_user(reader.outputs[0])
        q = reader if reader is not None and reader.op == "QuantizeLinear" else None
        if q is None or not FoldQDQ._plain_quantize(q):
            return chain, clip, None, []
        chain.append(q)
        qout = q.outputs[0]
        readers = uses.of(qout)
        if id(qout) in uses.outputs or not readers or any(
                r.op != "DequantizeLinear" or not _params_equal(r, q) for r in readers):
            return chain, clip, q, []
        # Keep int8 between layers: a Q read (through its DQ) by a layer fold_qdq can fold
        # stays int8; only a tensor that float layers read comes out float directly.
        for r in readers:
            if any(n.op in HOSTS and n.inputs[0] is r.outputs[0]
                   for n in uses.of(r.outputs[0])):
                return chain, clip, q, []
        outs = [r.outputs[0] for r in readers]
        if sum(id(v) in uses.outputs for v in outs) > 1:
            return chain, clip, q, []
        outs.sort(key=lambda v: id(v) not in uses.outputs)  # a graph output keeps its name
        return chain + readers, clip, q, outs

    @staticmethod
    def _residual_output(uses: Uses, host: Node) -> tuple[
            list[Node], tuple[float, float] | None, Node | None, Value, dict | None] | None:
        """host → Add(residual) → [Relu | Clip] → [Q]: the residual Add as the layer's
        epilogue, before the one rounding. With a Q after, the residual must be a
        DequantizeLinear of int8 (read as int8 at its scale); without, it is added in float
        to a float output. None: no such match. A Q/DQ pair between the host and the Add
        (onnxruntime's QDQ residual block) is not skipped: its clamp at the host's own range
        changes results by many steps where the host's output saturates."""
        chain = [host]
        cur = host.outputs[0]
        reader = uses.only_user(cur)
        if not is_add(reader):
            return None
        assert reader is not None
        r = other_operand(reader, cur)
        if r is None or r.shape != cur.shape or reader.outputs[0].shape != cur.shape or \
                r.dtype is not DType.FLOAT32:
            return None
        chain.append(reader)
        clip = None
        nxt = uses.only_user(reader.outputs[0])
        if nxt is not None and nxt.op in ("Relu", "Clip"):
            clip = FoldQDQ._activation(nxt)
            if clip is not None:
                chain.append(nxt)
                nxt = uses.only_user(nxt.outputs[0])
        if nxt is not None and nxt.op == "QuantizeLinear" and FoldQDQ._plain_quantize(nxt):
            rq = _dequantized(r, const=False)
            if rq is None:
                return None
            attrs = {"scale": float(const_scalar(rq.scale)),  # type: ignore[arg-type]
                     "zero_point": int(const_scalar(rq.zero_point) or 0)}
            return chain + [nxt], clip, nxt, rq.q, attrs
        return chain, clip, None, r, None

    @staticmethod
    def _activation(node: Node) -> tuple[float, float] | None:
        if node.op == "Relu":
            return 0.0, float("inf")
        lo = node.inputs[1] if len(node.inputs) > 1 else None
        hi = node.inputs[2] if len(node.inputs) > 2 else None
        if (lo is not None and const_scalar(lo) is None) or \
                (hi is not None and const_scalar(hi) is None):
            return None
        return (float("-inf") if lo is None else float(const_scalar(lo)),  # type: ignore[arg-type]
                float("inf") if hi is None else float(const_scalar(hi)))  # type: ignore[arg-type]

    @staticmethod
    def _plain_quantize(q: Node) -> bool:
        """A per-tensor QuantizeLinear to int8/uint8 with constants, dividing in float32."""
        scale, zp = q.inputs[1], q.inputs[2] if len(q.inputs) > 2 else None
        return (q.outputs[0].dtype in _INT8 and scale is not None and scale.const is not None
                and scale.size == 1 and (zp is None or (zp.const is not None and zp.size == 1))
                and int(q.attrs.get("precision", int(DType.FLOAT32))) == int(DType.FLOAT32))
