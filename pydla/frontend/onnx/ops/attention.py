"""Importers of the transformer ops Attention (opsets 23–25), LinearAttention and
RotaryEmbedding.

Attention keeps its seven ONNX inputs (Q, K, V, attn_mask, past_key, past_value,
nonpad_kv_seqlen) as data. Canonical attributes: ``scale`` (resolved, 1/√head_size by
default), ``q_num_heads``/``kv_num_heads`` (0 for 4-D inputs), ``is_causal``, ``softcap``,
``softmax_precision`` (0: the input precision), ``qk_matmul_output_mode`` and
``left_window_size``/``right_window_size`` (-1: unbounded; always -1 before opset 25).
"""

from __future__ import annotations

import math

from pydla.dtypes import DType
from pydla.frontend.onnx.importer import ImportContext, OnnxNode, TensorType
from pydla.frontend.onnx.registry import onnx_op
from pydla.ir import Value


def _wanted_outputs(node: OnnxNode) -> int:
    """How many leading outputs must exist so that every named one is produced."""
    named = [i for i, n in enumerate(node.output_names) if n]
    return named[-1] + 1 if named else 1


def _required(ctx: ImportContext, node: OnnxNode, count: int) -> list[Value]:
    values = [node.input(i) for i in range(count)]
    if any(v is None for v in values):
        raise ctx.error(f"the first {count} inputs are required")
    return values  # type: ignore[return-value]


@onnx_op("Attention", since=23)
def import_attention(ctx: ImportContext, node: OnnxNode) -> list[Value]:
    q, k, v = _required(ctx, node, 3)
    past_k, past_v = node.input(4), node.input(5)
    rank = len(q.shape)
    if rank not in (3, 4) or len(k.shape) != rank or len(v.shape) != rank:
        raise ctx.error(f"Q, K and V must all be 3-D or 4-D, got {q.shape}, {k.shape}, "
                        f"{v.shape}")
    if (past_k is None) != (past_v is None):
        raise ctx.error("past_key and past_value must be given together")
    if node.input(6) is not None and past_k is not None:
        raise ctx.error("nonpad_kv_seqlen cannot be combined with past_key/past_value")
    a = node.attrs_with_defaults()
    batch, sq = q.shape[0], q.shape[-2] if rank == 4 else q.shape[1]
    if rank == 3:
        hq, hkv = int(a.get("q_num_heads", 0)), int(a.get("kv_num_heads", 0))
        if hq <= 0 or hkv <= 0 or q.shape[2] % hq or k.shape[2] % hkv or v.shape[2] % hkv:
            raise ctx.error("3-D inputs need q_num_heads and kv_num_heads that divide the "
                            "hidden sizes")
        head, v_head, skv = q.shape[2] // hq, v.shape[2] // hkv, k.shape[1]
        attrs_heads = (hq, hkv)
    else:
        hq, hkv, head, v_head, skv = q.shape[1], k.shape[1], q.shape[3], v.shape[3], k.shape[2]
        attrs_heads = (0, 0)
    if hq % hkv:
        raise ctx.error(f"{hq} query heads are not a multiple of {hkv} key/value heads")
    past = 0 if past_k is None else past_k.shape[2]
    total = past + skv
    precision = int(a.get("softmax_precision", 0))
    if precision not in (0, int(DType.FLOAT32), int(DType.FLOAT16), int(DType.FLOAT64),
                         int(DType.BFLOAT16)):
        raise ctx.error(f"softmax_precision {precision} is not a floating-point type")
    mode = int(a.get("qk_matmul_output_mode", 0))
    if mode not in (0, 1, 2, 3):
        raise ctx.error(f"qk_matmul_output_mode {mode} is not supported")
    attrs = {
        "scale": float(a["scale"]) if "scale" in a else 1.0 / math.sqrt(head),
        "q_num_heads": attrs_heads[0], "kv_num_heads": attrs_heads[1],
        "is_causal": int(a.get("is_causal", 0)), "softcap": float(a.get("softcap", 0.0)),
        "softmax_precision": precision, "qk_matmul_output_mode": mode,
        "left_window_size": int(a.get("left_window_size", -1)),
        "right_window_size": int(a.get("right_window_size", -1)),
    }
    y_shape = (batch, hq, sq, v_head) if rank == 4 else (batch, sq, hq * v_head)
    types: list[TensorType] = [
        (y_shape, q.dtype), ((batch, hkv, total, head), k.dtype),
        ((batch, hkv, total, v_head), v.dtype), ((batch, hq, sq, total), q.dtype)]
    return ctx.emit("Attention", node.inputs[:7], attrs,
                    out_types=types[:_wanted_outputs(node)])


@onnx_op("LinearAttention", since=27)
def import_linear_attention(ctx: ImportContext, node: OnnxNode) -> list[Value]:
    q, k, v = _required(ctx, node, 3)
    a = node.attrs_with_defaults()
    hq, hkv = int(a.get("q_num_heads", 0)), int(a.get("kv_num_heads", 0))
    if hq <= 0 or hkv <= 0 or hq % hkv:
        raise ctx.error("q_num_heads must be a positive multiple of kv_num_heads")
    if any(len(x.shape) != 3 for x in (q, k, v)) or q.shape[2] % hq or v.shape[2] % hkv:
        raise ctx.error("query, key and value must be (B, T, H·D) with whole heads")
    rule = str(a.get("update_rule", "gated_delta"))
    gated, delta = rule in ("gated", "gated_delta"), rule in ("delta", "gated_delta")
    if rule not in ("linear", "gated", "delta", "gated_delta"):
        raise ctx.error(f"update_rule {rule!r} is not supported")
    if gated != (node.input(4) is not None) or delta != (node.input(5) is not None):
        raise ctx.error(f"update_rule {rule!r} needs decay exactly when gated and beta "
                        "exactly when a delta rule")
    b, t = q.shape[0], q.shape[1]
    dk, dv = q.shape[2] // hq, v.shape[2] // hkv
    scale = float(a.get("scale", 0.0)) or 1.0 / math.sqrt(dk)
    past = node.input(3)
    state_type = (b, hkv, dk, dv), (past.dtype if past is not None else q.dtype)
    attrs = {"q_num_heads": hq, "kv_num_heads": hkv, "update_rule": rule, "scale": scale}
    types: list[TensorType] = [((b, t, hq * dv), q.dtype), state_type]
    return ctx.emit("LinearAttention", node.inputs[:6], attrs,
                    out_types=types[:_wanted_outputs(node)])


@onnx_op("RotaryEmbedding", since=23)
def import_rotary_embedding(ctx: ImportContext, node: OnnxNode) -> list[Value]:
    x, cos, sin = _required(ctx, node, 3)
    a = node.attrs_with_defaults()
    heads = int(a.get("num_heads", 0))
    if len(x.shape) == 3 and (heads <= 0 or x.shape[2] % heads):
        raise ctx.error("a 3-D input needs num_heads dividing its hidden size")
    if len(x.shape) not in (3, 4):
        raise ctx.error(f"input must be 3-D or 4-D, got shape {x.shape}")
    head = x.shape[3] if len(x.shape) == 4 else x.shape[2] // heads
    dim = int(a.get("rotary_embedding_dim", 0)) or head
    if dim % 2 or dim > head or cos.shape[-1] != dim // 2 or sin.shape != cos.shape:
        raise ctx.error(f"caches of shape {cos.shape}/{sin.shape} do not fit a rotary "
                        f"dimension of {dim}")
    attrs = {"interleaved": int(a.get("interleaved", 0)), "rotary_embedding_dim": dim,
             "num_heads": heads}
    return ctx.emit("RotaryEmbedding", node.inputs[:4], attrs, out_types=[(x.shape, x.dtype)])
