"""CPU kernels of the transformer ops Attention, LinearAttention and RotaryEmbedding.

Attention's canonical attributes are complete (see the importer): ``scale`` is resolved,
``q_num_heads``/``kv_num_heads`` are 0 for 4-D inputs, ``softmax_precision`` is 0 when the
softmax runs at the input precision. The mask semantics follow ONNX's reference: a bool mask
selects, a float mask adds, a short mask is padded to the total length with "masked",
causal and window frontiers are bottom-right aligned (offset by the past length, or per
batch by ``nonpad_kv_seqlen``), and a query row with no attendable key gives zeros.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from pydla.backends.base import LayerSpec
from pydla.backends.cpu.kernels.indexing import checked_indices
from pydla.backends.cpu.registry import reference
from pydla.dtypes import DType, bf16_to_f32, f32_to_bf16

Inputs = Sequence[np.ndarray | None]


def _input(inputs: Inputs, i: int) -> np.ndarray | None:
    return inputs[i] if i < len(inputs) else None


def _heads(x: np.ndarray, heads: int) -> np.ndarray:
    """(B, S, H·D) → (B, H, S, D)."""
    b, s, hd = x.shape
    return x.reshape(b, s, heads, hd // heads).transpose(0, 2, 1, 3)


def _frontier(sq: int, skv: int, offset: int | np.ndarray,
              allowed_of_diff: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    """A 0/-inf bias from a rule on ``diff = (i + offset) - j``: (q, kv) or (B, 1, q, kv)."""
    i = np.arange(sq).reshape(sq, 1)
    j = np.arange(skv).reshape(1, skv)
    if np.ndim(offset) > 0:
        diff = (i + np.asarray(offset, np.int64).reshape(-1, 1, 1)) - j
        allowed = allowed_of_diff(diff)[:, None]
    else:
        allowed = allowed_of_diff((i + int(offset)) - j)
    return np.where(allowed, 0.0, -np.inf)


def _bias(a: dict, mask: np.ndarray | None, sq: int, skv: int, past: int,
          nonpad: np.ndarray | None, dtype: np.dtype) -> np.ndarray:
    """The additive bias, broadcastable to (B, Hq, q, kv)."""
    bias = np.zeros((sq, skv), dtype)
    if mask is not None:
        pad = skv - mask.shape[-1]
        if pad > 0:
            fill = False if mask.dtype == np.bool_ else -np.inf
            mask = np.pad(mask, [(0, 0)] * (mask.ndim - 1) + [(0, pad)], constant_values=fill)
        if mask.dtype == np.bool_:
            mask = np.where(mask, 0.0, -np.inf)
        bias = bias + mask.astype(dtype)
    # External cache: per-batch offsets; internal cache: the past length.
    offset: int | np.ndarray = past
    if past == 0 and nonpad is not None:
        offset = nonpad.reshape(-1).astype(np.int64) - sq
    if a["is_causal"]:
        bias = bias + _frontier(sq, skv, offset, lambda d: d >= 0)
    left, right = a["left_window_size"], a["right_window_size"]
    if left >= 0 or right >= 0:
        def in_window(d: np.ndarray) -> np.ndarray:
            ok = np.ones(d.shape, bool)
            if left >= 0:
                ok &= d <= left
            if right >= 0:
                ok &= -d <= right
            return ok

        bias = bias + _frontier(sq, skv, offset, in_window)
    if nonpad is not None:
        valid = np.arange(skv)[None, :] < nonpad.reshape(-1, 1)
        bias = bias + np.where(valid, 0.0, -np.inf).reshape(-1, 1, 1, skv)
    return bias.astype(dtype, copy=False)


def _softmax_in(x: np.ndarray, precision: int) -> np.ndarray:
    """Softmax over the last axis computed in ``precision``; an all -inf row gives zeros."""
    if precision == DType.FLOAT16:
        x = x.astype(np.float16)
    elif precision == DType.BFLOAT16:
        x = bf16_to_f32(f32_to_bf16(x))
    elif precision == DType.FLOAT64:
        x = x.astype(np.float64)
    elif precision == DType.FLOAT32:
        x = x.astype(np.float32, copy=False)
    m = np.max(x, axis=-1, keepdims=True)
    m = np.where(np.isneginf(m), 0, m)
    e = np.exp(x - m)
    s = np.sum(e, axis=-1, keepdims=True)
    e /= np.where(s == 0, 1, s)
    if precision == DType.BFLOAT16:
        e = bf16_to_f32(f32_to_bf16(e))
    return e


@reference("Attention")
def attention(spec: LayerSpec, inputs: Inputs) -> list[np.ndarray]:
    a = dict(spec.attrs)
    q, k, v = inputs[0], inputs[1], inputs[2]
    mask, past_k, past_v = _input(inputs, 3), _input(inputs, 4), _input(inputs, 5)
    nonpad = _input(inputs, 6)
    three_d = q.ndim == 3
    if three_d:
        q, k, v = _heads(q, a["q_num_heads"]), _heads(k, a["kv_num_heads"]), \
            _heads(v, a["kv_num_heads"])
    dtype = q.dtype
    present_k = k if past_k is None else np.concatenate([past_k, k], axis=2)
    present_v = v if past_v is None else np.concatenate([past_v, v], axis=2)
    b, hq, sq, d = q.shape
    hkv, skv = present_k.shape[1], present_k.shape[2]
    group = hq // hkv
    # Q and K are each scaled by √scale (as ONNX's function body does), in the input type.
    root = dtype.type(np.sqrt(a["scale"]))
    # Grouped heads: query head h reads KV head h // group (no copy of K or V).
    q5 = (q * root).reshape(b, hkv, group, sq, d)
    kt = (present_k * root).transpose(0, 1, 3, 2)[:, :, None]
    scores = np.matmul(q5, kt).reshape(b, hq, sq, skv)
    softcap = a["softcap"]
    raw = scores
    if softcap > 0:
        scores = softcap * np.tanh(scores / softcap)
    past = 0 if past_k is None else past_k.shape[2]
    bias = _bias(a, mask, sq, skv, past, nonpad, dtype)
    biased = scores + bias
    probs = _softmax_in(biased, a["softmax_precision"])
    # A row is empty when its bias masks every key (decided on the bias, not on the scores).
    empty = np.isneginf(np.max(bias, axis=-1, keepdims=True))
    probs = np.where(empty, 0, probs).astype(dtype, copy=False)
    y = np.matmul(probs.reshape(b, hkv, group, sq, skv),
                  present_v[:, :, None]).reshape(b, hq, sq, -1)
    if three_d:
        y = y.transpose(0, 2, 1, 3).reshape(b, sq, -1)
    mode = a["qk_matmul_output_mode"]
    qk = {0: raw, 1: scores, 2: biased, 3: probs}[mode]
    outs = [y, present_k, present_v, np.broadcast_to(qk, (b, hq, sq, skv))]
    return outs[:len(spec.outputs)]


@reference("LinearAttention")
def linear_attention(spec: LayerSpec, inputs: Inputs) -> list[np.ndarray]:
    """The recurrence run token by token in float32, as ONNX's reference does."""
    a = spec.attrs
    query, key, value = inputs[0], inputs[1], inputs[2]
    past, decay, beta = _input(inputs, 3), _input(inputs, 4), _input(inputs, 5)
    hq, hkv = a["q_num_heads"], a["kv_num_heads"]
    rule = a["update_rule"]
    b, t, _ = query.shape
    dk = query.shape[-1] // hq
    dv = value.shape[-1] // hkv
    group = hq // hkv
    q4 = _heads(query, hq).astype(np.float32).reshape(b, hkv, group, t, dk)
    k4 = _heads(key, hkv).astype(np.float32)
    v4 = _heads(value, hkv).astype(np.float32)
    g4 = beta4 = None
    if rule in ("gated", "gated_delta"):
        per_head = decay.shape[-1] == hkv
        g4 = (decay.reshape(b, t, hkv, 1).transpose(0, 2, 1, 3) if per_head
              else _heads(decay, hkv)).astype(np.float32)
    if rule in ("delta", "gated_delta"):
        beta4 = beta.reshape(b, t, beta.shape[-1], 1).transpose(0, 2, 1, 3).astype(np.float32)
    state = (np.zeros((b, hkv, dk, dv), np.float32) if past is None
             else past.astype(np.float32))
    out = np.empty((b, hkv, group, t, dv), np.float32)
    for i in range(t):  # the recurrence is sequential in time
        k_t, v_t = k4[:, :, i], v4[:, :, i]
        if g4 is not None:
            state = state * np.exp(g4[:, :, i])[..., None]
        if beta4 is not None:
            retrieved = np.einsum("bhdm,bhd->bhm", state, k_t)
            v_t = beta4[:, :, i] * (v_t - retrieved)
        state = state + k_t[..., :, None] * v_t[..., None, :]
        out[:, :, :, i] = a["scale"] * np.einsum("bhgd,bhdm->bhgm", q4[:, :, :, i], state)
    y = out.reshape(b, hq, t, dv).transpose(0, 2, 1, 3).reshape(b, t, hq * dv)
    return [y, state]


@reference("RotaryEmbedding")
def rotary_embedding(spec: LayerSpec, inputs: Inputs) -> list[np.ndarray]:
    a = spec.attrs
    x, cos, sin, pos = inputs[0], inputs[1], inputs[2], _input(inputs, 3)
    four_d = x.ndim == 4
    # Work in (B, S, H, D).
    xs = x.transpose(0, 2, 1, 3) if four_d else \
        x.reshape(x.shape[0], x.shape[1], a["num_heads"], -1)
    dim = a["rotary_embedding_dim"] or xs.shape[-1]
    if pos is not None:
        pos = checked_indices(spec, pos, cos.shape[0], "the position cache")
        cos, sin = cos[pos], sin[pos]
    cos, sin = cos[:, :, None, :], sin[:, :, None, :]
    rot = xs[..., :dim]
    if a["interleaved"]:
        x1, x2 = rot[..., 0::2], rot[..., 1::2]
    else:
        x1, x2 = rot[..., :dim // 2], rot[..., dim // 2:]
    real = cos * x1 - sin * x2
    imag = sin * x1 + cos * x2
    if a["interleaved"]:
        rotated = np.stack([real, imag], axis=-1).reshape(rot.shape)
    else:
        rotated = np.concatenate([real, imag], axis=-1)
    y = np.concatenate([rotated, xs[..., dim:]], axis=-1)
    return [y.transpose(0, 2, 1, 3) if four_d else y.reshape(x.shape)]
