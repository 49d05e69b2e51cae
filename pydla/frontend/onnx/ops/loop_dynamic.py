"""Slice and Range inside a Loop body, with parameters that change from one iteration to
the next (a decoder writing step ``i`` of its output buffer: SLANet's ``Slice(buf, i,
min(501, i + 1))`` and ``Range(i, min(501, i + 1), 1)``).

Outside a loop such parameters must be constants (a fixed-shape loadable). In a body they
may be tensors as long as the *shapes* they give do not change: the importer evaluates
them for the first iteration (``BodyContext.first_value``: the body's layers run on the
loop's initial values) and plans a DynamicSlice / DynamicRange layer of that shape; the
kernels (pydla.backends.cpu.dynamic_params) refuse at run time a value giving another.
The loop body routes a node here by giving it the private domain ``pydla.loop``
(pydla.frontend.onnx.ops.loop_layer.import_body).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydla.backends.cpu.dynamic_params import range_length, slice_bounds
from pydla.dtypes import DType
from pydla.frontend.onnx.importer import ImportContext, OnnxNode
from pydla.frontend.onnx.registry import onnx_op
from pydla.ir import Value

if TYPE_CHECKING:
    from pydla.frontend.onnx.ops.loop_layer import BodyContext

DOMAIN = "pydla.loop"
# op → the parameter inputs that may be tensors in a loop body
DYNAMIC_PARAMS = {"Slice": (1, 2), "Range": (0, 1, 2)}


def _body(ctx: ImportContext) -> BodyContext:
    from pydla.frontend.onnx.ops.loop_layer import BodyContext

    if not isinstance(ctx, BodyContext):
        raise ctx.error(f"the {DOMAIN} domain is pydla's own, for Loop bodies only")
    return ctx


def _ints(ctx: BodyContext, v: Value | None, what: str) -> list[int]:
    if v is None:
        raise ctx.error(f"{what} is missing")
    return [int(x) for x in ctx.first_value(v).reshape(-1)]


@onnx_op(f"{DOMAIN}.Slice")
def import_dynamic_slice(ctx: ImportContext, node: OnnxNode) -> list[Value]:
    bctx = _body(ctx)
    x, starts_v, ends_v = node.input(0), node.input(1), node.input(2)
    if x is None or starts_v is None or ends_v is None:
        raise ctx.error("Slice needs data, starts and ends")
    starts, ends = _ints(bctx, starts_v, "Slice starts"), _ints(bctx, ends_v, "Slice ends")
    axes_v, steps_v = node.input(3), node.input(4)
    rank = len(x.shape)
    axes = (list(range(len(starts))) if axes_v is None
            else [int(a) for a in ctx.const_value(axes_v, "Slice axes").reshape(-1)])
    steps = ([1] * len(starts) if steps_v is None
             else [int(s) for s in ctx.const_value(steps_v, "Slice steps").reshape(-1)])
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise ctx.error(f"starts {starts}, ends {ends}, axes {axes} and steps {steps} differ "
                        "in length")
    if any(not -rank <= a < rank for a in axes) or 0 in steps:
        raise ctx.error(f"Slice axes {axes} out of range for rank {rank}, or a step of 0")
    axes = [a % rank for a in axes]
    shape = list(x.shape)
    for a, s, e, st in zip(axes, starts, ends, steps):
        shape[a] = len(slice_bounds(x.shape[a], s, e, st))
    index_type = DType.INT64
    params = [_as(ctx, v, index_type) for v in (starts_v, ends_v)]
    return ctx.emit("DynamicSlice", [x, *params], {"axes": axes, "steps": steps},
                    out_types=[(tuple(shape), x.dtype)], fold=False)


@onnx_op(f"{DOMAIN}.Range")
def import_dynamic_range(ctx: ImportContext, node: OnnxNode) -> list[Value]:
    bctx = _body(ctx)
    values = [node.input(k) for k in range(3)]
    if any(v is None or v.size != 1 for v in values):
        raise ctx.error("Range takes three single values")
    start, limit, delta = (bctx.first_value(v).reshape(-1)[0].item()  # type: ignore[arg-type]
                           for v in values)
    if delta == 0:
        raise ctx.error("Range delta cannot be 0")
    dtype = values[0].dtype  # type: ignore[union-attr]
    n = range_length(start, limit, delta, not dtype.is_float)
    return ctx.emit("DynamicRange", values, out_types=[((n,), dtype)], fold=False)


def _as(ctx: ImportContext, v: Value, dtype: DType) -> Value:
    if v.dtype is dtype:
        return v
    return ctx.emit("Cast", [v], {"to": int(dtype)}, out_types=[(v.shape, dtype)])[0]
