"""Slice, Split and Gather over tensors in any layout and of any stored type: strided
copies (NVRTC); and the general reshape into a channels-last tensor (row-major order carried
through both sides).
"""

from __future__ import annotations

import numpy as np

from pydla.backends.cuda.codegen import decompose, defines, offset, storage_type
from pydla.backends.cuda.context import BindContext
from pydla.backends.cuda.kernels.pointwise import Operand, copy_program, elementwise_launch
from pydla.backends.cuda.layout import Placement, layout_strides
from pydla.backends.cuda.registry import Candidate, Launch, chain, kernel
from pydla.dtypes import DType
from pydla.errors import KernelError
from pydla.loadable.program import LayerInfo


def strided_copy(ctx: BindContext, src: Placement, strides: tuple[int, ...], start: int,
                 dst: Placement, where: str) -> Launch:
    """dst[i] = src[start + Σ i_d·strides_d] over dst's logical shape, in dst's memory order."""
    operand = Operand(src.ptr, src.dtype, strides, start)
    target = Operand(dst.ptr, dst.dtype, dst.strides)
    return elementwise_launch(ctx, dst.shape, dst.physical_order(), [operand], target,
                              copy_program(dst.dtype), where)


@kernel("Slice")
def bind_slice(ctx: BindContext, layer: LayerInfo) -> list[Candidate]:
    src, dst = ctx.place(layer.inputs[0]), ctx.place(layer.outputs[0])
    rank = len(src.shape)
    a = layer.attrs
    starts, steps = list(a["starts"]), list(a.get("steps") or [1] * rank)
    axes = a.get("axes")
    if axes is not None:  # per-axis lists: spread over every dimension
        full_starts, full_steps = [0] * rank, [1] * rank
        for ax, st, sp in zip(axes, starts, steps):
            full_starts[int(ax) % rank], full_steps[int(ax) % rank] = int(st), int(sp)
        starts, steps = full_starts, full_steps
    if len(starts) != rank or len(steps) != rank:
        raise KernelError(layer.name, layer.op, "Slice needs starts and steps for every axis")
    begin = 0
    strides = []
    for d in range(rank):
        size = src.shape[d]
        first = int(starts[d])
        if first < 0:
            first += size
        first = min(max(first, 0), max(size - 1, 0))
        begin += first * src.strides[d]
        strides.append(src.strides[d] * int(steps[d]))
    return [Candidate("nvrtc", strided_copy(ctx, src, tuple(strides), begin, dst, layer.name))]


@kernel("Split")
def bind_split(ctx: BindContext, layer: LayerInfo) -> list[Candidate]:
    src = ctx.place(layer.inputs[0])
    axis = int(layer.attrs.get("axis", 0)) % len(src.shape)
    launches = []
    start = 0
    for o in layer.outputs:
        if o < 0:
            continue
        dst = ctx.place(o)
        launches.append(strided_copy(ctx, src, src.strides, start * src.strides[axis], dst,
                                     layer.name))
        start += dst.shape[axis]
    return [Candidate("nvrtc", chain(*launches))]


_GATHER = r"""
extern "C" __global__ void gather(const TX* __restrict__ x, const TI* __restrict__ idx,
    TY* __restrict__ y, i64* __restrict__ bad) {
  for (i64 t = blockIdx.x * (i64)blockDim.x + threadIdx.x; t < TOTAL;
       t += (i64)gridDim.x * blockDim.x) {
COORDS
    i64 j = (i64)idx[IDX_OFF];
    if (j < -DIM || j >= DIM) { bad[0] = 1; bad[1] = j; }  /* raised at sync */
    if (j < 0) j += DIM;
    j = j < 0 ? 0 : (j >= DIM ? DIM - 1 : j);
    st(y + Y_OFF, ld(x + X_OFF + j * XSA));
  }
}
"""

_INDEX_TYPES = {DType.INT64: "long long", DType.INT32: "int"}


@kernel("Gather")
def bind_gather(ctx: BindContext, layer: LayerInfo) -> list[Candidate]:
    x, out = ctx.place(layer.inputs[0]), ctx.place(layer.outputs[0])
    rank = len(x.shape)
    axis = int(layer.attrs.get("axis", 0)) % rank
    idx_i = layer.inputs[1]
    if ctx.is_weight(idx_i):
        host = ctx.host(idx_i).astype(np.int64)
        idx = Placement(ctx.upload(host), host.shape, DType.INT64, "linear")
    else:
        idx = ctx.place(idx_i)
    if idx.dtype not in _INDEX_TYPES:
        raise KernelError(layer.name, layer.op, f"indices of type {idx.dtype.name.lower()}")
    q = len(idx.shape)
    order = out.physical_order()
    lines = decompose("t", [out.shape[d] for d in order], "p", "    ")
    lines += [f"    const i64 c{d} = p{i};" for i, d in enumerate(order)]
    c = [f"c{d}" for d in range(len(out.shape))]
    x_coords = c[:axis] + c[axis + q:]
    x_strides = list(x.strides[:axis]) + list(x.strides[axis + 1:])
    idx_strides = layout_strides(idx.shape, "linear")
    values = {"TX": storage_type(x.dtype, layer.name),
              "TY": storage_type(out.dtype, layer.name), "TI": _INDEX_TYPES[idx.dtype],
              "TOTAL": out.size, "DIM": x.shape[axis], "XSA": x.strides[axis]}
    source = defines(values) + (
        _GATHER.replace("COORDS", "\n".join(lines))
        .replace("IDX_OFF", offset(c[axis:axis + q], idx_strides))
        .replace("Y_OFF", offset(c, out.strides)).replace("X_OFF", offset(x_coords, x_strides)))
    if out.size == 0:
        return [Candidate("nvrtc", lambda stream: None)]
    bad = ctx.index_check(layer.name, layer.op, f"axis {axis}", x.shape[axis])
    args = [np.uint64(x.ptr), np.uint64(idx.ptr), np.uint64(out.ptr), np.uint64(bad)]
    return [Candidate("nvrtc", ctx.kernel_launch(source, "gather", out.size, args))]


_RESHAPE = r"""
extern "C" __global__ void reshape(const TX* __restrict__ x, TY* __restrict__ y) {
  for (i64 t = blockIdx.x * (i64)blockDim.x + threadIdx.x; t < TOTAL;
       t += (i64)gridDim.x * blockDim.x) {
DST_COORDS
    const i64 flat = FLAT;
SRC_COORDS
    st(y + Y_OFF, ld(x + X_OFF));
  }
}
"""


def reshape_launch(ctx: BindContext, src: Placement, dst: Placement, where: str) -> Launch:
    """Copy src into dst element by element in row-major order of both logical shapes."""
    if src.size == 0:
        return lambda stream: None
    order = dst.physical_order()
    lines = decompose("t", [dst.shape[d] for d in order], "p", "    ")
    lines += [f"    const i64 c{d} = p{i};" for i, d in enumerate(order)]
    c = [f"c{d}" for d in range(len(dst.shape))]
    s = [f"s{d}" for d in range(len(src.shape))]
    values = {"TX": storage_type(src.dtype, where), "TY": storage_type(dst.dtype, where),
              "TOTAL": dst.size}
    source = defines(values) + (
        _RESHAPE.replace("DST_COORDS", "\n".join(lines))
        .replace("FLAT", offset(c, layout_strides(dst.shape, "linear")))
        .replace("SRC_COORDS", "\n".join(decompose("flat", list(src.shape), "s", "    ")))
        .replace("Y_OFF", offset(c, dst.strides)).replace("X_OFF", offset(s, src.strides)))
    return ctx.kernel_launch(source, "reshape", dst.size,
                             [np.uint64(src.ptr), np.uint64(dst.ptr)])
