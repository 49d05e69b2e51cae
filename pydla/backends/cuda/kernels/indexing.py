"""GatherElements, GatherND, ScatterElements, ScatterND and ReverseSequence over any layout
and stored type (NVRTC), with the CPU backend's index rules.

Every run-time index is checked against the dimension it indexes: a negative one counts
from the end, one out of range is clamped (never an out-of-bounds access) and recorded in
an index-check slot, which the backend raises as the CPU's KernelError once the task is
waited for (``BindContext.index_check``). A scatter first copies the data to the output,
then applies the updates: ``none`` stores (duplicate indices: one of the updates wins, as
ONNX leaves it open), ``add``/``mul``/``max``/``min`` combine atomically (a compare-and-swap
loop; float sums may round in another order than the CPU's), for 2-, 4- and 8-byte types.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from pydla.backends.cuda.codegen import compute_type, decompose, defines, offset, storage_type
from pydla.backends.cuda.context import BindContext
from pydla.backends.cuda.kernels.pointwise import Operand, copy_program, elementwise_launch
from pydla.backends.cuda.layout import Placement
from pydla.backends.cuda.registry import Candidate, Launch, chain, kernel
from pydla.dtypes import DType
from pydla.errors import KernelError
from pydla.loadable.program import LayerInfo

_INDEX_TYPES = {DType.INT64: "long long", DType.INT32: "int"}
_CAS_TYPES = {2: "unsigned short", 4: "unsigned int", 8: "unsigned long long"}

_KERNEL = r"""
#define CHECKED(v, dim, slot) \
  if (v < -(dim) || v >= (dim)) { slot[0] = 1; slot[1] = v; } \
  if (v < 0) v += (dim); \
  v = v < 0 ? 0 : (v >= (dim) ? (dim) - 1 : v);
UPDATE_FN
extern "C" __global__ void index_op(const TX* __restrict__ x, const TI* __restrict__ idx,
                                    TY* y, SLOTS) {
  for (i64 t = blockIdx.x * (i64)blockDim.x + threadIdx.x; t < TOTAL;
       t += (i64)gridDim.x * blockDim.x) {
COORDS
BODY
  }
}
"""

_REDUCE = {
    "add": ("a + b", "({t})((unsigned long long)a + (unsigned long long)b)"),
    "mul": ("a * b", "({t})((unsigned long long)a * (unsigned long long)b)"),
    "max": ("((a != a || b != b) ? a + b : fmaxf(a, b))", "(a > b ? a : b)"),
    "min": ("((a != a || b != b) ? a + b : fminf(a, b))", "(a < b ? a : b)"),
}


def _update_fn(reduction: str, dtype: DType, where: str, op: str) -> str:
    """Device function ``update(TY* p, TY v)`` applying the reduction."""
    t = storage_type(dtype, where)
    if reduction == "none":
        return f"__device__ __forceinline__ void update({t}* p, const {t}* v) {{ *p = *v; }}"
    cas = _CAS_TYPES.get(dtype.itemsize)
    if cas is None or dtype is DType.BOOL:
        raise KernelError(where, op, f"reduction {reduction!r} over {dtype.name.lower()}: the "
                          "CUDA scatter combines 2-, 4- and 8-byte numbers only")
    ct = compute_type(dtype)
    floating, integer = _REDUCE[reduction]
    expr = floating if ct == "float" else integer.format(t=ct)
    return (f"__device__ __forceinline__ {ct} reduce({ct} a, {ct} b) {{ return {expr}; }}\n"
            f"__device__ __forceinline__ void update({t}* p, const {t}* v) {{\n"
            f"  {cas}* a = reinterpret_cast<{cas}*>(p);\n"
            f"  {cas} old = *a, assumed;\n"
            "  do {\n"
            "    assumed = old;\n"
            f"    {t} next;\n"
            f"    st(&next, reduce(ld(reinterpret_cast<const {t}*>(&assumed)), ld(v)));\n"
            f"    old = atomicCAS(a, assumed, *reinterpret_cast<{cas}*>(&next));\n"
            "  } while (old != assumed);\n"
            "}")


def _index_placement(ctx: BindContext, layer: LayerInfo, i: int) -> Placement:
    if ctx.is_weight(i):
        host = ctx.host(i).astype(np.int64)
        return Placement(ctx.upload(host), host.shape, DType.INT64, "linear")
    idx = ctx.place(i)
    if idx.dtype not in _INDEX_TYPES:
        raise KernelError(layer.name, layer.op, f"indices of type {idx.dtype.name.lower()}")
    return idx


def _coords(space: Placement) -> tuple[list[str], list[str]]:
    """Statements decomposing thread ``t`` over ``space`` in its memory order; the
    coordinate names by logical dimension."""
    order = space.physical_order()
    lines = decompose("t", [space.shape[d] for d in order], "p", "    ")
    lines += [f"    const i64 c{d} = p{i};" for i, d in enumerate(order)]
    return lines, [f"c{d}" for d in range(len(space.shape))]


def _launch(ctx: BindContext, layer: LayerInfo, x: Placement, idx: Placement, out: Placement,
            space: Placement, body: list[str], slots: list[int], update: str = "",
            extra: Sequence[Placement] = ()) -> Launch:
    params = [f"i64* bad{s}" for s in range(len(slots))]
    params += [f"const {storage_type(p.dtype, layer.name)}* u{k}" for k, p in enumerate(extra)]
    lines, _ = _coords(space)
    values = {"TX": storage_type(x.dtype, layer.name), "TY": storage_type(out.dtype, layer.name),
              "TI": _INDEX_TYPES[idx.dtype], "TOTAL": space.size}
    source = defines(values) + (
        _KERNEL.replace("UPDATE_FN", update).replace("SLOTS", ", ".join(params))
        .replace("COORDS", "\n".join(lines)).replace("BODY", "\n".join(body)))
    args: list[Any] = [np.uint64(x.ptr), np.uint64(idx.ptr), np.uint64(out.ptr)]
    args += [np.uint64(s) for s in slots] + [np.uint64(p.ptr) for p in extra]
    return ctx.kernel_launch(source, "index_op", space.size, args)


def _checked(ctx: BindContext, layer: LayerInfo, var: str, expr: str, dim: int, what: str,
             slots: list[int]) -> list[str]:
    slots.append(ctx.index_check(layer.name, layer.op, what, dim))
    return [f"    i64 {var} = (i64)({expr});", f"    CHECKED({var}, {dim}, bad{len(slots) - 1})"]


def _elements(ctx: BindContext, layer: LayerInfo, x: Placement, idx: Placement,
              target: Placement, axis: int, slots: list[int]) -> tuple[list[str], str]:
    """Body lines computing ``j`` and the offset into ``target`` of the element at the
    index tensor's coordinates with the axis replaced by ``j``."""
    c = [f"c{d}" for d in range(len(idx.shape))]
    body = _checked(ctx, layer, "j", f"idx[{offset(c, idx.strides)}]", x.shape[axis],
                    f"axis {axis}", slots)
    coords = c[:axis] + ["j"] + c[axis + 1:]
    return body, offset(coords, target.strides)


def _copy_data(ctx: BindContext, x: Placement, out: Placement, where: str) -> Launch:
    return elementwise_launch(ctx, out.shape, out.physical_order(),
                              [Operand(x.ptr, x.dtype, x.strides)],
                              Operand(out.ptr, out.dtype, out.strides), copy_program(out.dtype),
                              where)


def _nothing(stream: Any) -> None:
    return None


@kernel("GatherElements")
def bind_gather_elements(ctx: BindContext, layer: LayerInfo) -> list[Candidate]:
    x, out = ctx.place(layer.inputs[0]), ctx.place(layer.outputs[0])
    idx = _index_placement(ctx, layer, layer.inputs[1])
    axis = int(layer.attrs.get("axis", 0)) % len(x.shape)
    if out.size == 0:
        return [Candidate("nvrtc", _nothing)]
    slots: list[int] = []
    body, x_off = _elements(ctx, layer, x, idx, x, axis, slots)
    c = [f"c{d}" for d in range(len(out.shape))]
    body.append(f"    st(y + {offset(c, out.strides)}, ld(x + {x_off}));")
    return [Candidate("nvrtc", _launch(ctx, layer, x, idx, out, out, body, slots))]


def _nd_offset(ctx: BindContext, layer: LayerInfo, idx: Placement, rows: Sequence[str],
               dims: Sequence[int], strides: Sequence[int], slots: list[int]) -> list[str]:
    """Body lines adding to ``off`` the element offset of index row ``rows`` (the index
    tensor's coordinates but its last) into ``dims`` with ``strides``."""
    lines = []
    last = idx.strides[-1]
    row = offset(rows, idx.strides[:-1])
    for j, (dim, stride) in enumerate(zip(dims, strides)):
        lines += _checked(ctx, layer, f"k{j}", f"idx[{row} + {j * last}]", dim,
                          f"dimension {j}", slots)
        lines.append(f"    off += k{j} * {stride};")
    return lines


@kernel("GatherND")
def bind_gather_nd(ctx: BindContext, layer: LayerInfo) -> list[Candidate]:
    x, out = ctx.place(layer.inputs[0]), ctx.place(layer.outputs[0])
    idx = _index_placement(ctx, layer, layer.inputs[1])
    b = int(layer.attrs.get("batch_dims", 0))
    k = idx.shape[-1]
    if out.size == 0:
        return [Candidate("nvrtc", _nothing)]
    q = len(idx.shape)
    c = [f"c{d}" for d in range(len(out.shape))]
    slots: list[int] = []
    # output = batch dims, index rows, then the data's trailing dims
    body = [f"    i64 off = {offset(c[:b] + c[q - 1:], x.strides[:b] + x.strides[b + k:])};"]
    body += _nd_offset(ctx, layer, idx, c[:q - 1], x.shape[b:b + k], x.strides[b:b + k],
                       slots)
    body.append(f"    st(y + {offset(c, out.strides)}, ld(x + off));")
    return [Candidate("nvrtc", _launch(ctx, layer, x, idx, out, out, body, slots))]


@kernel("ScatterElements")
def bind_scatter_elements(ctx: BindContext, layer: LayerInfo) -> list[Candidate]:
    x, out = ctx.place(layer.inputs[0]), ctx.place(layer.outputs[0])
    idx = _index_placement(ctx, layer, layer.inputs[1])
    upd = ctx.place(layer.inputs[2])
    axis = int(layer.attrs.get("axis", 0)) % len(x.shape)
    update = _update_fn(str(layer.attrs.get("reduction", "none")), out.dtype, layer.name,
                        layer.op)
    copy = _copy_data(ctx, x, out, layer.name) if out.size else _nothing
    if upd.size == 0:
        return [Candidate("nvrtc", copy)]
    slots: list[int] = []
    body, y_off = _elements(ctx, layer, x, idx, out, axis, slots)
    c = [f"c{d}" for d in range(len(upd.shape))]
    body.append(f"    update(y + {y_off}, u0 + {offset(c, upd.strides)});")
    scatter = _launch(ctx, layer, x, idx, out, upd, body, slots, update, [upd])
    return [Candidate("nvrtc", chain(copy, scatter))]


@kernel("ScatterND")
def bind_scatter_nd(ctx: BindContext, layer: LayerInfo) -> list[Candidate]:
    x, out = ctx.place(layer.inputs[0]), ctx.place(layer.outputs[0])
    idx = _index_placement(ctx, layer, layer.inputs[1])
    upd = ctx.place(layer.inputs[2])
    k = idx.shape[-1]
    update = _update_fn(str(layer.attrs.get("reduction", "none")), out.dtype, layer.name,
                        layer.op)
    copy = _copy_data(ctx, x, out, layer.name) if out.size else _nothing
    if upd.size == 0:
        return [Candidate("nvrtc", copy)]
    q = len(idx.shape)
    c = [f"c{d}" for d in range(len(upd.shape))]
    slots: list[int] = []
    # updates = index rows, then the data's trailing dims
    body = [f"    i64 off = {offset(c[q - 1:], out.strides[k:])};"]
    body += _nd_offset(ctx, layer, idx, c[:q - 1], x.shape[:k], out.strides[:k], slots)
    body.append(f"    update(y + off, u0 + {offset(c, upd.strides)});")
    scatter = _launch(ctx, layer, x, idx, out, upd, body, slots, update, [upd])
    return [Candidate("nvrtc", chain(copy, scatter))]


@kernel("ReverseSequence")
def bind_reverse_sequence(ctx: BindContext, layer: LayerInfo) -> list[Candidate]:
    """Each batch entry's first ``sequence_lens[b]`` time steps reversed, the rest kept; a
    length outside [0, steps] is clamped and raised at sync, as the CPU raises it."""
    x, out = ctx.place(layer.inputs[0]), ctx.place(layer.outputs[0])
    lens = _index_placement(ctx, layer, layer.inputs[1])
    batch, time = int(layer.attrs["batch_axis"]), int(layer.attrs["time_axis"])
    steps = x.shape[time]
    if out.size == 0:
        return [Candidate("nvrtc", _nothing)]
    c = [f"c{d}" for d in range(len(out.shape))]
    slots = [ctx.index_check(layer.name, layer.op, "sequence_lens", steps, f"0..{steps}")]
    body = [f"    i64 n = (i64)idx[c{batch} * {lens.strides[0]}];",
            f"    if (n < 0 || n > {steps}) {{ bad0[0] = 1; bad0[1] = n; }}",
            f"    n = n < 0 ? 0 : (n > {steps} ? {steps} : n);",
            f"    const i64 src = c{time} < n ? n - 1 - c{time} : c{time};"]
    coords = [("src" if d == time else name) for d, name in enumerate(c)]
    body.append(f"    st(y + {offset(c, out.strides)}, ld(x + {offset(coords, x.strides)}));")
    return [Candidate("nvrtc", _launch(ctx, layer, x, lens, out, out, body, slots))]
