"""The channel-blocked layout (pydla.plan.layouts) and its kernels: which layers the builder
blocks and where it reorders, whole models against onnxruntime with it on and off, every
blocked tactic against the reference Conv (padded channel blocks, strides, batches,
epilogues), Reorder, the middle-axes reductions and broadcasts, and refusals of layers
whose shapes do not fit their layouts.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from onnx import helper

from pydla.backends.base import LayerSpec, TensorSpec
from pydla.backends.cpu import threads
from pydla.backends.cpu.backend import bind_layer
from pydla.backends.cpu.kernels.conv_fast import depthwise_c16, depthwise_nchw16c
from pydla.backends.cpu.kernels.conv_fast.geometry import conv2d
from pydla.backends.cpu.kernels.reorder import to_blocked, to_planar
from pydla.backends.cpu.registry import REFERENCE, candidate_tactics
from pydla.builder import BuildOptions, build, build_graph
from pydla.dtypes import DType
from pydla.engine import LoadedModule
from pydla.errors import KernelError
from pydla.loadable import read_loadable
from pydla.tools.layerinfo import layer_info
from tests.oracle import make_model, model_tolerance_ok, run_ort

RNG = np.random.default_rng(11)
F32 = DType.FLOAT32


def _rand(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def _spec(shape: tuple[int, ...]) -> TensorSpec:
    return TensorSpec(tuple(shape), F32)


def _conv(name: str, x: str, y: str, cin: int, cout: int, k: int, stride: int = 1,
          group: int = 1, inits: dict[str, np.ndarray] | None = None) -> Any:
    assert inits is not None
    fan_in = cin // group * k * k
    inits[f"{name}_w"] = _rand(cout, cin // group, k, k) * np.float32(1.5 / np.sqrt(fan_in))
    inits[f"{name}_b"] = _rand(cout) * np.float32(0.1)
    return helper.make_node("Conv", [x, f"{name}_w", f"{name}_b"], [y], strides=[stride] * 2,
                            pads=[k // 2] * 4, group=group)


def mobile_block_model(batch: int = 1, size: int = 32, extra_output: bool = False) -> Any:
    """A MobileNetV2/V3-like net: stem, inverted residuals with channel counts that are not
    multiples of 16, a squeeze-excitation block and a classifier."""
    inits: dict[str, np.ndarray] = {}
    inits["lo"], inits["hi"] = np.float32(0), np.float32(6)
    nodes = [
        _conv("stem", "x", "s0", 3, 16, 3, 2, inits=inits),
        helper.make_node("Clip", ["s0", "lo", "hi"], ["s1"]),
        _conv("dw1", "s1", "d0", 16, 16, 3, group=16, inits=inits),
        helper.make_node("Clip", ["d0", "lo", "hi"], ["d1"]),
        _conv("pw1", "d1", "p1", 16, 24, 1, inits=inits),
        _conv("ex2", "p1", "e0", 24, 72, 1, inits=inits),
        helper.make_node("HardSwish", ["e0"], ["e1"]),
        _conv("dw2", "e1", "f0", 72, 72, 5, 2, group=72, inits=inits),
        helper.make_node("HardSwish", ["f0"], ["f1"]),
        # squeeze-excitation
        helper.make_node("GlobalAveragePool", ["f1"], ["g0"]),
        _conv("se1", "g0", "g1", 72, 24, 1, inits=inits),
        helper.make_node("Relu", ["g1"], ["g2"]),
        _conv("se2", "g2", "g3", 24, 72, 1, inits=inits),
        helper.make_node("HardSigmoid", ["g3"], ["g4"], alpha=1 / 6, beta=0.5),
        helper.make_node("Mul", ["f1", "g4"], ["f2"]),
        _conv("pj2", "f2", "p2", 72, 40, 1, inits=inits),
        # residual block
        _conv("ex3", "p2", "h0", 40, 120, 1, inits=inits),
        helper.make_node("Relu", ["h0"], ["h1"]),
        _conv("dw3", "h1", "h2", 120, 120, 3, group=120, inits=inits),
        helper.make_node("Relu", ["h2"], ["h3"]),
        _conv("pj3", "h3", "h4", 120, 40, 1, inits=inits),
        helper.make_node("Add", ["h4", "p2"], ["r"]),
        helper.make_node("GlobalAveragePool", ["r"], ["q"]),
        helper.make_node("Flatten", ["q"], ["v"]),
        helper.make_node("Gemm", ["v", "fc_w", "fc_b"], ["y"], transB=1),
    ]
    inits["fc_w"], inits["fc_b"] = _rand(10, 40), _rand(10)
    outputs = ["y", "h3"] if extra_output else ["y"]
    model = make_model(nodes, {"x": (np.float32, (batch, 3, size, size))}, outputs, inits)
    return model, {"x": _rand(batch, 3, size, size)}


@pytest.mark.parametrize("batch", [1, 2])
def test_mobile_model_blocked_matches_onnxruntime(batch: int) -> None:
    model, feeds = mobile_block_model(batch)
    data = build(model, BuildOptions(autotune=False))
    prog = read_loadable(data)
    convs = [layer for layer in prog.layers if layer.op == "Conv"]
    blocked = [layer for layer in convs if layer.attrs.get("layouts")]
    # Every Conv but the squeeze-excitation pair (1×1 on a 1×1 plane, planar) is blocked;
    # se2 reads a planar vector and writes blocks (a "stem" of the gate).
    assert {layer.tactic for layer in blocked} <= {"gemm_nchw16c", "depthwise_nchw16c",
                                                    "direct_nchw16c", "gemv_nchw16c",
                                                    "taps_nchw16c"}
    assert len(blocked) == len(convs) - 1
    assert blocked[0].attrs["layouts"] == ["nchw", "nchw16c"]  # the stem
    reorders = [layer for layer in prog.layers if layer.op == "Reorder"]
    # Out of blocks: the pooled SE vector and the pooled features; nothing else.
    assert len(reorders) == 2 and all(r.attrs["to"] == "nchw" for r in reorders)
    info = {entry["name"]: entry for entry in layer_info(prog)["layers"]}  # inspect's view
    assert info[blocked[0].name]["layouts"] == ["nchw", "nchw16c"]
    assert info[reorders[0].name]["layouts"] == ["nchw16c", "nchw"]
    shapes = {prog.tensors[layer.outputs[0]].shape for layer in blocked}
    assert (batch, 5, 8, 8, 16) in shapes  # 72 channels at 8×8 in five blocks
    assert all(len(prog.tensors[io.tensor].shape) in (2, 4) for io in prog.outputs + prog.inputs)
    got = LoadedModule(data).run(feeds)
    model_tolerance_ok(got, run_ort(model, feeds))
    planar = build(model, BuildOptions(autotune=False, blocked_layouts=False))
    assert not any(layer.op == "Reorder" for layer in read_loadable(planar).layers)
    np.testing.assert_allclose(got[0], LoadedModule(planar).run(feeds)[0], rtol=1e-4,
                               atol=1e-4)


def test_blocked_tensor_as_graph_output() -> None:
    """A tensor inside a blocked region that is also a network output leaves through a
    Reorder, under its own name, in the model's shape."""
    model, feeds = mobile_block_model(extra_output=True)
    data = build(model, BuildOptions(autotune=True))
    module = LoadedModule(data)
    prog = read_loadable(data)
    out = prog.tensors[prog.outputs[1].tensor]
    assert out.name == "h3" and out.shape == (1, 120, 8, 8)
    assert out.index in [layer.outputs[0] for layer in prog.layers if layer.op == "Reorder"]
    model_tolerance_ok(module.run(feeds), run_ort(model, feeds))


def test_lone_pointwise_layers_stay_planar() -> None:
    """A 1×1 layer between planar ones (the image, a Div) gains less on blocks than its
    reorders cost."""
    inits: dict[str, np.ndarray] = {"two": np.float32(2)}
    nodes = [_conv("a", "x", "a0", 16, 32, 1, inits=inits),
             helper.make_node("Relu", ["a0"], ["a1"]),
             helper.make_node("Div", ["a1", "two"], ["y"])]
    model = make_model(nodes, {"x": (np.float32, (1, 16, 12, 12))}, ["y"], inits)
    prog = read_loadable(build(model, BuildOptions(autotune=False)))
    assert not any("layouts" in layer.attrs or layer.op == "Reorder" for layer in prog.layers)


def bottleneck_model(batch: int = 1, size: int = 16) -> Any:
    """A ResNet stem (7×7/2 convolution, 3×3/2 max pool), then two bottlenecks, the second
    downsampling through a strided 1×1 shortcut."""
    inits: dict[str, np.ndarray] = {}
    nodes = [_conv("stem", "x", "t0", 3, 64, 7, 2, inits=inits),
             helper.make_node("Relu", ["t0"], ["t1"]),
             helper.make_node("MaxPool", ["t1"], ["p0"], kernel_shape=[3, 3], strides=[2, 2],
                              pads=[1, 1, 1, 1]),
             _conv("proj", "p0", "s0", 64, 128, 1, inits=inits),
             helper.make_node("Relu", ["s0"], ["s1"])]
    for i, (stride, shortcut) in enumerate([(1, False), (2, True)]):
        src, mid, out = f"s{2 * i + 1}", 48, 128
        nodes += [_conv(f"a{i}", src, f"a{i}0", 128, mid, 1, inits=inits),
                  helper.make_node("Relu", [f"a{i}0"], [f"a{i}1"]),
                  _conv(f"b{i}", f"a{i}1", f"b{i}0", mid, mid, 3, stride, inits=inits),
                  helper.make_node("Relu", [f"b{i}0"], [f"b{i}1"]),
                  _conv(f"c{i}", f"b{i}1", f"c{i}0", mid, out, 1, inits=inits)]
        skip = src
        if shortcut:
            nodes.append(_conv(f"d{i}", src, f"d{i}0", 128, out, 1, stride, inits=inits))
            skip = f"d{i}0"
        nodes += [helper.make_node("Add", [f"c{i}0", skip], [f"r{i}"]),
                  helper.make_node("Relu", [f"r{i}"], [f"s{2 * i + 3}"])]
    nodes.append(helper.make_node("GlobalAveragePool", ["s5"], ["y"]))
    model = make_model(nodes, {"x": (np.float32, (batch, 3, 4 * size, 4 * size))}, ["y"],
                       inits)
    return model, {"x": _rand(batch, 3, 4 * size, 4 * size)}


@pytest.mark.parametrize("batch", [1, 2])
def test_bottlenecks_run_their_pointwise_layers_blocked(batch: int) -> None:
    """ResNet's 1×1 layers chained through residual adds gain more on blocks than the
    reorders around them cost: every convolution runs blocked — the 1×1 layers (the
    strided shortcut too), the stem and the max pool before them, the 3×3 layers
    (Winograd's blocked tactic at stride 1, taps_nchw16c at stride 2) — the pooled result
    alone is reordered, and the result still matches onnxruntime."""
    model, feeds = bottleneck_model(batch)
    # By priority: timed under a parallel test run, a tiny layer's tactic is noise.
    data = build(model, BuildOptions(autotune=False))
    prog = read_loadable(data)
    convs = [layer for layer in prog.layers if layer.op == "Conv"]
    for layer in convs:
        k = prog.tensors[layer.inputs[1]].shape[2]
        stride = layer.attrs["strides"][0]
        assert "layouts" in layer.attrs, layer.name
        want = {1: "gemm_nchw16c", 7: "direct_nchw16c",
                3: "winograd4_nchw16c" if stride == 1 else "taps_nchw16c"}[k]
        assert layer.tactic == want, (layer.name, layer.tactic)
    pools = [layer for layer in prog.layers if layer.op == "MaxPool"]
    assert [p.tactic for p in pools] == ["max_nchw16c"]
    # the pooled result out (the stem reads the image)
    assert sum(layer.op == "Reorder" for layer in prog.layers) == 1
    model_tolerance_ok(LoadedModule(data).run(feeds), run_ort(model, feeds))


def test_unsafe_pointwise_stays_planar() -> None:
    """A Div could turn the padded lanes into NaN: it reads a planar copy of a blocked
    tensor, through a Reorder."""
    inits: dict[str, np.ndarray] = {"lo": np.float32(0), "hi": np.float32(6)}
    nodes = [_conv("dw", "x", "d0", 24, 24, 3, group=24, inits=inits),
             helper.make_node("Clip", ["d0", "lo", "hi"], ["d"]),
             _conv("pw", "d", "y", 24, 16, 1, inits=inits),
             helper.make_node("Div", ["d", "z"], ["e"])]
    shape = (1, 24, 9, 9)
    model = make_model(nodes, {"x": (np.float32, shape), "z": (np.float32, shape)},
                       ["y", "e"], inits)
    feeds = {"x": _rand(*shape), "z": np.abs(_rand(*shape)) + np.float32(0.5)}
    graph = build_graph(model, BuildOptions(autotune=False))
    by_op = {n.op: n for n in graph.nodes}
    div = next(n for n in graph.nodes if "layouts" not in n.attrs and n.op != "Reorder"
               and n.op != "Conv")
    assert div.inputs[0].producer.op == "Reorder"  # type: ignore[union-attr]
    assert div.inputs[0].producer.attrs["to"] == "nchw"  # type: ignore[union-attr]
    assert len(div.outputs[0].shape) == 4 and "Reorder" in by_op
    assert all(n.attrs.get("layouts") == ["nchw16c", "nchw16c"] for n in graph.nodes
               if n.op == "Conv")
    data = build(model, BuildOptions(autotune=False))
    model_tolerance_ok(LoadedModule(data).run(feeds), run_ort(model, feeds))


def test_half_precision_stays_planar() -> None:
    model, feeds = mobile_block_model()
    prog = read_loadable(build(model, BuildOptions(autotune=False, autocast=DType.FLOAT16)))
    assert not any(layer.op == "Reorder" for layer in prog.layers)


# -- kernels ---------------------------------------------------------------------------

def _run(spec: LayerSpec, ins: list[np.ndarray]) -> np.ndarray:
    out = np.full(spec.outputs[0].shape, np.nan, np.float32)
    bind_layer(spec)(ins, [out])
    return out


CASES = [  # (n, c, m, h, w, k, stride, group, layouts)
    (1, 32, 16, 7, 7, 1, 1, 1, "bb"), (2, 24, 40, 13, 11, 1, 1, 1, "bb"),
    (1, 160, 96, 5, 5, 1, 1, 1, "bb"), (1, 300, 20, 4, 6, 1, 1, 1, "bb"),
    (1, 32, 32, 20, 20, 3, 1, 32, "bb"), (2, 72, 72, 15, 15, 5, 2, 72, "bb"),
    (1, 20, 20, 9, 9, 3, 2, 20, "bb"), (1, 3, 32, 33, 31, 3, 2, 1, "pb"),
    (2, 3, 24, 20, 20, 7, 2, 1, "pb"), (2, 40, 72, 1, 1, 1, 1, 1, "pb"),
    (1, 64, 48, 9, 9, 1, 2, 1, "bb"), (2, 40, 24, 8, 7, 1, 2, 1, "bb"),  # strided 1×1
    (2, 48, 96, 5, 5, 1, 1, 1, "bb"),  # 1×1, more channels than pixels: strip by strip
    # taps_nchw16c: stride 1 (panels across rows), stride 2 (within rows), a row of 7
    # (panels of 7), an odd number of output blocks (a strip's second half unused),
    # channels past a whole block, 5×5
    (1, 32, 64, 20, 20, 3, 1, 1, "bb"), (2, 24, 80, 13, 11, 3, 2, 1, "bb"),
    (1, 64, 48, 7, 7, 3, 1, 1, "bb"), (1, 16, 40, 9, 14, 5, 1, 1, "bb"),
    # stride 2 with rows of 17: two panels of 7 stored straight into the output by a
    # fused epilogue, the last 3 pixels through the stage; K in three slices
    (1, 32, 32, 30, 34, 3, 2, 1, "bb"),
    # winograd{4,2}_nchw16c too: ragged tiles, channels past whole blocks in and out
    (2, 24, 40, 9, 10, 3, 1, 1, "bb"),
]


def _blocked_layer(case: tuple[Any, ...], epilogue: str | None
                   ) -> tuple[dict[str, Any], list[TensorSpec], list[np.ndarray],
                              tuple[int, ...], np.ndarray]:
    """A CASES convolution in the blocked layouts with an epilogue (None, clip, hardswish,
    residual: + a blocked tensor, residual_relu: then Relu, silu_residual: x·sigmoid(x) +
    a blocked tensor): its attributes, input specs and arrays, blocked output shape, and
    the planar reference result."""
    n, c, m, h, w, k, s, group, lay = case
    x, wt, b = _rand(n, c, h, w), _rand(m, c // group, k, k), _rand(m)
    pad = k // 2
    oh, ow = (h + 2 * pad - k) // s + 1, (w + 2 * pad - k) // s + 1
    attrs: dict[str, Any] = {"strides": [s, s], "pads": [pad] * 4, "dilations": [1, 1],
                             "group": group}
    plain = LayerSpec("p", "Conv", attrs, (_spec(x.shape), _spec(wt.shape), _spec(b.shape)),
                      (_spec((n, m, oh, ow)),), REFERENCE)
    want = _run(plain, [x, wt, b])
    layouts = ["nchw16c" if lay[0] == "b" else "nchw", "nchw16c"]
    xin = to_blocked(x) if lay[0] == "b" else x
    yshape = (n, -(-m // 16), oh, ow, 16)
    ins, specs = [xin, wt, b], [_spec(xin.shape), _spec(wt.shape), _spec(b.shape)]
    battrs = {**attrs, "layouts": layouts}
    if epilogue is None:
        return battrs, specs, ins, yshape, want
    steps = {"clip": [("Clip", [0], {"min": 0.0, "max": 6.0})],
             "hardswish": [("HardSwish", [0], {})], "residual": [("Add", [0, 1], {})],
             "residual_relu": [("Add", [0, 1], {}), ("Relu", [2], {})],
             "silu_residual": [("Sigmoid", [0], {}), ("Mul", [2, 0], {}),
                               ("Add", [1, 3], {})]}[epilogue]
    residual = "residual" in epilogue
    battrs["epilogue"] = {"inputs": int(residual), "program": [
        {"op": op, "in": regs, "attrs": a, "shape": list(yshape), "dtype": "float32"}
        for op, regs, a in steps]}
    if residual:
        r = _rand(n, m, oh, ow)
        ins.append(to_blocked(r))
        specs.append(_spec(yshape))
        if epilogue == "silu_residual":
            with np.errstate(over="ignore"):  # exp(-x) of a large negative x: x / inf = -0
                want = want / (1 + np.exp(-want))
        want = want + r
        if epilogue == "residual_relu":
            want = np.maximum(want, 0)
    elif epilogue == "clip":
        want = np.clip(want, 0, 6)
    else:
        want = want * np.clip(want / 6 + 0.5, 0, 1)
    return battrs, specs, ins, yshape, want


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("epilogue", [None, "clip", "hardswish", "residual", "residual_relu",
                                      "silu_residual"])
def test_blocked_tactics_match_reference(case: tuple[Any, ...], epilogue: str | None) -> None:
    n, c, m, h, w, k, s, group, lay = case
    battrs, specs, ins, yshape, want = _blocked_layer(case, epilogue)
    spec = LayerSpec("b", "Conv", battrs, tuple(specs), (_spec(yshape),), None)
    tactics = [t.name for t in candidate_tactics(spec)]
    assert tactics and all(t.endswith("_nchw16c") for t in tactics)
    if epilogue == "residual" and h * w == 1 and lay == "pb":
        assert "gemv_nchw16c" not in tactics  # it runs activations only
    for tactic in (*tactics, REFERENCE):
        got = _run(LayerSpec("b", "Conv", battrs, tuple(specs), (_spec(yshape),), tactic), ins)
        assert np.isfinite(got).all(), tactic  # padded lanes are written, finite
        np.testing.assert_allclose(to_planar(got, m), want, rtol=1e-4,
                                   atol=1e-4 * max(1.0, float(np.abs(want).max())))


@pytest.mark.parametrize("case", [(2, 24, 40, 13, 11, 1, 1, 1, "bb"),
                                  (1, 300, 20, 4, 6, 1, 1, 1, "bb"),  # K in slices
                                  (2, 40, 24, 8, 7, 1, 2, 1, "bb")])  # strided
def test_pointwise_gemm_multiplies_only_real_channels(case: tuple[Any, ...]) -> None:
    """gemm_nchw16c's K is the layer's channel count, not the blocked one: NaN in the
    padded lanes of its input never reaches the output (before, a quarter of a 24-channel
    layer's FMAs multiplied those lanes by zero weights)."""
    battrs, specs, ins, yshape, want = _blocked_layer(case, "clip")
    c = case[1]
    ins[0] = ins[0].copy()
    ins[0][:, -1, :, :, c % 16:] = np.nan
    got = _run(LayerSpec("b", "Conv", battrs, tuple(specs), (_spec(yshape),), "gemm_nchw16c"),
               ins)
    m = case[2]
    assert np.isfinite(got).all()
    np.testing.assert_allclose(to_planar(got, m), want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("tactic,case", [
    ("gemm_nchw16c", (1, 300, 40, 5, 7, 1, 1, 1, "bb")),  # ragged panel, K in 3 slices
    ("taps_nchw16c", (1, 32, 32, 30, 34, 3, 2, 1, "bb"))])
@pytest.mark.parametrize("epilogue", ["residual_relu", "silu_residual"])
def test_fused_residual_may_be_the_output(tactic: str, case: tuple[Any, ...],
                                          epilogue: str) -> None:
    """A residual Add written over its residual (the planner's in-place reuse): the
    micro-kernel's last K slice reads each residual vector before it stores over it, and
    the slices before it never touch the output; a residual added after the activation
    is left to the interpreter then (epilogue.fuse_at)."""
    battrs, specs, ins, yshape, want = _blocked_layer(case, epilogue)
    spec = LayerSpec("b", "Conv", battrs, tuple(specs), (_spec(yshape),), tactic)
    both = ins[-1].copy()
    bind_layer(spec)([*ins[:-1], both], [both])
    np.testing.assert_allclose(to_planar(both, case[2]), want, rtol=1e-4,
                               atol=1e-4 * max(1.0, float(np.abs(want).max())))


# Blocked depthwise geometry (the kernel reads its input in place and leaves out the taps
# that fall in the padding): (n, c, h, w, kernel, strides, pads t/l/b/r, dilations).
DEPTHWISE = [
    (1, 16, 112, 112, 3, (2, 2), (1, 1, 1, 1), (1, 1)),   # MobileNetV3's first one
    (2, 40, 13, 17, 5, (1, 2), (2, 1, 3, 2), (1, 1)),     # asymmetric pads and strides
    (1, 24, 11, 10, 3, (1, 1), (2, 2, 2, 2), (2, 2)),     # dilated
    (1, 16, 2, 3, 5, (1, 1), (2, 2, 2, 2), (1, 1)),       # image narrower than the kernel
    (1, 20, 4, 4, 3, (1, 1), (3, 3, 3, 3), (1, 1)),       # pads past the kernel: bias only
    (1, 16, 9, 9, 3, (3, 3), (0, 0, 0, 0), (1, 1)),       # no padding
    (1, 33, 1, 20, 3, (1, 1), (1, 2, 1, 0), (1, 3)),      # one row, dilated columns
    # 5×5 at stride 1 on narrow planes: computed from a staged band, eight pixels a call
    (1, 40, 7, 7, 5, (1, 1), (2, 2, 2, 2), (1, 1)),
    (2, 24, 3, 3, 5, (1, 1), (2, 2, 2, 2), (1, 1)),       # 9 pixels: 8, then 8 overlapping
    (1, 16, 2, 2, 5, (1, 1), (2, 2, 2, 2), (1, 1)),       # 4 pixels
    (1, 16, 1, 3, 5, (1, 1), (2, 2, 2, 2), (1, 1)),       # 3 pixels, one at a time
]


@pytest.mark.parametrize("case", DEPTHWISE)
@pytest.mark.parametrize("epilogue", [None, "relu", "hardswish"])
def test_blocked_depthwise_geometry(case: tuple[Any, ...], epilogue: str | None) -> None:
    n, c, h, w, k, strides, pads, dilations = case
    x, wt, b = _rand(n, c, h, w), _rand(c, 1, k, k), _rand(c)
    (sh, sw), (dh, dw), (t, left, bottom, r) = strides, dilations, pads
    oh = (h + t + bottom - (k - 1) * dh - 1) // sh + 1
    ow = (w + left + r - (k - 1) * dw - 1) // sw + 1
    attrs: dict[str, Any] = {"strides": list(strides), "pads": list(pads),
                             "dilations": list(dilations), "group": c}
    plain = LayerSpec("p", "Conv", attrs, (_spec(x.shape), _spec(wt.shape), _spec(b.shape)),
                      (_spec((n, c, oh, ow)),), REFERENCE)
    want = _run(plain, [x, wt, b])
    yshape = (n, -(-c // 16), oh, ow, 16)
    battrs = {**attrs, "layouts": ["nchw16c", "nchw16c"]}
    if epilogue is not None:
        op = {"relu": "Relu", "hardswish": "HardSwish"}[epilogue]
        battrs["epilogue"] = {"inputs": 0, "program": [
            {"op": op, "in": [0], "attrs": {}, "shape": list(yshape), "dtype": "float32"}]}
        want = (np.maximum(want, 0) if epilogue == "relu"
                else want * np.clip(want / 6 + 0.5, 0, 1))
    xin = to_blocked(x)
    spec = LayerSpec("b", "Conv", battrs, (_spec(xin.shape), _spec(wt.shape), _spec(b.shape)),
                     (_spec(yshape),), "depthwise_nchw16c")
    geo = conv2d(spec, blocked=True)
    assert geo is not None and depthwise_nchw16c.staged(geo) == (k == 5 and strides == (1, 1))
    got = _run(spec, [xin, wt, b])
    assert np.isfinite(got).all()  # padded lanes are written, finite
    np.testing.assert_allclose(to_planar(got, c), want, rtol=1e-4,
                               atol=1e-4 * max(1.0, float(np.abs(want).max())))


# Blocked max pools: (n, c, h, w, kernel, strides, pads t/l/b/r, dilations, output size).
MAX_POOLS = [
    (1, 64, 23, 23, (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), None),   # ResNet's
    (2, 40, 12, 33, (2, 2), (2, 1), (0, 1, 0, 1), (1, 1), None),   # CRNN's, two images
    (1, 16, 9, 9, (5, 5), (1, 1), (2, 2, 2, 2), (1, 1), None),     # YOLO's SPPF
    (1, 32, 10, 11, (3, 2), (1, 2), (0, 0, 0, 0), (2, 1), None),   # dilated rows
    (1, 16, 7, 7, (3, 3), (2, 2), (0, 0, 0, 0), (1, 1), (4, 4)),   # ceil_mode: partial ends
    (1, 16, 1, 20, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), None),    # one row
]


@pytest.mark.parametrize("case", MAX_POOLS)
def test_blocked_max_pool(case: tuple[Any, ...]) -> None:
    n, c, h, w, (kh, kw), (sh, sw), pads, (dh, dw), size = case
    oh, ow = size or ((h + pads[0] + pads[2] - (kh - 1) * dh - 1) // sh + 1,
                      (w + pads[1] + pads[3] - (kw - 1) * dw - 1) // sw + 1)
    x = _rand(n, c, h, w)
    x[0, 3, h // 2, 2] = np.nan  # a NaN in a window wins, as in the reference
    attrs: dict[str, Any] = {"kernel_shape": [kh, kw], "strides": [sh, sw],
                             "pads": list(pads), "dilations": [dh, dw]}
    plain = LayerSpec("p", "MaxPool", attrs, (_spec(x.shape),), (_spec((n, c, oh, ow)),),
                      REFERENCE)
    want = _run(plain, [x])
    xin, yshape = to_blocked(x), (n, -(-c // 16), oh, ow, 16)
    battrs = {**attrs, "layouts": ["nchw16c", "nchw16c"]}
    spec = LayerSpec("b", "MaxPool", battrs, (_spec(xin.shape),), (_spec(yshape),), None)
    assert [t.name for t in candidate_tactics(spec)] == ["max_nchw16c"]
    for tactic in ("max_nchw16c", REFERENCE):
        got = _run(LayerSpec("b", "MaxPool", battrs, (_spec(xin.shape),), (_spec(yshape),),
                             tactic), [xin])
        np.testing.assert_array_equal(to_planar(got, c), want)
    # A window wholly in the padding has no maximum to take: the tactic does not apply.
    wide = {**battrs, "pads": [3, 3, 3, 3]}
    out = (n, -(-c // 16), (h + 6 - kh) // sh + 1, (w + 6 - kw) // sw + 1, 16)
    if kh <= 3 and dh == 1:
        assert not candidate_tactics(LayerSpec("b", "MaxPool", wide, (_spec(xin.shape),),
                                               (_spec(out),), None))


@pytest.mark.parametrize("case", [CASES[0], CASES[5], CASES[7], CASES[11], CASES[16]])
@pytest.mark.parametrize("epilogue", [None, "residual_relu"])
def test_blocked_outputs_stored_around_the_caches(case: tuple[Any, ...], epilogue: str | None,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Outputs past STREAM_BYTES leave through non-temporal stores (with the epilogue
    run into scratch first): the same values, into a 64-byte aligned output as the arena's."""
    monkeypatch.setattr(depthwise_c16, "STREAM_BYTES", 0)
    m = case[2]
    battrs, specs, ins, yshape, want = _blocked_layer(case, epilogue)
    size = int(np.prod(yshape))
    raw = np.full(size + 16, np.nan, np.float32)
    start = (-raw.ctypes.data) % 64 // 4
    out = raw[start:start + size].reshape(yshape)
    spec = LayerSpec("b", "Conv", battrs, tuple(specs), (_spec(yshape),), None)
    for tactic in [t.name for t in candidate_tactics(spec)]:
        out[...] = np.nan
        bind_layer(LayerSpec("b", "Conv", battrs, tuple(specs), (_spec(yshape),), tactic))(
            ins, [out])
        assert np.isfinite(out).all(), tactic
        np.testing.assert_allclose(to_planar(out, m), want, rtol=1e-4,
                                   atol=1e-4 * max(1.0, float(np.abs(want).max())))


def test_blocked_layers_refuse_misfitting_shapes() -> None:
    w, b = _spec((16, 8, 1, 1)), _spec((16,))
    attrs = {"strides": [1, 1], "pads": [0] * 4, "dilations": [1, 1], "group": 1,
             "layouts": ["nchw16c", "nchw16c"]}
    wrong_blocks = LayerSpec("c", "Conv", attrs, (_spec((1, 2, 4, 4, 16)), w, b),
                             (_spec((1, 1, 4, 4, 16)),), None)  # 8 channels are 1 block
    assert not candidate_tactics(wrong_blocks)
    with pytest.raises(KernelError, match="layouts"):
        bind_layer(LayerSpec(*list(wrong_blocks.__dict__.values())[:-1], REFERENCE))
    bad_name = LayerSpec("c", "Conv", {**attrs, "layouts": ["nchw8c", "nchw16c"]},
                         (_spec((1, 1, 4, 4, 16)), w, b), (_spec((1, 1, 4, 4, 16)),), None)
    assert not candidate_tactics(bad_name)
    with pytest.raises(KernelError):
        bind_layer(LayerSpec(*list(bad_name.__dict__.values())[:-1], REFERENCE))
    # A per-channel epilogue operand has no row in a blocked run: refused.
    vec = {**attrs, "epilogue": {"inputs": 1, "program": [
        {"op": "Mul", "in": [0, 1], "attrs": {}, "shape": [1, 1, 4, 4, 16],
         "dtype": "float32"}]}}
    per_channel = LayerSpec("c", "Conv", vec, (_spec((1, 1, 4, 4, 16)), w, b,
                                              _spec((1, 16, 1, 1))),
                            (_spec((1, 1, 4, 4, 16)),), "gemm_nchw16c")
    assert not candidate_tactics(per_channel)
    with pytest.raises(KernelError):
        bind_layer(per_channel)


@pytest.fixture(params=["forked", "inline"])
def forking(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Small memory-bound kernels run on the calling thread below a size: both paths."""
    limit = 0 if request.param == "forked" else 1 << 62
    monkeypatch.setattr(threads, "PARALLEL_MIN_ELEMENTS", limit)
    return str(request.param)


# (1, 8, 70, 61): a partial block over two tasks of pixels (reorder.CHUNK), a ragged end
@pytest.mark.parametrize("shape", [(1, 32, 7, 7), (2, 72, 5, 9), (1, 16, 1, 1), (3, 5, 4, 4),
                                   (1, 8, 70, 61), (2, 40, 66, 65)])
def test_reorder_round_trip(shape: tuple[int, ...], forking: str) -> None:
    x = _rand(*shape)
    c = shape[1]
    blocked_shape = (shape[0], -(-c // 16), *shape[2:], 16)
    to = LayerSpec("t", "Reorder", {"to": "nchw16c", "channels": c}, (_spec(shape),),
                   (_spec(blocked_shape),))
    back = LayerSpec("f", "Reorder", {"to": "nchw", "channels": c}, (_spec(blocked_shape),),
                     (_spec(shape),))
    xb = _run(to, [x])
    np.testing.assert_array_equal(xb, to_blocked(x))
    if c % 16:
        assert not xb[:, -1, ..., c % 16:].any()  # lanes past the last channel are zero
    np.testing.assert_array_equal(_run(back, [xb]), x)


def test_reorder_refuses_misfitting_shapes() -> None:
    with pytest.raises(KernelError, match="not a 20-channel tensor"):
        bind_layer(LayerSpec("t", "Reorder", {"to": "nchw16c", "channels": 20},
                             (_spec((1, 20, 4, 4)),), (_spec((1, 1, 4, 4, 16)),)))
    with pytest.raises(KernelError, match="bad attributes"):
        bind_layer(LayerSpec("t", "Reorder", {"to": "nhwc", "channels": 20},
                             (_spec((1, 20, 4, 4)),), (_spec((1, 2, 4, 4, 16)),)))


@pytest.mark.parametrize("op", ["ReduceMean", "ReduceSum"])
@pytest.mark.parametrize("shape,axes", [((2, 5, 7, 7, 16), [2, 3]), ((1, 3, 4, 32), [1, 2]),
                                        ((3, 9, 16), [1])])
def test_middle_reductions(op: str, shape: tuple[int, ...], axes: list[int],
                           forking: str) -> None:
    x = _rand(*shape)
    want = (np.mean if op == "ReduceMean" else np.sum)(x, axis=tuple(axes), keepdims=True)
    spec = LayerSpec("r", op, {"axes": axes, "keepdims": 1}, (_spec(shape),),
                     (_spec(want.shape),), "middle")
    np.testing.assert_allclose(_run(spec, [x]), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("program,first,second", [
    ([("HardSigmoid", [0], {"alpha": 0.2, "beta": 0.5}, "small"), ("Mul", [2, 1], {}, "out")],
     (1, 6, 1, 1, 16), (1, 6, 5, 5, 16)),
    ([("Sub", [0, 1], {}, "out")], (2, 3, 5, 5, 16), (2, 3, 1, 1, 16)),
    ([("Sub", [0, 1], {}, "out")], (2, 3, 1, 1, 16), (2, 3, 5, 5, 16)),
    ([("Relu", [0], {}, "small"), ("Add", [1, 2], {}, "out")], (2, 3, 1, 1, 32),
     (2, 3, 4, 4, 32)),
])
def test_middle_broadcasts(program: list[tuple[Any, ...]], first: tuple[int, ...],
                           second: tuple[int, ...], forking: str) -> None:
    out = max(first, second, key=lambda s: int(np.prod(s)))
    small = min(first, second, key=lambda s: int(np.prod(s)))
    steps = [{"op": op, "in": regs, "attrs": attrs, "dtype": "float32",
              "shape": list(out if kind == "out" else small)}
             for op, regs, attrs, kind in program]
    a, b = _rand(*first), _rand(*second)
    spec = LayerSpec("m", "Pointwise", {"program": steps}, (_spec(first), _spec(second)),
                     (_spec(out),), None)
    assert "middle" in [t.name for t in candidate_tactics(spec)]
    got = _run(LayerSpec("m", "Pointwise", {"program": steps}, spec.inputs, spec.outputs,
                         "middle"), [a, b])
    want = _run(LayerSpec("m", "Pointwise", {"program": steps}, spec.inputs, spec.outputs,
                          REFERENCE), [a, b])
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_padded_blocks_on_large_planes() -> None:
    """8 channels are half padding in a block of 16; the layers are blocked on a large
    plane (144×144) as on a small one, the 8-channel stem included, and agree with
    onnxruntime. (On the large plane the last 1×1 layer, which writes the network's planar
    output, stays planar: blocked, it would need a reorder of a large plane after it.)"""
    def model(size: int) -> Any:
        inits: dict[str, np.ndarray] = {}
        nodes = [_conv("stem", "x", "a", 3, 8, 3, 2, inits=inits),
                 _conv("dw", "a", "b", 8, 8, 3, group=8, inits=inits),
                 _conv("pw", "b", "y", 8, 16, 1, inits=inits)]
        return make_model(nodes, {"x": (np.float32, (1, 3, size, size))}, ["y"], inits)

    for size, last in ((288, None), (48, ["nchw16c", "nchw16c"])):
        graph = model(size)
        prog = read_loadable(build(graph, BuildOptions(autotune=False)))
        assert [layer.attrs.get("layouts") for layer in prog.layers if layer.op == "Conv"] == [
            ["nchw", "nchw16c"], ["nchw16c", "nchw16c"], last], size
        feeds = {"x": _rand(1, 3, size, size)}
        model_tolerance_ok(LoadedModule(build(graph, BuildOptions(autotune=False))).run(feeds),
                           run_ort(graph, feeds))
