"""Shape rules of the transformer layers Attention, LinearAttention and RotaryEmbedding
(canonical attributes: pydla.frontend.onnx.ops.attention).

Rotary position ids are runtime indices the kernel bounds (checked_indices); the rest —
heads, head sizes, cache lengths, mask broadcasting — is proved here.
"""

from __future__ import annotations

from pydla.dtypes import DType
from pydla.loadable.validate import Expected, LayerCheck, broadcast, rule

_HEADS = 1 << 20
_PRECISIONS = (0, int(DType.FLOAT32), int(DType.FLOAT16), int(DType.FLOAT64),
               int(DType.BFLOAT16))


def _split_heads(check: LayerCheck, k: int, hidden: int, heads: int, what: str) -> int:
    """The head size of a (B, S, heads·D) input ``k``."""
    if hidden % heads:
        raise check.fail(f".inputs[{k}]", f"{heads} {what} heads do not divide the hidden "
                         f"size {hidden}")
    return hidden // heads


@rule("Attention")
def _attention(check: LayerCheck) -> Expected:
    check.arity(3, 7, (1, 4))
    q = check.x(0, (3, 4))
    rank = len(q.shape)
    k, v = check.x(1, rank), check.x(2, rank)
    mask, past_k, past_v, nonpad = (check.opt(i) for i in (3, 4, 5, 6))
    check.float_("scale")
    check.flag("is_causal")
    check.float_("softcap", 0.0)
    check.choice("softmax_precision", _PRECISIONS, 0)
    check.int_("qk_matmul_output_mode", 0, 0, 3)
    check.int_("left_window_size", -1, -1, 1 << 31)
    check.int_("right_window_size", -1, -1, 1 << 31)
    if rank == 3:
        hq = check.int_("q_num_heads", None, 1, _HEADS)
        hkv = check.int_("kv_num_heads", None, 1, _HEADS)
        (b, sq, _), skv = q.shape, k.shape[1]
        head = _split_heads(check, 0, q.shape[2], hq, "query")
        k_head = _split_heads(check, 1, k.shape[2], hkv, "key")
        v_head = _split_heads(check, 2, v.shape[2], hkv, "value")
        kv_ok = k.shape[0] == v.shape[0] == b and v.shape[1] == skv
    else:
        check.int_("q_num_heads", 0, 0, 0)  # 4-D inputs carry their heads in their shape
        check.int_("kv_num_heads", 0, 0, 0)
        b, hq, sq, head = q.shape
        _, hkv, skv, k_head = k.shape
        v_head = v.shape[3]
        kv_ok = k.shape[0] == b and v.shape[:3] == k.shape[:3]
    if not kv_ok or k_head != head or hq % hkv:
        raise check.fail(".inputs[1]", f"Q {q.shape}, K {k.shape} and V {v.shape} do not "
                         f"fit as attention heads")
    if (past_k is None) != (past_v is None):
        raise check.fail(".inputs[4]", "past_key and past_value come together")
    past = 0
    if past_k is not None and past_v is not None:
        past = past_k.shape[2] if len(past_k.shape) == 4 else -1
        check.need(past_k.shape == (b, hkv, past, head), 4, f"past_key {past_k.shape} does "
                   f"not fit {hkv} heads of {head}")
        check.need(past_v.shape == (b, hkv, past, v_head), 5, f"past_value {past_v.shape} "
                   f"does not fit past_key {past_k.shape}")
        check.need(nonpad is None, 6, "nonpad_kv_seqlen is not used with a past cache")
    if nonpad is not None:
        check.need(check.indices(6, 1).shape == (b,), 6, f"nonpad_kv_seqlen {nonpad.shape} "
                   f"is not one length per batch entry ({b})")
    total = past + skv
    scores = (b, hq, sq, total)
    if mask is not None:
        # a short mask is padded to the total length (with "masked") before broadcasting
        m = check.x(3, (1, 4)).shape
        if m[-1] > total or broadcast(check, [m[:-1] + (total,), scores], ".inputs[3]") \
                != scores:
            raise check.fail(".inputs[3]", f"mask {m} does not broadcast to {scores}")
    y = (b, hq, sq, v_head) if rank == 4 else (b, sq, hq * v_head)
    outs = [(y, q.dtype), ((b, hkv, total, head), k.dtype), ((b, hkv, total, v_head), v.dtype),
            (scores, q.dtype)]
    return outs[:len(check.outs)]


@rule("LinearAttention")
def _linear_attention(check: LayerCheck) -> Expected:
    check.arity(3, 6, (1, 2))
    q, k, v = check.x(0, 3), check.x(1, 3), check.x(2, 3)
    hq = check.int_("q_num_heads", None, 1, _HEADS)
    hkv = check.int_("kv_num_heads", None, 1, _HEADS)
    if hq % hkv:
        raise check.fail(".attrs.q_num_heads", f"{hq} is not a multiple of {hkv}")
    rule_ = check.choice("update_rule", ("linear", "gated", "delta", "gated_delta"))
    check.float_("scale")
    b, t, _ = q.shape
    dk = _split_heads(check, 0, q.shape[2], hq, "query")
    dv = _split_heads(check, 2, v.shape[2], hkv, "value")
    check.need(k.shape == (b, t, hkv * dk), 1, f"key {k.shape} is not {(b, t, hkv * dk)}")
    check.need(v.shape[:2] == (b, t), 2, f"value {v.shape} does not fit query {q.shape}")
    state = (b, hkv, dk, dv)
    past, decay, beta = check.opt(3), check.opt(4), check.opt(5)
    if past is not None:
        check.need(past.shape == state, 3, f"past_state {past.shape} is not {state}")
    gated, delta = rule_ in ("gated", "gated_delta"), rule_ in ("delta", "gated_delta")
    if gated != (decay is not None) or delta != (beta is not None):
        raise check.fail(".inputs", f"update_rule {rule_!r} takes decay exactly when gated "
                         "and beta exactly when a delta rule")
    if decay is not None:
        check.need(decay.shape in ((b, t, hkv), (b, t, hkv * dk)), 4,
                   f"decay {decay.shape} is not per head or per key channel")
    if beta is not None:
        check.need(beta.shape in ((b, t, hkv), (b, t, 1)), 5, f"beta {beta.shape} is not "
                   "per head")
    state_dtype = past.dtype if past is not None else q.dtype
    return [((b, t, hq * dv), q.dtype), (state, state_dtype)][:len(check.outs)]


@rule("RotaryEmbedding")
def _rotary_embedding(check: LayerCheck) -> Expected:
    check.arity(3, 4)
    x = check.x(0, (3, 4))
    heads = check.int_("num_heads", 0, 0, _HEADS)
    if len(x.shape) == 3:
        if heads < 1:
            raise check.fail(".attrs.num_heads", "a 3-D input needs num_heads")
        b, s = x.shape[:2]
        head = _split_heads(check, 0, x.shape[2], heads, "rotary")
    else:
        b, _, s, head = x.shape
    dim = check.int_("rotary_embedding_dim", 0, 0, head) or head
    if dim % 2:
        raise check.fail(".attrs.rotary_embedding_dim", f"{dim} is odd")
    check.flag("interleaved")
    cos, sin = check.x(1, (2, 3)), check.x(2, (2, 3))
    check.need(sin.shape == cos.shape and cos.shape[-1] == dim // 2, 2, f"caches "
               f"{cos.shape}/{sin.shape} do not hold {dim // 2} frequencies")
    if check.opt(3) is not None:  # position ids (B, S) index the caches' rows
        check.need(check.indices(3, 2).shape == (b, s), 3, f"position_ids are not {(b, s)}")
        check.need(len(cos.shape) == 2, 1, f"cache {cos.shape} is not (positions, {dim // 2})")
    else:
        rows = (b, s, dim // 2)
        check.need(len(cos.shape) == 3 and broadcast(check, [cos.shape, rows], ".inputs[1]")
                   == rows, 1, f"cache {cos.shape} does not broadcast to {rows}")
    return [(x.shape, x.dtype)]
