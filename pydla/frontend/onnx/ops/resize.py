"""Importers of Resize (opsets 10–19) and Upsample (7–9).

Both become one canonical ``Resize`` whose parameters are attributes over every axis:
``scales`` (the factor each axis' coordinate transformation uses), ``roi`` (starts then
ends, only read by tf_crop_and_resize), ``mode``, ``coordinate_transformation_mode``,
``nearest_mode``, ``cubic_coeff_a``, ``exclude_outside``, ``antialias`` and
``extrapolation_value``. ``axes``, ``sizes`` and ``keep_aspect_ratio_policy`` are resolved
here into the output shape and the per-axis scales.

Before opset 11 (Upsample, Resize-10) coordinates are asymmetric and nearest uses the
legacy rule onnxruntime keeps for them, canonically ``nearest_mode="simple"``: truncate
when upsampling, ceil when downsampling.
"""

from __future__ import annotations

import numpy as np

from pydla.frontend.onnx.importer import ImportContext, OnnxNode
from pydla.frontend.onnx.ops.common import int_list
from pydla.frontend.onnx.registry import onnx_op
from pydla.ir import Value

_MODES = ("nearest", "linear", "cubic")
_COORDINATE_MODES = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel",
                     "align_corners", "asymmetric", "tf_half_pixel_for_nn",
                     "tf_crop_and_resize")
_NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")


def _floats(ctx: ImportContext, v: Value | None, what: str) -> list[float] | None:
    """A constant float input as a list; None when absent or empty (the "not given" forms)."""
    if v is None:
        return None
    data = ctx.const_value(v, what).reshape(-1)
    return [float(s) for s in data] if data.size else None


def _output_shape(ctx: ImportContext, in_shape: tuple[int, ...], axes: list[int],
                  scales: list[float] | None, sizes: list[int] | None,
                  policy: str) -> tuple[list[float], list[int]]:
    """Per-axis scales and the output shape (onnxruntime's float32 arithmetic)."""
    rank = len(in_shape)
    full_scales = [1.0] * rank
    out = list(in_shape)
    if scales is not None:
        if len(scales) != len(axes):
            raise ctx.error(f"scales has {len(scales)} values for {len(axes)} axes")
        for a, s in zip(axes, scales):
            if not s > 0:
                raise ctx.error(f"scale {s} must be positive")
            full_scales[a] = s
            out[a] = int(np.float32(s) * np.float32(in_shape[a]))
        return full_scales, out
    if sizes is None:
        raise ctx.error("neither scales nor sizes is given")
    if len(sizes) != len(axes):
        raise ctx.error(f"sizes has {len(sizes)} values for {len(axes)} axes")
    for a, n in zip(axes, sizes):
        if n < 0 or (in_shape[a] == 0 and n != 0):
            raise ctx.error(f"cannot resize axis {a} of length {in_shape[a]} to {n}")
        out[a] = n
        full_scales[a] = n / in_shape[a] if in_shape[a] else 1.0
    if policy != "stretch":
        pick = min if policy == "not_larger" else max
        common = pick(full_scales[a] for a in axes)
        for a in axes:
            full_scales[a] = common
            out[a] = int(np.floor(common * in_shape[a] + 0.5))  # round half up
    return full_scales, out


def _emit_resize(ctx: ImportContext, x: Value, attrs: dict, scales: list[float],
                 out_shape: list[int], roi: list[float]) -> list[Value]:
    if attrs["mode"] not in _MODES:
        raise ctx.error(f"mode {attrs['mode']!r} is not supported")
    attrs = dict(attrs, scales=scales, roi=roi)
    return ctx.emit("Resize", [x], attrs, out_types=[(tuple(out_shape), x.dtype)])


def _legacy_attrs(mode: str) -> dict:
    return {"mode": mode, "coordinate_transformation_mode": "asymmetric",
            "nearest_mode": "simple", "cubic_coeff_a": -0.75, "exclude_outside": 0,
            "antialias": 0, "extrapolation_value": 0.0}


def _default_roi(rank: int) -> list[float]:
    return [0.0] * rank + [1.0] * rank


def _import_legacy(ctx: ImportContext, node: OnnxNode, scales: list[float] | None) -> list[Value]:
    x = node.inputs[0]
    assert x is not None
    rank = len(x.shape)
    if scales is None or len(scales) != rank:
        raise ctx.error(f"{node.op_type} needs one scale per axis ({rank})")
    full, out = _output_shape(ctx, x.shape, list(range(rank)), scales, None, "stretch")
    return _emit_resize(ctx, x, _legacy_attrs(str(node.attr("mode", "nearest"))), full, out,
                        _default_roi(rank))


@onnx_op("Upsample", since=7)
def import_upsample(ctx: ImportContext, node: OnnxNode) -> list[Value]:
    if node.input(1) is not None:
        return _import_legacy(ctx, node, _floats(ctx, node.input(1), "scales"))
    return _import_legacy(ctx, node, [float(s) for s in node.attr("scales", [])])


@onnx_op("Resize", since=10)
def import_resize10(ctx: ImportContext, node: OnnxNode) -> list[Value]:
    return _import_legacy(ctx, node, _floats(ctx, node.input(1), "scales"))


@onnx_op("Resize", since=11)
def import_resize(ctx: ImportContext, node: OnnxNode) -> list[Value]:
    x = node.inputs[0]
    assert x is not None
    rank = len(x.shape)
    a = node.attrs_with_defaults()
    coord = str(a.get("coordinate_transformation_mode", "half_pixel"))
    nearest = str(a.get("nearest_mode", "round_prefer_floor"))
    if coord not in _COORDINATE_MODES:
        raise ctx.error(f"coordinate_transformation_mode {coord!r} is not supported")
    if nearest not in _NEAREST_MODES:
        raise ctx.error(f"nearest_mode {nearest!r} is not supported")
    antialias = int(a.get("antialias", 0))
    if antialias and a.get("mode") == "nearest":
        raise ctx.error("antialias applies to the linear and cubic modes only")
    axes = list(range(rank))
    if "axes" in a:
        axes = []
        for ax in a["axes"]:
            if not -rank <= int(ax) < rank:
                raise ctx.error(f"axis {ax} is out of range for rank {rank}")
            axes.append(int(ax) % rank)
    scales = _floats(ctx, node.input(2), "scales")
    sizes_input = node.input(3)
    sizes = int_list(ctx, sizes_input, "sizes") if sizes_input is not None else None
    if scales is not None and sizes:
        raise ctx.error("only one of scales and sizes may be given")
    full, out = _output_shape(ctx, x.shape, axes, scales, sizes or None,
                              str(a.get("keep_aspect_ratio_policy", "stretch")))
    roi = _default_roi(rank)
    if coord == "tf_crop_and_resize":
        given = _floats(ctx, node.input(1), "roi")
        if given is None or len(given) != 2 * len(axes):
            raise ctx.error(f"tf_crop_and_resize needs a roi of {2 * len(axes)} values")
        for i, ax in enumerate(axes):
            roi[ax], roi[rank + ax] = given[i], given[len(axes) + i]
    attrs = {"mode": str(a.get("mode", "nearest")), "coordinate_transformation_mode": coord,
             "nearest_mode": nearest, "cubic_coeff_a": float(a.get("cubic_coeff_a", -0.75)),
             "exclude_outside": int(a.get("exclude_outside", 0)), "antialias": antialias,
             "extrapolation_value": float(a.get("extrapolation_value", 0.0))}
    return _emit_resize(ctx, x, attrs, full, out, roi)
