"""Importers of the convolutions: Conv, ConvTranspose, DeformConv,
CausalConvWithState.

``auto_pad`` is resolved here (every shape is fixed), so the canonical ops carry explicit
``pads`` = [begin…, end…] together with ``strides``, ``dilations`` and ``group``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pydla.frontend.onnx.importer import ImportContext, OnnxNode
from pydla.frontend.onnx.registry import onnx_op
from pydla.ir import Value


def same_pads(in_sizes: Sequence[int], kernel: Sequence[int], strides: Sequence[int],
              dilations: Sequence[int], upper: bool) -> list[int]:
    """SAME padding (output = ceil(in / stride)); the odd pixel goes at the end if ``upper``."""
    begin, end = [], []
    for i, k, s, d in zip(in_sizes, kernel, strides, dilations):
        out = -(-i // s)
        total = max(0, (out - 1) * s + (k - 1) * d + 1 - i)
        small = total // 2
        begin.append(small if upper else total - small)
        end.append(total - small if upper else small)
    return begin + end


def window_attrs(ctx: ImportContext, attrs: Mapping[str, Any], in_sizes: Sequence[int],
                 kernel: Sequence[int]) -> dict[str, list[int]]:
    """strides, dilations and explicit pads of a sliding-window op, auto_pad resolved."""
    nd = len(kernel)
    strides = list(attrs.get("strides") or [1] * nd)
    dilations = list(attrs.get("dilations") or [1] * nd)
    pads = list(attrs.get("pads") or [0] * (2 * nd))
    if len(strides) != nd or len(dilations) != nd or len(pads) != 2 * nd:
        raise ctx.error(f"strides {strides}, dilations {dilations} or pads {pads} do not fit "
                        f"a {nd}-D window")
    if any(v < 1 for v in strides + dilations) or any(p < 0 for p in pads):
        raise ctx.error(f"invalid strides {strides}, dilations {dilations} or pads {pads}")
    auto_pad = attrs.get("auto_pad", "NOTSET")
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        pads = same_pads(in_sizes, kernel, strides, dilations, auto_pad == "SAME_UPPER")
    elif auto_pad == "VALID":
        pads = [0] * (2 * nd)
    elif auto_pad != "NOTSET":
        raise ctx.error(f"unknown auto_pad {auto_pad!r}")
    return {"strides": strides, "dilations": dilations, "pads": pads}


def _kernel_shape(ctx: ImportContext, attrs: Mapping[str, Any], w: Value) -> list[int]:
    kernel = list(w.shape[2:])
    given = attrs.get("kernel_shape")
    if given is not None and list(given) != kernel:
        raise ctx.error(f"kernel_shape {list(given)} disagrees with the weight shape {w.shape}")
    return kernel


def _data_inputs(ctx: ImportContext, node: OnnxNode) -> tuple[Value, Value]:
    x, w = node.input(0), node.input(1)
    if x is None or w is None:
        raise ctx.error("X and W are required")
    if len(x.shape) < 3 or len(w.shape) != len(x.shape):
        raise ctx.error(f"X {x.shape} and W {w.shape} are not N-D images of the same rank")
    return x, w


@onnx_op("Conv")
def import_conv(ctx: ImportContext, node: OnnxNode) -> list[Value]:
    x, w = _data_inputs(ctx, node)
    return ctx.emit("Conv", [x, w, node.input(2)], conv_attrs(ctx, node, x, w))


def conv_attrs(ctx: ImportContext, node: OnnxNode, x: Value, w: Value) -> dict[str, Any]:
    """Canonical window attributes and group of a convolution (Conv, QLinearConv…)."""
    a = node.attrs_with_defaults()
    attrs: dict[str, Any] = window_attrs(ctx, a, x.shape[2:], _kernel_shape(ctx, a, w))
    attrs["group"] = int(a.get("group", 1))
    return attrs


@onnx_op("ConvTranspose")
def import_conv_transpose(ctx: ImportContext, node: OnnxNode) -> list[Value]:
    x, w = _data_inputs(ctx, node)
    a = node.attrs_with_defaults()
    kernel = _kernel_shape(ctx, a, w)
    nd = len(kernel)
    group = int(a.get("group", 1))
    in_sizes = x.shape[2:]
    auto_pad = a.get("auto_pad", "NOTSET")
    plain = dict(a)
    plain.pop("auto_pad", None)  # ConvTranspose's SAME padding works backwards, below
    attrs = window_attrs(ctx, plain, in_sizes, kernel)
    strides, dilations = attrs["strides"], attrs["dilations"]
    out_pad = list(a.get("output_padding") or [0] * nd)
    if len(out_pad) != nd:
        raise ctx.error(f"output_padding {out_pad} does not fit a {nd}-D kernel")
    natural = [s * (i - 1) + op + (k - 1) * d + 1
               for i, s, op, k, d in zip(in_sizes, strides, out_pad, kernel, dilations)]
    target = a.get("output_shape")
    if target is None and auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        target = [i * s for i, s in zip(in_sizes, strides)]
    if target is not None:
        out = list(target)[-nd:]
        if len(out) != nd:
            raise ctx.error(f"output_shape {list(target)} does not fit a {nd}-D kernel")
        # ONNX: the odd pixel of total padding is cut at the end for SAME_UPPER, else first.
        begin, end = [], []
        for nat, o in zip(natural, out):
            total = max(0, nat - o)
            small = total // 2
            begin.append(small if auto_pad == "SAME_UPPER" else total - small)
            end.append(total - small if auto_pad == "SAME_UPPER" else small)
        attrs["pads"] = begin + end
    else:
        if auto_pad == "VALID":
            attrs["pads"] = [0] * (2 * nd)
        elif auto_pad != "NOTSET":
            raise ctx.error(f"unknown auto_pad {auto_pad!r}")
        pads = attrs["pads"]
        out = [nat - pads[i] - pads[i + nd] for i, nat in enumerate(natural)]
    if any(o < 1 for o in out):
        raise ctx.error(f"output spatial shape {out} is empty")
    attrs["group"] = group
    shape = (x.shape[0], w.shape[1] * group, *out)
    return ctx.emit("ConvTranspose", [x, w, node.input(2)], attrs, out_types=[(shape, x.dtype)])


@onnx_op("CausalConvWithState", since=27)
def import_causal_conv_with_state(ctx: ImportContext, node: OnnxNode) -> list[Value]:
    x, w = node.input(0), node.input(1)
    if x is None or w is None or len(x.shape) != 3 or len(w.shape) != 3:
        raise ctx.error("input (B, C, L) and weight (C, 1, k) are required")
    batch, channels, _ = x.shape
    k = w.shape[2]
    if w.shape[:2] != (channels, 1) or k < 1:
        raise ctx.error(f"weight {w.shape} is not a depthwise (C, 1, k) kernel for {x.shape}")
    past = node.input(3)
    if past is not None and past.shape != (batch, channels, k - 1):
        raise ctx.error(f"past_state {past.shape} must be {(batch, channels, k - 1)}")
    activation = str(node.attr("activation", "none"))
    if activation not in ("none", "silu", "swish"):
        raise ctx.error(f"unknown activation {activation!r}")
    types = [(x.shape, x.dtype), ((batch, channels, k - 1), x.dtype)]
    return ctx.emit("CausalConvWithState", [x, w, node.input(2), past],
                    {"activation": activation}, out_types=types[:len(node.output_names)])


@onnx_op("DeformConv", since=19)
def import_deform_conv(ctx: ImportContext, node: OnnxNode) -> list[Value]:
    x, w = _data_inputs(ctx, node)
    offset = node.input(2)
    if len(x.shape) != 4:
        raise ctx.error("only 2-D DeformConv is supported")
    if offset is None:
        raise ctx.error("offset is required")
    a = node.attrs_with_defaults()
    kernel = _kernel_shape(ctx, a, w)
    attrs: dict[str, Any] = window_attrs(ctx, a, x.shape[2:], kernel)
    attrs["group"] = int(a.get("group", 1))
    attrs["offset_group"] = int(a.get("offset_group", 1))
    k = kernel[0] * kernel[1]
    pads, strides, dilations = attrs["pads"], attrs["strides"], attrs["dilations"]
    out = [(i + pads[d] + pads[d + 2] - (kernel[d] - 1) * dilations[d] - 1) // strides[d] + 1
           for d, i in enumerate(x.shape[2:])]
    if x.shape[1] % attrs["offset_group"] or x.shape[1] != w.shape[1] * attrs["group"] or \
            offset.shape != (x.shape[0], 2 * attrs["offset_group"] * k, *out):
        raise ctx.error(f"X {x.shape}, W {w.shape}, offset {offset.shape} and the attributes "
                        "do not agree")
    shape = (x.shape[0], w.shape[0], *out)
    return ctx.emit("DeformConv", [x, w, offset, node.input(3), node.input(4)], attrs,
                    out_types=[(shape, x.dtype)])
