"""Attention, LinearAttention and RotaryEmbedding against onnxruntime."""

import numpy as np
import pytest
from onnx import helper

from tests.oracle import check_against_ort, make_model

RNG = np.random.default_rng(11)
B, HQ, HKV, SQ, SKV, D, DV = 2, 4, 2, 3, 5, 8, 6


def _rand(*shape, dtype=np.float32) -> np.ndarray:
    return RNG.standard_normal(shape).astype(dtype)


def _check(inputs: dict, outputs: list[str], opset: int = 23, tol: float = 1e-5,
           **attrs) -> None:
    names = ["Q", "K", "V", "attn_mask", "past_key", "past_value", "nonpad_kv_seqlen"]
    used = [n if n in inputs else "" for n in names]
    while used and not used[-1]:
        used.pop()
    node = helper.make_node("Attention", used, outputs, **attrs)
    model = make_model([node], {n: (x.dtype, x.shape) for n, x in inputs.items()},
                       [o for o in outputs if o], opset=opset)
    check_against_ort(model, inputs, rtol=tol, atol=tol)


def _qkv(hq: int = HQ, hkv: int = HKV, sq: int = SQ, skv: int = SKV, dtype=np.float32) -> dict:
    return {"Q": _rand(B, hq, sq, D, dtype=dtype), "K": _rand(B, hkv, skv, D, dtype=dtype),
            "V": _rand(B, hkv, skv, DV, dtype=dtype)}


@pytest.mark.parametrize("hq,hkv", [(2, 2), (4, 2), (4, 1)])
@pytest.mark.parametrize("causal", [0, 1])
def test_4d_heads_and_causal(hq, hkv, causal):
    _check(_qkv(hq, hkv), ["Y"], is_causal=causal)


def test_3d_inputs_with_heads():
    inputs = {"Q": _rand(B, SQ, HQ * D), "K": _rand(B, SKV, HKV * D),
              "V": _rand(B, SKV, HKV * DV)}
    _check(inputs, ["Y"], q_num_heads=HQ, kv_num_heads=HKV)
    _check(inputs, ["Y"], q_num_heads=HQ, kv_num_heads=HKV, is_causal=1, scale=0.3)


@pytest.mark.parametrize("shape", [(SQ, SKV), (1, SQ, SKV), (B, 1, SQ, SKV), (B, HQ, SQ, SKV)])
def test_masks_broadcast(shape):
    inputs = _qkv()
    inputs["attn_mask"] = _rand(*shape)
    _check(inputs, ["Y"])
    inputs["attn_mask"] = RNG.random(shape) > 0.3
    _check(inputs, ["Y"])


def test_bool_mask_with_fully_masked_row_gives_zeros():
    inputs = _qkv(hq=2, hkv=2)
    mask = np.ones((SQ, SKV), bool)
    mask[1] = False
    inputs["attn_mask"] = mask
    _check(inputs, ["Y"], opset=24)


@pytest.mark.parametrize("mode", [0, 1, 2, 3])
def test_past_present_and_qk_output_modes(mode):
    inputs = _qkv(skv=2)
    inputs["attn_mask"] = _rand(SQ, 6)
    inputs["past_key"], inputs["past_value"] = _rand(B, HKV, 4, D), _rand(B, HKV, 4, DV)
    _check(inputs, ["Y", "present_key", "present_value", "qk"], qk_matmul_output_mode=mode,
           softcap=2.0 if mode == 1 else 0.0)


def test_causal_with_past_is_bottom_right_aligned():
    inputs = _qkv(skv=SQ)
    inputs["past_key"], inputs["past_value"] = _rand(B, HKV, 2, D), _rand(B, HKV, 2, DV)
    _check(inputs, ["Y", "present_key", "present_value"], is_causal=1)


def test_qk_output_only():
    _check(_qkv(), ["Y", "", "", "qk"], qk_matmul_output_mode=2)


def test_scale_softcap_and_softmax_precision():
    _check(_qkv(), ["Y"], scale=0.05, softcap=1.5)
    _check(_qkv(), ["Y"], softmax_precision=11)


def test_fp16():
    _check(_qkv(dtype=np.float16), ["Y"], tol=2e-3, is_causal=1)


def test_nonpad_kv_seqlen():
    inputs = _qkv()
    inputs["nonpad_kv_seqlen"] = np.array([5, 3], np.int64)
    _check(inputs, ["Y"], opset=24)


def test_sliding_window():
    _check(_qkv(), ["Y"], opset=25, is_causal=1, left_window_size=1)
    _check(_qkv(sq=SKV), ["Y"], opset=25, left_window_size=1, right_window_size=2)


def test_attention_constant_folded():
    inputs = _qkv()
    node = helper.make_node("Attention", ["Q", "K", "V"], ["a"])
    add = helper.make_node("Add", ["a", "x"], ["y"])
    model = make_model([node, add], {"x": (np.float32, (B, HQ, SQ, DV))}, ["y"],
                       {k: v for k, v in inputs.items()}, opset=23)
    check_against_ort(model, {"x": _rand(B, HQ, SQ, DV)})


@pytest.mark.parametrize("rule", ["linear", "gated", "delta", "gated_delta"])
def test_linear_attention(rule):
    t, hq, hkv, dk, dv = 3, 4, 2, 4, 3
    inputs = {"q": _rand(B, t, hq * dk), "k": _rand(B, t, hkv * dk), "v": _rand(B, t, hkv * dv),
              "past": _rand(B, hkv, dk, dv)}
    names = ["q", "k", "v", "past", "", ""]
    if rule in ("gated", "gated_delta"):
        inputs["decay"] = -RNG.random((B, t, hkv * dk)).astype(np.float32)
        names[4] = "decay"
    if rule in ("delta", "gated_delta"):
        inputs["beta"] = RNG.random((B, t, hkv)).astype(np.float32)
        names[5] = "beta"
    while not names[-1]:
        names.pop()
    node = helper.make_node("LinearAttention", names, ["y", "state"], q_num_heads=hq,
                            kv_num_heads=hkv, update_rule=rule)
    model = make_model([node], {n: (x.dtype, x.shape) for n, x in inputs.items()},
                       ["y", "state"], opset=27)
    check_against_ort(model, inputs, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("interleaved", [0, 1])
@pytest.mark.parametrize("rot_dim", [0, 4])
def test_rotary_embedding(interleaved, rot_dim):
    x = _rand(B, 2, SQ, 8)
    cos, sin = _rand(10, (rot_dim or 8) // 2), _rand(10, (rot_dim or 8) // 2)
    pos = np.array([[0, 3, 9], [1, 2, 4]], np.int64)
    node = helper.make_node("RotaryEmbedding", ["x", "cos", "sin", "pos"], ["y"],
                            interleaved=interleaved, rotary_embedding_dim=rot_dim)
    feeds = {"x": x, "cos": cos, "sin": sin, "pos": pos}
    model = make_model([node], {n: (a.dtype, a.shape) for n, a in feeds.items()}, ["y"],
                       opset=23)
    check_against_ort(model, feeds)


def test_rotary_embedding_3d_without_positions():
    x = _rand(B, SQ, 2 * 8)
    cos, sin = _rand(B, SQ, 4), _rand(B, SQ, 4)
    node = helper.make_node("RotaryEmbedding", ["x", "cos", "sin"], ["y"], num_heads=2)
    feeds = {"x": x, "cos": cos, "sin": sin}
    model = make_model([node], {n: (a.dtype, a.shape) for n, a in feeds.items()}, ["y"],
                       opset=23)
    check_against_ort(model, feeds)
