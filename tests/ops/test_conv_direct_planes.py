"""The ``direct_planes`` Conv tactics (pydla/backends/cpu/kernels/conv_fast/direct_planes.py)
against the reference Conv kernel: long 1-D filters at stride 2 (whole rows per unit, and
rows split into pieces), few output channels with padding, dilation and groups, batches,
native epilogues, the channel-blocked layouts on either side (padding lanes of the input
never read, of the output written as zeros), and the shapes it refuses.

Tolerance: max|Δ| ≤ 1e-4 · max(1, max|reference|) (the taps are summed in another order).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pytest

from pydla.backends.base import LayerSpec, TensorSpec
from pydla.backends.cpu import threads, workspace
from pydla.backends.cpu.backend import bind_layer
from pydla.backends.cpu.kernels.conv_fast import direct_planes
from pydla.backends.cpu.kernels.conv_fast.epilogue import compile_epilogue
from pydla.backends.cpu.kernels.reorder import to_blocked, to_planar
from pydla.backends.cpu.registry import REFERENCE, candidate_tactics
from pydla.dtypes import DType

RNG = np.random.default_rng(31)
F32 = DType.FLOAT32


@pytest.fixture(autouse=True, params=["split", "one_thread"])
def _threads(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Small layers split over the threads anyway (each thread's share of units), and run
    whole on the calling thread; scratch poisoned."""
    monkeypatch.setattr(threads, "PARALLEL_MIN_FLOPS", 0 if request.param == "split" else 1 << 62)
    # the input's phase planes split by the threads too (else small inputs stay on one)
    monkeypatch.setattr(direct_planes, "SPLIT_ALONE", 0 if request.param == "split" else 1 << 62)
    # Scratch starts as NaN: a kernel reading scratch it did not write in the run fails.
    monkeypatch.setattr(workspace, "FILL", float("nan"))


def _rand(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def _attrs(strides: Sequence[int] = (1, 1), pads: Sequence[int] = (0, 0, 0, 0),
           dilations: Sequence[int] = (1, 1), group: int = 1) -> dict[str, Any]:
    return {"strides": list(strides), "dilations": list(dilations), "pads": list(pads),
            "group": group}


def _out_shape(x: Sequence[int], w: Sequence[int], a: Mapping[str, Any]) -> tuple[int, ...]:
    (sh, sw), (dh, dw), (t, left, b, r) = a["strides"], a["dilations"], a["pads"]
    return (x[0], w[0], (x[2] + t + b - (w[2] - 1) * dh - 1) // sh + 1,
            (x[3] + left + r - (w[3] - 1) * dw - 1) // sw + 1)


def _spec(xs: Sequence[int], ws: Sequence[int], attrs: Mapping[str, Any], tactic: str,
          ys: Sequence[int] | None = None, extra: Sequence[Sequence[int]] = (),
          program: Sequence[Mapping[str, Any]] | None = None) -> LayerSpec:
    out = tuple(ys) if ys is not None else _out_shape(xs, ws, attrs)
    a = dict(attrs)
    if program is not None:
        a["epilogue"] = {"inputs": len(extra), "program": [
            {**s, "shape": list(out), "dtype": "float32"} for s in program]}
    ins = (TensorSpec(tuple(xs), F32), TensorSpec(tuple(ws), F32), TensorSpec((ws[0],), F32),
           *(TensorSpec(tuple(e), F32) for e in extra))
    return LayerSpec("conv", "Conv", a, ins, (TensorSpec(out, F32),), tactic)


def _run(spec: LayerSpec, inputs: Sequence[np.ndarray]) -> np.ndarray:
    out = np.full(spec.outputs[0].shape, np.nan, np.float32)  # every value must be written
    bind_layer(spec)(list(inputs), [out])
    return out


def _close(got: np.ndarray, want: np.ndarray, label: str) -> None:
    assert got.shape == want.shape, label
    err = float(np.max(np.abs(got.astype(np.float64) - want)))
    bound = 1e-4 * max(1.0, float(np.max(np.abs(want))))
    assert err <= bound, f"{label}: max|Δ| {err:.3g} > {bound:.3g}"


PLANAR = [  # (x shape, w shape, attrs)
    # the CQT front end's 1-D filters: many outputs on one channel, stride 2, rows per unit
    ((1, 1, 1, 300), (6, 1, 1, 64), _attrs((1, 2))),
    ((1, 1, 1, 301), (5, 1, 1, 33), _attrs((1, 2), (0, 7, 0, 9))),
    # one row longer than a unit's run: pieces of a row, the last one ragged
    ((1, 1, 1, 2600), (1, 1, 1, 40), _attrs((1, 2), (0, 3, 0, 2))),
    ((2, 2, 1, 2200), (3, 2, 1, 9), _attrs((1, 1), (0, 4, 0, 4))),
    # one or few output channels: padding, batches, strides, dilation, groups
    ((1, 8, 12, 20), (1, 8, 5, 5), _attrs(pads=(2, 2, 2, 2))),
    ((2, 5, 9, 11), (3, 5, 7, 3), _attrs(pads=(3, 1, 3, 1))),
    ((1, 6, 13, 10), (2, 6, 3, 3), _attrs((2, 3), (1, 2, 0, 1), (2, 1))),
    ((2, 4, 8, 9), (6, 2, 3, 3), _attrs(pads=(1, 1, 1, 1), group=2)),
    # many output channels over one input channel
    ((1, 1, 6, 70), (20, 1, 2, 16), _attrs((1, 2), (0, 1, 1, 0))),
]


@pytest.mark.parametrize("xs,ws,attrs", PLANAR)
def test_planar_matches_reference(xs: tuple[int, ...], ws: tuple[int, ...],
                                  attrs: dict[str, Any]) -> None:
    x, w, b = _rand(*xs), _rand(*ws), _rand(ws[0])
    spec = _spec(xs, ws, attrs, "direct_planes")
    assert "direct_planes" in {t.name for t in candidate_tactics(spec)}
    want = _run(_spec(xs, ws, attrs, REFERENCE), [x, w, b]).astype(np.float64)
    _close(_run(spec, [x, w, b]), want, f"{xs} {ws}")


EPILOGUES = {
    "relu": ([{"op": "Relu", "in": [0]}], 0),
    "neg": ([{"op": "Neg", "in": [0]}], 0),  # the CQT's imaginary filters: native now
    "residual_clip": ([{"op": "Add", "in": [0, 1]},
                       {"op": "Clip", "in": [2], "attrs": {"min": -0.5, "max": 1.0}}], 1),
}


@pytest.mark.parametrize("name", list(EPILOGUES))
@pytest.mark.parametrize("xs,ws,attrs", [PLANAR[0], PLANAR[2], PLANAR[5]])
def test_planar_epilogue(name: str, xs: tuple[int, ...], ws: tuple[int, ...],
                         attrs: dict[str, Any]) -> None:
    program, k = EPILOGUES[name]
    out = _out_shape(xs, ws, attrs)
    x, w, b = _rand(*xs), _rand(*ws), _rand(ws[0])
    extra = [_rand(*out) for _ in range(k)]
    spec = _spec(xs, ws, attrs, "direct_planes", extra=[out] * k, program=program)
    assert compile_epilogue(spec) is not None  # run by the kernel, not the generic path
    want = _run(_spec(xs, ws, attrs, REFERENCE, extra=[out] * k, program=program),
                [x, w, b, *extra]).astype(np.float64)
    _close(_run(spec, [x, w, b, *extra]), want, name)


BLOCKED = [  # (x shape, w shape, attrs, layouts)
    ((1, 8, 11, 19), (1, 8, 5, 5), _attrs(pads=(2, 2, 2, 2)), ("nchw16c", "nchw16c")),
    ((2, 8, 9, 13), (8, 8, 3, 7), _attrs(pads=(1, 3, 1, 3)), ("nchw16c", "nchw16c")),
    ((1, 20, 7, 9), (3, 20, 3, 3), _attrs((1, 2), (1, 1, 1, 1)), ("nchw16c", "nchw")),
    ((1, 2, 10, 12), (5, 2, 3, 3), _attrs(pads=(1, 1, 1, 1)), ("nchw", "nchw16c")),
]


@pytest.mark.parametrize("relu", [False, True])
@pytest.mark.parametrize("xs,ws,attrs,layouts", BLOCKED)
def test_blocked_matches_reference(xs: tuple[int, ...], ws: tuple[int, ...],
                                   attrs: dict[str, Any], layouts: tuple[str, str],
                                   relu: bool) -> None:
    x, w, b = _rand(*xs), _rand(*ws), _rand(ws[0])
    want = _run(_spec(xs, ws, attrs, REFERENCE), [x, w, b]).astype(np.float64)
    if relu:
        want = np.maximum(want, 0)
    xin = x
    if layouts[0] == "nchw16c":
        xin = to_blocked(x)
        xin[:, -1, :, :, xs[1] % 16 or 16:] = np.nan  # padding lanes: never read
    out = _out_shape(xs, ws, attrs)
    ys = (out[0], -(-out[1] // 16), out[2], out[3], 16) if layouts[1] == "nchw16c" else out
    program = [{"op": "Relu", "in": [0]}] if relu else None
    spec = _spec(xin.shape, ws, {**attrs, "layouts": list(layouts)}, "direct_planes_nchw16c",
                 ys=ys, program=program)
    assert "direct_planes_nchw16c" in {t.name for t in candidate_tactics(spec)}
    got = _run(spec, [xin, w, b])
    if layouts[1] == "nchw16c":
        assert np.all(got[:, -1, :, :, out[1] % 16 or 16:] == 0)  # padding lanes: zeros
        got = to_planar(got, out[1])
    _close(got, want, f"{xs} {ws} {layouts}")


def test_refusals() -> None:
    def names(spec: LayerSpec) -> set[str]:
        return {t.name for t in candidate_tactics(spec)}

    # many input and output channels: the GEMM tactics' layer
    assert "direct_planes" not in names(_spec((1, 16, 8, 8), (32, 16, 3, 3), _attrs(), REFERENCE))
    # depthwise: its own tactics
    depthwise = _spec((1, 8, 8, 8), (8, 1, 3, 3), _attrs(group=8), REFERENCE)
    assert "direct_planes" not in names(depthwise)
    # a blocked output's epilogue reading another tensor (a blocked residual)
    ys = (1, 1, 8, 8, 16)
    spec = _spec((1, 1, 8, 8, 16), (2, 8, 3, 3), {**_attrs(pads=(1, 1, 1, 1)),
                 "layouts": ["nchw16c", "nchw16c"]}, "direct_planes_nchw16c", ys=ys,
                 extra=[ys], program=[{"op": "Add", "in": [0, 1]}])
    assert "direct_planes_nchw16c" not in names(spec)
    # planes past the memory bound
    big = (1, 1, 1, direct_planes.MAX_PLANES_BYTES // 4)
    assert "direct_planes" not in names(_spec(big, (1, 1, 1, 3), _attrs(), REFERENCE))
    # planar tactic never sees a blocked layer, nor the blocked one a planar layer
    assert "direct_planes" not in names(spec)
    planar = _spec((1, 8, 8, 8), (1, 8, 3, 3), _attrs(), REFERENCE)
    assert "direct_planes_nchw16c" not in names(planar)
