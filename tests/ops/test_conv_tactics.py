"""The fast Conv tactics (pydla/backends/cpu/kernels/conv_fast) against the reference Conv
kernel and onnxruntime: geometry (strides, pads, dilation, groups, depthwise, batch), half
layers, every natively fused epilogue, the applies() refusals, prebound steps, the
Winograd filter cache and the thread settings.

Tolerance: max|Δ| ≤ tol · max(1, max|reference|), tol = 1e-4 for fp32 (2e-4 for Winograd
F(4×4), which rounds more: ≈ 1e-5 observed).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numba
import numpy as np
import pytest
from onnx import helper

from pydla.backends.base import LayerSpec, TensorSpec
from pydla.backends.cpu import threads, workspace
from pydla.backends.cpu.backend import bind_layer
from pydla.backends.cpu.kernels.conv_fast import gemm_c16, simd, taps_c16, winograd
from pydla.backends.cpu.kernels.conv_fast.epilogue import compile_epilogue, native_epilogue
from pydla.backends.cpu.kernels.conv_fast.gemm import MR, MR7
from pydla.backends.cpu.kernels.conv_fast.geometry import conv2d
from pydla.backends.cpu.registry import REFERENCE, TACTICS, candidate_tactics
from pydla.backends.cpu.steps import prebind
from pydla.builder import BuildOptions, build, build_graph
from pydla.dtypes import DType
from pydla.engine import LoadedModule
from pydla.errors import KernelError
from pydla.loadable import read_loadable, write_loadable
from pydla.plan.lower import lower
from tests.oracle import make_model, model_tolerance_ok, run_ort


@pytest.fixture(autouse=True)
def _split_small_layers(monkeypatch: pytest.MonkeyPatch) -> None:
    """The layers here are small; split them anyway, so the threads' parts are tested (the
    unsplit path is every layer's below threads.PARALLEL_MIN_FLOPS, tested by the models)."""
    monkeypatch.setattr(threads, "PARALLEL_MIN_FLOPS", 0)

RNG = np.random.default_rng(5)
FAST = ("gemm1x1", "gemm_c16", "gemv", "depthwise", "depthwise_c16", "direct_c16",
        "winograd4", "winograd2", "im2col", "taps_c16")
# The channel-blocked layout's tactics (pydla.plan.layouts; tests/unit/test_layouts.py).
BLOCKED = ("gemm_nchw16c", "depthwise_nchw16c", "direct_nchw16c", "gemv_nchw16c",
           "taps_nchw16c", "winograd4_nchw16c", "winograd2_nchw16c")
# Few output channels per group, either layout (tests/ops/test_conv_direct_planes.py).
DIRECT_PLANES = ("direct_planes", "direct_planes_nchw16c")


def _tol(tactic: str) -> float:
    return 2e-4 if tactic == "winograd4" else 1e-4


def _rand(*shape: int, dtype: Any = np.float32) -> np.ndarray:
    return RNG.standard_normal(shape).astype(dtype)


def _close(got: np.ndarray, want: np.ndarray, tol: float, label: str = "") -> None:
    got64, want64 = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert got64.shape == want64.shape, label
    err = float(np.max(np.abs(got64 - want64)))
    bound = tol * max(1.0, float(np.max(np.abs(want64))))
    assert err <= bound, f"{label}: max|Δ| {err:.3g} > {bound:.3g}"


def _out_shape(x: Sequence[int], w: Sequence[int], attrs: Mapping[str, Any]) -> tuple[int, ...]:
    sh, sw = attrs["strides"]
    dh, dw = attrs["dilations"]
    t, left, b, r = attrs["pads"]
    oh = (x[2] + t + b - (w[2] - 1) * dh - 1) // sh + 1
    ow = (x[3] + left + r - (w[3] - 1) * dw - 1) // sw + 1
    return x[0], w[0], oh, ow


def _attrs(strides: Sequence[int] = (1, 1), pads: Sequence[int] = (0, 0, 0, 0),
           dilations: Sequence[int] = (1, 1), group: int = 1) -> dict[str, Any]:
    return {"strides": list(strides), "dilations": list(dilations), "pads": list(pads),
            "group": group}


def _spec(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, attrs: Mapping[str, Any],
          tactic: str, extra: Sequence[np.ndarray | None] = (),
          program: Sequence[Mapping[str, Any]] | None = None,
          dtype: DType = DType.FLOAT32) -> LayerSpec:
    def ts(a: np.ndarray | None) -> TensorSpec | None:
        return None if a is None else TensorSpec(a.shape, dtype)

    own = [ts(x), ts(w)] + ([ts(b)] if b is not None or extra else [])
    out = _out_shape(x.shape, w.shape, attrs)
    a = dict(attrs)
    if program is not None:
        a["epilogue"] = {"program": [{**s, "shape": list(out), "dtype": dtype.name.lower()}
                                     for s in program], "inputs": len(extra)}
    return LayerSpec("conv", "Conv", a, tuple(own) + tuple(ts(e) for e in extra),
                     (TensorSpec(out, dtype),), tactic)


def _run(spec: LayerSpec, inputs: Sequence[np.ndarray | None]) -> np.ndarray:
    out = np.empty(spec.outputs[0].shape, spec.outputs[0].dtype.np)
    with np.errstate(all="ignore"):
        bind_layer(spec)(list(inputs), [out])
    return out


def _with_tactic(spec: LayerSpec, tactic: str) -> LayerSpec:
    return LayerSpec(spec.name, spec.op, spec.attrs, spec.inputs, spec.outputs, tactic)


def _check_all(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, attrs: Mapping[str, Any],
               expected: set[str]) -> None:
    """Every fast tactic that applies matches the reference; ``expected`` is what applies."""
    spec = _spec(x, w, b, attrs, REFERENCE)
    inputs = [x, w] + ([b] if b is not None else [])
    want = _run(spec, inputs)
    pixels = int(np.prod(_out_shape(x.shape, w.shape, attrs)[2:]))
    if attrs.get("group", 1) == 1 and (w[0].size <= 160 or pixels <= 4) and w.shape[0] >= 4:
        expected = expected | {"direct_c16"}  # few input channels or pixels: direct too
    if "gemm1x1" in expected and tuple(attrs.get("strides", (1, 1))) == (1, 1):
        expected = expected | {"gemm_c16"}  # 1×1 stride 1: pixels as rows too
    if "gemm_c16" in expected and pixels <= 4:
        expected = expected | {"gemv"}  # a few pixels: dot products
    if attrs.get("group", 1) == 1 and w[0].size >= 64:
        expected = expected | {"taps_c16"}  # any one-group layer with K ≥ 64
    applicable = {t.name for t in candidate_tactics(spec) if t.name in FAST}
    assert applicable == expected
    for name in sorted(applicable):
        _close(_run(_with_tactic(spec, name), inputs), want, _tol(name), name)


# -- geometry -------------------------------------------------------------------------------

@pytest.mark.parametrize("n,c,hw,m", [(1, 8, 9, 16), (4, 16, 12, 8), (1, 64, 20, 64),
                                      (2, 3, 7, 5), (1, 130, 6, 33)])
def test_pointwise_1x1(n: int, c: int, hw: int, m: int) -> None:
    _check_all(_rand(n, c, hw, hw + 1), _rand(m, c, 1, 1), _rand(m), _attrs(),
               {"gemm1x1", "im2col"})


@pytest.mark.parametrize("n,c,h,w,m,pads", [
    (1, 16, 12, 12, 16, (1, 1, 1, 1)),
    (1, 8, 13, 11, 24, (1, 1, 1, 1)),     # partial tiles on both axes
    (4, 16, 9, 10, 8, (1, 1, 1, 1)),      # batch
    (1, 32, 8, 8, 32, (0, 0, 0, 0)),      # valid
    (1, 5, 7, 9, 7, (2, 0, 1, 2)),        # asymmetric pads, channels not a multiple of 16
    (2, 17, 5, 5, 3, (1, 1, 1, 1)),
    (1, 64, 28, 28, 64, (1, 1, 1, 1)),
    (1, 20, 3, 3, 20, (1, 1, 1, 1)),      # smaller than a tile
])
def test_3x3_stride1(n: int, c: int, h: int, w: int, m: int, pads: Sequence[int]) -> None:
    _check_all(_rand(n, c, h, w), _rand(m, c, 3, 3), _rand(m), _attrs(pads=pads),
               {"winograd4", "winograd2", "im2col"})


@pytest.mark.parametrize("k,strides,pads,dilations", [
    ((3, 3), (2, 2), (1, 1, 1, 1), (1, 1)),
    ((3, 3), (2, 1), (1, 0, 1, 2), (1, 1)),
    ((3, 3), (1, 1), (2, 2, 2, 2), (2, 2)),
    ((7, 7), (2, 2), (3, 3, 3, 3), (1, 1)),
    ((1, 1), (2, 2), (0, 0, 0, 0), (1, 1)),
    ((1, 1), (3, 2), (0, 0, 0, 0), (1, 1)),
    ((1, 1), (1, 1), (0, 0, 1, 1), (1, 1)),
    ((5, 3), (1, 2), (2, 1, 2, 1), (1, 1)),
    ((2, 2), (3, 3), (0, 0, 1, 1), (1, 2)),
])
def test_general_geometry(k: Sequence[int], strides: Sequence[int], pads: Sequence[int],
                          dilations: Sequence[int]) -> None:
    # A 1×1 kernel without padding is a GEMM at any stride (the pixels gathered in packing).
    expected = {"gemm1x1", "im2col"} if tuple(k) == (1, 1) and not any(pads) else {"im2col"}
    for n in (1, 4):
        _check_all(_rand(n, 6, 15, 14), _rand(10, 6, *k), _rand(10),
                   _attrs(strides, pads, dilations), expected)


def test_im2col_many_channels() -> None:
    """More output channels than the staging block holds: they go in sub-blocks."""
    _check_all(_rand(2, 32, 20, 20), _rand(300, 32, 1, 1), _rand(300),
               _attrs(pads=(1, 1, 1, 1)), {"im2col"})
    _check_all(_rand(1, 16, 9, 9), _rand(520, 16, 3, 3), _rand(520), _attrs((2, 2), (1,) * 4),
               {"im2col"})


@pytest.mark.parametrize("c,m,group", [(8, 8, 2), (12, 6, 3), (16, 32, 4), (6, 12, 6)])
def test_groups(c: int, m: int, group: int) -> None:
    _check_all(_rand(2, c, 9, 9), _rand(m, c // group, 3, 3), _rand(m),
               _attrs(pads=(1, 1, 1, 1), group=group), {"im2col"})


@pytest.mark.parametrize("k,strides,pads,dilations", [
    ((3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),
    ((3, 3), (2, 2), (1, 1, 1, 1), (1, 1)),
    ((3, 3), (2, 2), (0, 0, 1, 1), (1, 1)),
    ((5, 5), (1, 1), (2, 2, 2, 2), (1, 1)),
    ((5, 5), (2, 2), (2, 2, 2, 2), (1, 1)),
    ((3, 3), (1, 1), (2, 2, 2, 2), (2, 2)),
    ((3, 5), (2, 1), (0, 1, 2, 3), (1, 1)),
    ((1, 1), (1, 1), (0, 0, 0, 0), (1, 1)),
    ((7, 7), (3, 3), (3, 3, 3, 3), (1, 1)),
    ((3, 3), (1, 1), (0, 2, 2, 0), (1, 1)),   # output the input's size, padded asymmetrically
    ((2, 2), (1, 1), (0, 0, 1, 1), (1, 1)),
    ((3, 3), (1, 1), (3, 3, 3, 3), (3, 3)),
])
def test_depthwise(k: Sequence[int], strides: Sequence[int], pads: Sequence[int],
                   dilations: Sequence[int]) -> None:
    for n in (1, 4):
        c = 24
        expected = {"depthwise", "depthwise_c16", "im2col"}
        if tuple(k) == (1, 1) and tuple(strides) == (1, 1):
            expected = {"depthwise", "depthwise_c16", "im2col"}  # group > 1: not a plain GEMM
        _check_all(_rand(n, c, 17, 16), _rand(c, 1, *k), _rand(c),
                   _attrs(strides, pads, dilations, group=c), expected)


@pytest.mark.parametrize("w", [17, 27])
@pytest.mark.parametrize("m", [32, 48, 64, 80, 61])
def test_direct_output_blocks(m: int, w: int) -> None:
    """direct_c16 computes 1 to 4 blocks of 16 output channels together (32: two, eight
    pixels a call; 48: three, 64: four, 80: five blocks one by one, 61: a partial last
    block); rows of 9 and 14 output pixels end in calls of 8, 4 and 1."""
    _check_all(_rand(2, 3, 19, w), _rand(m, 3, 5, 5), _rand(m), _attrs((2, 2), (2, 2, 2, 2)),
               {"im2col", "direct_c16"})


def test_squeeze_excitation_gemv() -> None:
    """1×1 convolutions on pooled vectors (K large, one pixel) and a 2×2 plane."""
    _check_all(_rand(2, 576, 1, 1), _rand(144, 576, 1, 1), _rand(144), _attrs(),
               {"gemm1x1", "im2col", "direct_c16"})
    _check_all(_rand(1, 300, 2, 2), _rand(40, 300, 1, 1), _rand(40), _attrs(),
               {"gemm1x1", "im2col", "direct_c16"})


def test_no_bias() -> None:
    for k, expected in (((1, 1), {"gemm1x1", "im2col"}),
                        ((3, 3), {"winograd4", "winograd2", "im2col"})):
        pad = k[0] // 2
        _check_all(_rand(1, 16, 10, 10), _rand(8, 16, *k), None, _attrs(pads=[pad] * 4),
                   expected)
    _check_all(_rand(1, 16, 10, 10), _rand(16, 1, 3, 3), None,
               _attrs(pads=(1, 1, 1, 1), group=16), {"depthwise", "depthwise_c16", "im2col"})


def test_resnet_shapes() -> None:
    """The ResNet-50 and performance-note layers at full size (batch 1)."""
    cases = [((1, 64, 56, 56), (64, 64, 3, 3), 1, 1), ((1, 256, 14, 14), (256, 256, 3, 3), 1, 1),
             ((1, 512, 7, 7), (512, 512, 3, 3), 1, 1), ((1, 128, 40, 40), (256, 128, 1, 1), 1, 0),
             ((1, 3, 64, 64), (64, 3, 7, 7), 2, 3), ((1, 96, 40, 40), (96, 1, 3, 3), 1, 1)]
    for xs, ws, stride, pad in cases:
        group = xs[1] if ws[1] == 1 and xs[1] > 1 else 1
        x, w, b = _rand(*xs), _rand(*ws) * np.float32(0.1), _rand(ws[0])
        spec = _spec(x, w, b, _attrs((stride, stride), [pad] * 4, group=group), REFERENCE)
        want = _run(spec, [x, w, b])
        for t in candidate_tactics(spec):
            _close(_run(_with_tactic(spec, t.name), [x, w, b]), want, _tol(t.name),
                   f"{t.name} {xs} {ws}")


@pytest.mark.parametrize("xs,ws,stride,pad,want", [
    ((2, 40, 7, 7), (40, 40, 3, 3), 1, 1, (MR7, False)),    # 7 wide: whole panels of 7
    ((1, 24, 28, 28), (40, 24, 3, 3), 2, 1, (MR7, False)),  # strided to 14 wide
    ((1, 24, 39, 39), (36, 24, 3, 3), 2, 1, (MR7, False)),  # 20 wide: 21 beats 24
    ((1, 24, 19, 19), (36, 24, 3, 3), 2, 1, (MR, False)),   # 10 wide: 12 beats 14
    ((2, 24, 9, 9), (20, 24, 3, 3), 1, 1, (MR, True)),      # stride 1: across rows
    ((1, 80, 7, 7), (24, 80, 1, 1), 1, 0, (MR7, False)),    # 1×1, rows of 7
])
def test_taps_panel_rows(xs: Sequence[int], ws: Sequence[int], stride: int, pad: int,
                         want: tuple[int, bool]) -> None:
    """taps_c16 splits rows into panels of 12 or 7 by the waste; every choice is exact."""
    x, w, b = _rand(*xs), _rand(*ws) * np.float32(0.1), _rand(ws[0])
    spec = _spec(x, w, b, _attrs((stride, stride), [pad] * 4), REFERENCE)
    geo = conv2d(spec)
    assert geo is not None and taps_c16.panels(geo) == want
    _close(_run(_with_tactic(spec, "taps_c16"), [x, w, b]), _run(spec, [x, w, b]),
           _tol("taps_c16"), f"taps_c16 {xs} {ws}")


@pytest.mark.parametrize("pixels,avx512,avx2", [
    (49, MR7, 6), (196, MR7, 6), (63, MR7, 6), (784, MR, MR), (144, MR, MR),
    (20, MR7, MR), (24, MR, MR), (3136, MR, MR)])
def test_gemm_c16_panel_rows(pixels: int, avx512: int, avx2: int,
                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Pixels as rows: panels of the small row count (7 with AVX-512, 6 on AVX2, where 7
    rows run as passes of 4 and 3 at 7/8 of the FMA peak) only where they cost 2 % less
    than panels of 12 — by the rows 12 would waste and how fast each shape runs."""
    for budget, per_vector, small, want in ((24, 1, MR7, avx512), (6, 2, 6, avx2)):
        monkeypatch.setattr(simd, "ACC_VECTORS", budget)
        monkeypatch.setattr(simd, "NATIVE_PER_VECTOR", per_vector)
        assert gemm_c16.rows_for(pixels, small) == want, (budget, pixels)


def test_gemm_c16_rows_of_seven() -> None:
    """A 7×7 plane (49 pixels in panels of gemm.MR_SMALL: 7 whole ones with AVX-512, 8 and
    a ragged one of 6 on AVX2), batch 2, channels not multiples of 16."""
    x, w, b = _rand(2, 72, 7, 7), _rand(40, 72, 1, 1) * np.float32(0.1), _rand(40)
    spec = _spec(x, w, b, _attrs(), REFERENCE)
    _close(_run(_with_tactic(spec, "gemm_c16"), [x, w, b]), _run(spec, [x, w, b]),
           _tol("gemm_c16"), "gemm_c16 7x7")


@pytest.mark.parametrize("tactic", ["winograd4", "winograd2"])
@pytest.mark.parametrize("m,epilogue", [(136, None), (130, "residual"), (256, "relu")])
def test_winograd_channel_groups(tactic: str, m: int, epilogue: str | None) -> None:
    """Batch 1 on a small plane: the threads split the output channels (each streams its
    part of U), channel counts past whole strips and blocks of 16 included."""
    x, w, b = _rand(1, 24, 10, 9), _rand(m, 24, 3, 3) * np.float32(0.2), _rand(m)
    tile = 4 if tactic == "winograd4" else 2
    assert winograd.groups(1, -(-10 // tile), -(-9 // tile), m, 2) == 2
    assert winograd.groups(1, 7, 7, m, 2) == 1  # 49 tiles: chunks of tiles
    extra = [_rand(1, m, 10, 9)] if epilogue == "residual" else []
    program = {"residual": [_step("Add", [0, 1])], "relu": [_step("Relu", [0])],
               None: None}[epilogue]
    spec = _spec(x, w, b, _attrs(pads=(1, 1, 1, 1)), REFERENCE, extra=extra, program=program)
    try:
        threads.set_num_threads(2)
        got = _run(_with_tactic(spec, tactic), [x, w, b, *extra])
    finally:
        threads.set_num_threads(None)
        threads.configure()
    _close(got, _run(spec, [x, w, b, *extra]), _tol(tactic), f"{tactic} m={m}")


# -- half-precision layers --------------------------------------------------------------------

@pytest.mark.parametrize("tactic,k,group", [("gemm1x1", 1, 1), ("winograd4", 3, 1),
                                            ("winograd2", 3, 1), ("im2col", 3, 1),
                                            ("depthwise", 3, 8), ("depthwise_c16", 3, 8),
                                            ("direct_c16", 3, 1)])
def test_fp16_layer(tactic: str, k: int, group: int) -> None:
    x = _rand(2, 8, 10, 10, dtype=np.float16)
    w = (_rand(16 if group == 1 else 8, 8 // group, k, k) * 0.3).astype(np.float16)
    b = _rand(w.shape[0], dtype=np.float16)
    attrs = _attrs(pads=[k // 2] * 4, group=group)
    program = [{"op": "Relu", "in": [0], "attrs": {}}]
    spec = _spec(x, w, b, attrs, tactic, program=program, dtype=DType.FLOAT16)
    got = _run(spec, [x, w, b])
    want = _run(_with_tactic(spec, REFERENCE), [x, w, b])
    assert got.dtype == np.float16
    _close(got, want, 4e-3, tactic)


def test_bf16_layer() -> None:
    def bf16(a: np.ndarray) -> np.ndarray:  # round to nearest even, as uint16 bit patterns
        bits = a.astype(np.float32).view(np.uint32)
        return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)

    x, w, b = bf16(_rand(1, 8, 9, 9)), bf16(_rand(8, 8, 3, 3) * 0.3), bf16(_rand(8))
    spec = _spec(x, w, b, _attrs(pads=(1, 1, 1, 1)), "winograd2", dtype=DType.BFLOAT16)
    got = _run(spec, [x, w, b])
    want = _run(_with_tactic(spec, REFERENCE), [x, w, b])

    def value(a: np.ndarray) -> np.ndarray:
        return (a.astype(np.uint32) << 16).view(np.float32)

    _close(value(got), value(want), 2e-2, "bf16")


# -- epilogues ------------------------------------------------------------------------------

def _step(op: str, regs: Sequence[int], **attrs: Any) -> dict[str, Any]:
    return {"op": op, "in": list(regs), "attrs": attrs}


# (name, program, extra inputs as functions of the output shape)
EPILOGUES: list[tuple[str, list[dict[str, Any]], list[Any]]] = [
    ("relu", [_step("Relu", [0])], []),
    ("clip", [_step("Clip", [0], min=0.0, max=6.0)], []),
    ("clip_max_only", [_step("Clip", [0], max=0.5)], []),
    ("leaky_relu", [_step("LeakyRelu", [0], alpha=0.1)], []),
    ("sigmoid", [_step("Sigmoid", [0])], []),
    ("silu", [_step("Sigmoid", [0]), _step("Mul", [0, 1])], []),
    ("hard_sigmoid", [_step("HardSigmoid", [0], alpha=0.2, beta=0.5)], []),
    ("hard_swish", [_step("HardSwish", [0])], []),
    ("swish", [_step("Swish", [0], alpha=1.5)], []),
    ("bias_add", [_step("Add", [0, 1])], [lambda s: _rand(1, s[1], 1, 1)]),
    ("residual_relu", [_step("Add", [1, 0]), _step("Relu", [2])], [lambda s: _rand(*s)]),
    ("silu_residual", [_step("Sigmoid", [0]), _step("Mul", [0, 2]), _step("Add", [1, 3])],
     [lambda s: _rand(*s)]),
    ("se_scale", [_step("Mul", [0, 1])], [lambda s: _rand(s[0], s[1], 1, 1)]),
    ("scalar_sub_div", [_step("Sub", [0, 1]), _step("Div", [2, 1])],
     [lambda s: np.array(1.5, np.float32)]),
    ("prelu", [_step("PRelu", [0, 1])], [lambda s: _rand(s[1], 1, 1)]),
    ("max_min", [_step("Max", [0, 1]), _step("Min", [2, 0])], [lambda s: _rand(*s)]),
    ("two_residuals", [_step("Add", [0, 1]), _step("Sub", [3, 2])],
     [lambda s: _rand(*s), lambda s: _rand(*s)]),
]

LAYERS = {  # tactic -> (x shape, w shape, attrs)
    "gemm1x1": ((2, 16, 9, 9), (24, 16, 1, 1), _attrs()),
    "gemm_c16": ((2, 40, 7, 9), (72, 40, 1, 1), _attrs()),
    "gemv": ((2, 72, 1, 2), (24, 72, 1, 1), _attrs()),
    "taps_c16": ((2, 20, 11, 13), (40, 20, 3, 3), _attrs((2, 1), (1, 2, 0, 1), (1, 2))),
    "depthwise": ((2, 16, 9, 9), (16, 1, 3, 3), _attrs(pads=(1, 1, 1, 1), group=16)),
    # 20 channels: one full block of 16 and a partial one
    "depthwise_c16": ((2, 20, 9, 9), (20, 1, 3, 3), _attrs((2, 2), (1, 1, 1, 1), group=20)),
    # 20 output channels: a full block of 16 and a partial one
    "direct_c16": ((2, 3, 11, 9), (20, 3, 3, 3), _attrs((2, 2), (1, 1, 1, 1))),
    "winograd4": ((2, 16, 9, 9), (24, 16, 3, 3), _attrs(pads=(1, 1, 1, 1))),
    "winograd2": ((2, 16, 9, 9), (24, 16, 3, 3), _attrs(pads=(1, 1, 1, 1))),
    "im2col": ((2, 16, 9, 9), (24, 8, 3, 3), _attrs((2, 2), (1, 1, 1, 1), group=2)),
}


@pytest.mark.parametrize("tactic", FAST)
@pytest.mark.parametrize("name,program,extra", EPILOGUES, ids=[e[0] for e in EPILOGUES])
def test_native_epilogue(tactic: str, name: str, program: list[dict[str, Any]],
                         extra: list[Any]) -> None:
    xs, ws, attrs = LAYERS[tactic]
    x, w, b = _rand(*xs), _rand(*ws) * np.float32(0.3), _rand(ws[0])
    out = _out_shape(xs, ws, attrs)
    extras = [f(out) for f in extra]
    spec = _spec(x, w, b, attrs, tactic, extra=extras, program=program)
    assert native_epilogue(spec.attrs["epilogue"]["program"])
    assert compile_epilogue(spec) is not None  # really native, not the generic fallback
    inputs = [x, w, b, *extras]
    want = _run(_with_tactic(spec, REFERENCE), inputs)  # conv, then the generic program
    _close(_run(spec, inputs), want, _tol(tactic), f"{tactic}/{name}")


@pytest.mark.parametrize("tactic", FAST)
def test_epilogue_fallback(tactic: str) -> None:
    """A register broadcast along channels is not native: the generic path runs it."""
    xs, ws, attrs = LAYERS[tactic]
    x, w, b = _rand(*xs), _rand(*ws), _rand(ws[0])
    out = _out_shape(xs, ws, attrs)
    extra = [_rand(1, 1, out[2], out[3])]
    spec = _spec(x, w, b, attrs, tactic, extra=extra,
                 program=[_step("Add", [0, 1]), _step("Relu", [2])])
    assert compile_epilogue(spec) is None
    want = _run(_with_tactic(spec, REFERENCE), [x, w, b, *extra])
    _close(_run(spec, [x, w, b, *extra]), want, _tol(tactic), tactic)


def test_epilogue_without_bias_input() -> None:
    """Inputs [X, W, None, residual]: the bias slot absent, the epilogue's input after it."""
    x, w, r = _rand(1, 16, 8, 8), _rand(16, 16, 3, 3), _rand(1, 16, 8, 8)
    spec = _spec(x, w, None, _attrs(pads=(1, 1, 1, 1)), "winograd2", extra=[r],
                 program=[_step("Add", [0, 1]), _step("Relu", [2])])
    assert spec.inputs[2] is None
    want = _run(_with_tactic(spec, REFERENCE), [x, w, None, r])
    _close(_run(spec, [x, w, None, r]), want, 1e-4)


def test_native_epilogue_predicate() -> None:
    assert native_epilogue([_step("Relu", [0]) | {"shape": [1], "dtype": "float32"}])
    unsupported = [
        [_step("Tanh", [0])],                                  # op not implemented natively
        [_step("Clip", [0, 1, 2])],                            # bounds as tensors
        [_step("Equal", [0, 1])],                              # bool result
    ]
    for program in unsupported:
        steps = [s | {"shape": [1, 2], "dtype": "float32"} for s in program]
        assert not native_epilogue(steps)
    smaller = [_step("Add", [1, 2]) | {"shape": [1, 2, 1, 1], "dtype": "float32"},
               _step("Add", [0, 3]) | {"shape": [1, 2, 4, 4], "dtype": "float32"}]
    assert not native_epilogue(smaller)  # a step on the extra inputs alone


# -- applies() refusals ------------------------------------------------------------------------

REFUSED = [
    ("gemm1x1", (1, 8, 6, 6), (8, 8, 3, 3), _attrs(pads=(1, 1, 1, 1))),
    ("gemm1x1", (1, 8, 6, 6), (8, 8, 3, 3), _attrs((2, 2))),
    ("gemm1x1", (1, 8, 6, 6), (8, 4, 1, 1), _attrs(group=2)),
    ("gemm1x1", (1, 8, 6, 6), (8, 8, 1, 1), _attrs(pads=(1, 1, 1, 1))),
    ("winograd4", (1, 8, 6, 6), (8, 8, 3, 3), _attrs((2, 2), (1, 1, 1, 1))),
    ("winograd4", (1, 8, 6, 6), (8, 8, 3, 3), _attrs(pads=(2, 2, 2, 2), dilations=(2, 2))),
    ("winograd2", (1, 8, 6, 6), (8, 4, 3, 3), _attrs(pads=(1, 1, 1, 1), group=2)),
    ("winograd2", (1, 8, 6, 6), (8, 8, 5, 5), _attrs(pads=(2, 2, 2, 2))),
    ("depthwise", (1, 8, 6, 6), (8, 8, 3, 3), _attrs(pads=(1, 1, 1, 1))),
    ("depthwise", (1, 8, 6, 6), (16, 1, 3, 3), _attrs(pads=(1, 1, 1, 1), group=8)),
]


@pytest.mark.parametrize("tactic,xs,ws,attrs", REFUSED)
def test_refused(tactic: str, xs: Sequence[int], ws: Sequence[int],
                 attrs: Mapping[str, Any]) -> None:
    spec = _spec(_rand(*xs), _rand(*ws), None, attrs, tactic)
    assert not TACTICS["Conv"][tactic].applies(spec)
    assert tactic not in {t.name for t in candidate_tactics(spec)}
    with pytest.raises(KernelError, match="cannot run this layer"):
        bind_layer(spec)


def test_refused_other_layers() -> None:
    conv1d = LayerSpec("c", "Conv", _attrs(), (TensorSpec((1, 4, 9), DType.FLOAT32),
                                               TensorSpec((4, 4, 3), DType.FLOAT32)),
                       (TensorSpec((1, 4, 7), DType.FLOAT32),))
    double = _spec(_rand(1, 4, 6, 6), _rand(4, 4, 1, 1), None, _attrs(), REFERENCE,
                   dtype=DType.FLOAT64)
    wrong = LayerSpec("c", "Conv", _attrs(), (TensorSpec((1, 4, 6, 6), DType.FLOAT32),
                                              TensorSpec((4, 4, 1, 1), DType.FLOAT32)),
                      (TensorSpec((1, 4, 5, 5), DType.FLOAT32),))  # shapes disagree
    for spec in (conv1d, double, wrong):
        for name in FAST:
            assert not TACTICS["Conv"][name].applies(spec), (name, spec)


# -- engine integration ------------------------------------------------------------------------

def test_prebound_step_sees_new_inputs() -> None:
    """The executor prebinds each layer once; later runs must read the arena's new data."""
    for tactic, (xs, ws, attrs) in LAYERS.items():
        x, w, b = _rand(*xs), _rand(*ws), _rand(ws[0])
        se = _rand(xs[0], ws[0], 1, 1)
        spec = _spec(x, w, b, attrs, tactic, extra=[se], program=[_step("Mul", [0, 1])])
        out = np.empty(spec.outputs[0].shape, np.float32)
        thunk = prebind(bind_layer(spec), [x, w, b, se], [out])
        ref = bind_layer(_with_tactic(spec, REFERENCE))
        for _ in range(2):
            x[...] = _rand(*xs)
            se[...] = _rand(*se.shape)
            thunk()
            want = np.empty_like(out)
            ref([x, w, b, se], [want])
            _close(out, want, _tol(tactic), tactic)


def test_winograd_filter_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    original = winograd.filter_transform

    def spy(*args: Any) -> None:
        calls.append(1)
        original(*args)

    monkeypatch.setattr(winograd, "filter_transform", spy)
    x, w, b = _rand(1, 8, 8, 8), _rand(8, 8, 3, 3), _rand(8)
    spec = _spec(x, w, b, _attrs(pads=(1, 1, 1, 1)), "winograd4")
    ref = bind_layer(_with_tactic(spec, REFERENCE))
    run = bind_layer(spec)
    out, want = np.empty((1, 8, 8, 8), np.float32), np.empty((1, 8, 8, 8), np.float32)
    # Writable weights may change between runs: transformed on every run.
    for _ in range(2):
        w[...] = _rand(8, 8, 3, 3)
        run([x, w, b], [out])
        ref([x, w, b], [want])
        _close(out, want, 2e-4)
    assert len(calls) == 2
    # Read-only weights (a loadable's): transformed once.
    frozen = w.copy()
    frozen.flags.writeable = False
    calls.clear()
    for _ in range(3):
        run([x, frozen, b], [out])
    assert len(calls) == 1


def _forced(model: Any, tactic: str) -> LoadedModule:
    """Build with ``tactic`` on every Conv layer it applies to (all tensors planar: the
    blocked tactics are tested in tests/unit/test_layouts.py)."""
    graph = build_graph(model, BuildOptions(autotune=False, blocked_layouts=False))
    for node in graph.nodes:
        if node.op == "Conv":
            node.tactic = tactic
    meta, weights = lower(graph, target={"backend": "cpu", "dla_core": None, "mem_pools": {}},
                          build={"opset": graph.opset, "opt_level": 3, "shapes": {}})
    return LoadedModule(write_loadable(meta, weights))


ORT_MODELS = {  # tactic -> (x shape, w shape, Conv attributes, activation)
    "gemm1x1": ((1, 32, 12, 12), (48, 32, 1, 1), {"strides": [2, 2]}, "Relu"),
    "gemm_c16": ((2, 300, 7, 7), (40, 300, 1, 1), {}, "HardSwish"),
    "gemv": ((2, 576, 1, 1), (144, 576, 1, 1), {}, "HardSigmoid"),
    "taps_c16": ((1, 24, 17, 15), (40, 24, 3, 3), {"pads": [1, 1, 1, 1], "strides": [2, 2]},
                 "Relu"),
    "depthwise": ((2, 24, 13, 13), (24, 1, 5, 5), {"pads": [2, 2, 2, 2], "strides": [2, 2],
                                                   "group": 24}, "HardSwish"),
    "depthwise_c16": ((2, 40, 7, 7), (40, 1, 5, 5), {"pads": [2, 2, 2, 2], "group": 40},
                      "HardSwish"),
    "direct_c16": ((1, 3, 23, 21), (16, 3, 7, 7), {"pads": [3, 3, 3, 3], "strides": [2, 2]},
                   "Relu"),
    "winograd4": ((1, 24, 14, 14), (32, 24, 3, 3), {"pads": [1, 1, 1, 1]}, "Sigmoid"),
    "winograd2": ((4, 16, 10, 10), (16, 16, 3, 3), {"pads": [1, 1, 1, 1]}, "LeakyRelu"),
    "im2col": ((1, 8, 15, 15), (16, 4, 3, 3), {"pads": [1, 1, 1, 1], "strides": [2, 2],
                                               "group": 2, "dilations": [1, 1]}, "Relu"),
}


@pytest.fixture
def poisoned_scratch(monkeypatch: pytest.MonkeyPatch) -> None:
    """Programs' shared scratch starts as NaN: a kernel reading scratch it did not write in
    the same run (another layer's data in a program) poisons its output."""
    monkeypatch.setattr(workspace, "FILL", float("nan"))


@pytest.mark.parametrize("tactic", FAST)
def test_against_onnxruntime(tactic: str, poisoned_scratch: None) -> None:
    """Conv + bias + activation + residual Add + Relu, fused by the builder into one layer,
    run by the tactic through the engine, against onnxruntime (scratch poisoned)."""
    xs, ws, attrs, act = ORT_MODELS[tactic]
    x, w, b = _rand(*xs), _rand(*ws) * np.float32(0.3), _rand(ws[0])
    out = _out_shape(xs, ws, _attrs(attrs.get("strides", (1, 1)), attrs.get("pads", [0] * 4),
                                    attrs.get("dilations", (1, 1))))
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], **attrs),
             helper.make_node(act, ["c"], ["a"]),
             helper.make_node("Add", ["a", "r"], ["s"]),
             helper.make_node("Relu", ["s"], ["y"])]
    model = make_model(nodes, {"x": (np.float32, xs), "r": (np.float32, out)}, ["y"],
                       {"w": w, "b": b})
    feeds = {"x": x, "r": _rand(*out)}
    module = _forced(model, tactic)
    layers = [layer for layer in module.program.layers if layer.op == "Conv"]
    assert [layer.tactic for layer in layers] == [tactic]
    assert "epilogue" in layers[0].attrs  # the activation and residual were fused
    got = module.run(feeds)
    want = run_ort(model, feeds)
    _close(got[0], want[0], _tol(tactic), tactic)


@pytest.mark.parametrize("autotune", [False, True])
@pytest.mark.parametrize("family", ["resnet50", "mobilenetv3", "yolov8"])
def test_model_families(family: str, autotune: bool, poisoned_scratch: None) -> None:
    """Small model families within the whole-model tolerance of onnxruntime, built by
    priority (every Conv then runs a fast tactic) and with autotuning (timings on a shared
    machine decide, so which tactics win is not checked); scratch poisoned."""
    from tests.models import families

    if family == "resnet50":
        model, feeds = families.resnet50(size=64, width=16)
    else:
        model, feeds = families.FAMILIES[family]()
    data = build(model, BuildOptions(autotune=autotune))
    chosen = [layer.tactic for layer in read_loadable(data).layers if layer.op == "Conv"]
    if not autotune:
        assert set(chosen) <= set(FAST) | set(BLOCKED) | set(DIRECT_PLANES), chosen
    got = LoadedModule(data).run(feeds)
    model_tolerance_ok(got, run_ort(model, feeds))


# -- threads -----------------------------------------------------------------------------------

def test_thread_count_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(threads.ENV_VAR, raising=False)
    try:
        threads.set_num_threads(1)
        assert threads.num_threads() == 1
        x, w, b = _rand(2, 16, 9, 9), _rand(24, 16, 1, 1), _rand(24)
        spec = _spec(x, w, b, _attrs(), "gemm1x1")
        _close(_run(spec, [x, w, b]), _run(_with_tactic(spec, REFERENCE), [x, w, b]), 1e-4)
        threads.set_num_threads(None)
        monkeypatch.setenv(threads.ENV_VAR, "1")
        assert threads.num_threads() == 1
        assert threads.configure() == 1
        monkeypatch.setenv(threads.ENV_VAR, "many")
        with pytest.raises(ValueError, match=threads.ENV_VAR):
            threads.num_threads()
        with pytest.raises(ValueError):
            threads.set_num_threads(0)
    finally:
        threads.set_num_threads(None)
        monkeypatch.delenv(threads.ENV_VAR, raising=False)
        threads.configure()


@pytest.mark.skipif(numba.config.NUMBA_NUM_THREADS < 2, reason="needs two numba threads")
def test_each_program_runs_with_its_own_thread_count() -> None:
    """numba's thread count is global to the calling thread: a program bound later with
    another count must not leave an earlier one's kernels (which split their work into
    its count) forking onto the wrong number of workers."""
    x = _rand(1, 16, 9, 9)
    model = make_model([helper.make_node("Relu", ["x"], ["y"])],
                       {"x": (np.float32, x.shape)}, ["y"], {})
    data = build(model, BuildOptions(autotune=False))
    try:
        threads.set_num_threads(2)
        two = LoadedModule(data)
        threads.set_num_threads(1)
        one = LoadedModule(data)
        assert numba.get_num_threads() == 1
        two.run({"x": x})
        assert numba.get_num_threads() == 2
        one.run({"x": x})
        assert numba.get_num_threads() == 1
    finally:
        threads.set_num_threads(None)
        threads.configure()


def test_blas_single_threaded_after_bind() -> None:
    """numpy's BLAS (the one every CPU kernel calls) runs on the calling thread only."""
    from threadpoolctl import threadpool_info

    bind_layer(_spec(_rand(1, 4, 4, 4), _rand(4, 4, 1, 1), None, _attrs(), "gemm1x1"))
    numpy_blas = [info for info in threadpool_info()
                  if info["user_api"] == "blas" and "numpy" in info["filepath"]]
    assert numpy_blas and all(info["num_threads"] == 1 for info in numpy_blas)
