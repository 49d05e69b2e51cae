"""Importers of pooling: MaxPool, AveragePool, LpPool, GlobalAveragePool, GlobalMaxPool,
GlobalLpPool (as LpPool over the whole image), MaxUnpool.

Output shapes are computed here (auto_pad and ceil_mode resolved to explicit pads and a fixed
output size) so the kernels need no rounding rule of their own.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pydla.dtypes import DType
from pydla.frontend.onnx.importer import ImportContext, OnnxNode
from pydla.frontend.onnx.ops.common import int_list
from pydla.frontend.onnx.ops.conv import window_attrs
from pydla.frontend.onnx.registry import onnx_op
from pydla.ir import Value


def pool_out_sizes(in_sizes: Sequence[int], kernel: Sequence[int], attrs: Mapping[str, Any],
                   ceil_mode: bool) -> list[int]:
    """Output spatial sizes for explicit pads; a ceil window starting in the end pad is dropped."""
    nd = len(kernel)
    pads = attrs["pads"]
    out = []
    for i, (n, k, s, d) in enumerate(zip(in_sizes, kernel, attrs["strides"], attrs["dilations"])):
        span = n + pads[i] + pads[i + nd] - ((k - 1) * d + 1)
        o = (-(-span // s) if ceil_mode else span // s) + 1
        if ceil_mode and (o - 1) * s >= n + pads[i]:
            o -= 1
        out.append(o)
    return out


def _input(ctx: ImportContext, node: OnnxNode) -> Value:
    x = node.input(0)
    if x is None or len(x.shape) < 3:
        raise ctx.error("X must be an N-D image (N, C, spatial…)")
    return x


def _windowed(ctx: ImportContext, node: OnnxNode) -> tuple[Value, dict[str, Any], tuple[int, ...]]:
    """X, canonical attributes and output shape of a sliding-window pool."""
    x = _input(ctx, node)
    a = node.attrs_with_defaults()
    if "kernel_shape" not in a:
        raise ctx.error("kernel_shape is required")
    kernel = [int(k) for k in a["kernel_shape"]]
    if len(kernel) != len(x.shape) - 2 or min(kernel) < 1:
        raise ctx.error(f"kernel_shape {kernel} does not fit input {x.shape}")
    attrs: dict[str, Any] = {"kernel_shape": kernel}
    attrs.update(window_attrs(ctx, a, x.shape[2:], kernel))
    # With auto_pad the output size is fixed by the padding rule alone: ceil_mode plays no part.
    ceil = bool(a.get("ceil_mode", 0)) and a.get("auto_pad", "NOTSET") == "NOTSET"
    out = pool_out_sizes(x.shape[2:], kernel, attrs, ceil)
    if min(out) < 1:
        raise ctx.error(f"the window {kernel} does not fit input {x.shape}")
    return x, attrs, (*x.shape[:2], *out)


@onnx_op("MaxPool")
def import_max_pool(ctx: ImportContext, node: OnnxNode) -> list[Value]:
    x, attrs, shape = _windowed(ctx, node)
    attrs["storage_order"] = int(node.attr("storage_order", 0))
    types = [(shape, x.dtype)]
    if len(node.output_names) > 1 and node.output_names[1]:
        types.append((shape, DType.INT64))
    return ctx.emit("MaxPool", [x], attrs, out_types=types)


@onnx_op("AveragePool")
def import_average_pool(ctx: ImportContext, node: OnnxNode) -> list[Value]:
    x, attrs, shape = _windowed(ctx, node)
    attrs["count_include_pad"] = int(node.attr("count_include_pad", 0))
    return ctx.emit("AveragePool", [x], attrs, out_types=[(shape, x.dtype)])


@onnx_op("LpPool")
def import_lp_pool(ctx: ImportContext, node: OnnxNode) -> list[Value]:
    x, attrs, shape = _windowed(ctx, node)
    attrs["p"] = int(node.attr("p", 2))
    return ctx.emit("LpPool", [x], attrs, out_types=[(shape, x.dtype)])


@onnx_op("GlobalAveragePool", "GlobalMaxPool")
def import_global_pool(ctx: ImportContext, node: OnnxNode) -> list[Value]:
    x = _input(ctx, node)
    shape = (*x.shape[:2], *([1] * (len(x.shape) - 2)))
    return ctx.emit(node.op_type, [x], {}, out_types=[(shape, x.dtype)])


@onnx_op("GlobalLpPool")
def import_global_lp_pool(ctx: ImportContext, node: OnnxNode) -> list[Value]:
    x = _input(ctx, node)
    nd = len(x.shape) - 2
    attrs = {"kernel_shape": list(x.shape[2:]), "strides": [1] * nd, "dilations": [1] * nd,
             "pads": [0] * (2 * nd), "p": int(node.attr("p", 2))}
    shape = (*x.shape[:2], *([1] * nd))
    return ctx.emit("LpPool", [x], attrs, out_types=[(shape, x.dtype)])


@onnx_op("MaxUnpool", since=9)
def import_max_unpool(ctx: ImportContext, node: OnnxNode) -> list[Value]:
    x, ind = _input(ctx, node), node.input(1)
    if ind is None or ind.shape != x.shape:
        raise ctx.error("I must have the shape of X")
    a = node.attrs_with_defaults()
    kernel = [int(k) for k in a["kernel_shape"]]
    nd = len(kernel)
    strides = list(a.get("strides") or [1] * nd)
    pads = list(a.get("pads") or [0] * (2 * nd))
    inner = [(n - 1) * s + k - pads[i] - pads[i + nd]
             for i, (n, s, k) in enumerate(zip(x.shape[2:], strides, kernel))]
    unpooled = (*x.shape[:2], *inner)
    shape = unpooled
    if node.input(2) is not None:
        shape = tuple(int_list(ctx, node.input(2), "output_shape"))
        if len(shape) != len(x.shape) or any(o < u for o, u in zip(shape, unpooled)):
            raise ctx.error(f"output_shape {shape} is smaller than the unpooled shape {unpooled}")
    return ctx.emit("MaxUnpool", [x, ind], {"unpooled_shape": list(unpooled)},
                    out_types=[(shape, x.dtype)])
