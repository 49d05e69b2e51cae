"""Elementwise kernels generated per layer (NVRTC): pointwise programs, casts, layout
changes, transposes, concatenation and Expand, over any mix of NHWC and row-major tensors
and every type the backend stores (float, integer, bool: ``codegen.storage_type``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from pydla.backends.cuda.codegen import compute_type, emit_program, storage_type
from pydla.backends.cuda.context import BindContext
from pydla.backends.cuda.layout import Placement, broadcast_strides, layout_strides
from pydla.backends.cuda.registry import Candidate, Launch, kernel
from pydla.dtypes import DType
from pydla.errors import KernelError
from pydla.loadable.program import LayerInfo
from pydla.ops import POINTWISE


@dataclass(frozen=True)
class Operand:
    """A tensor read or written at each point of an iteration space."""

    ptr: int
    dtype: DType
    strides: tuple[int, ...]  # elements per step of each space dimension (0: broadcast)
    offset: int = 0  # elements


def _dense(shape: Sequence[int], order: Sequence[int]) -> tuple[int, ...]:
    strides = [0] * len(shape)
    acc = 1
    for d in reversed(order):
        strides[d] = acc
        acc *= shape[d]
    return tuple(strides)


def _walk(shape: Sequence[int], strides: Sequence[int]) -> tuple[int, ...]:
    """Strides as a walk sees them: a dimension of size 1 is never stepped over."""
    return tuple(0 if d == 1 else s for d, s in zip(shape, strides))


def elementwise_source(name: str, shape: Sequence[int], order: Sequence[int],
                       operands: Sequence[Operand], out: Operand,
                       program: Sequence[Mapping[str, Any]], where: str) -> tuple[str, int, int]:
    """CUDA source of ``out[x] = program(operands[x])`` for every index x of ``shape``,
    visited in ``order`` (slowest dimension first). Returns (source, threads, vector)."""
    size = int(np.prod(shape, dtype=np.int64))
    dense = _walk(shape, _dense(shape, order))
    scalar = [all(s == 0 for s in _walk(shape, op.strides)) for op in operands]
    flat = _walk(shape, out.strides) == dense and all(
        sc or _walk(shape, op.strides) == dense for sc, op in zip(scalar, operands))
    vec = 1
    if flat:
        aligned = all(op.offset % 8 == 0 for op in (*operands, out))
        # one load or store moves at most 16 bytes (codegen's Pack)
        width = 4 if max(op.dtype.itemsize for op in (*operands, out)) <= 4 else 2
        vec = width if size % width == 0 and aligned else 1
    params = [f"const {storage_type(op.dtype, where)}* a{k}" for k, op in enumerate(operands)]
    params.append(f"{storage_type(out.dtype, where)}* y")
    dtypes = [op.dtype for op in operands]
    body: list[str] = []
    if flat:
        for k, (op, sc) in enumerate(zip(operands, scalar)):
            if sc:
                body.append(f"const {compute_type(op.dtype)} s{k} = ld(a{k} + {op.offset});")
        body.append(f"for (i64 i = blockIdx.x * (i64)blockDim.x + threadIdx.x; i < {size // vec}"
                    "; i += (i64)gridDim.x * blockDim.x) {")
        for k, (op, sc) in enumerate(zip(operands, scalar)):
            if not sc:
                t = storage_type(op.dtype, where)
                body.append(f"  {compute_type(op.dtype)} v{k}[{vec}]; ldv<{t}, {vec}>(a{k} + "
                            f"{op.offset} + i * {vec}, v{k});")
        body.append(f"  {compute_type(out.dtype)} res[{vec}];")
        body.append(f"  for (int j = 0; j < {vec}; ++j) {{")
        exprs = [f"s{k}" if sc else f"v{k}[j]" for k, sc in enumerate(scalar)]
        lines, result = emit_program(program, exprs, where, dtypes=dtypes)
        body += ["    " + line for line in lines]
        body.append(f"    res[j] = {result};")
        body.append("  }")
        body.append(f"  stv<{storage_type(out.dtype, where)}, {vec}>(y + {out.offset} + i * "
                    f"{vec}, res);")
        body.append("}")
        threads = size // vec
    else:
        body.append(f"for (i64 i = blockIdx.x * (i64)blockDim.x + threadIdx.x; i < {size}; "
                    "i += (i64)gridDim.x * blockDim.x) {")
        body.append("  i64 rem = i;")
        for d in reversed(order[1:]):
            body.append(f"  const i64 c{d} = rem % {shape[d]}; rem /= {shape[d]};")
        body.append(f"  const i64 c{order[0]} = rem;")

        def offset(op: Operand) -> str:
            terms = [f"c{d} * {s}" for d, s in enumerate(op.strides) if s]
            return " + ".join([str(op.offset), *terms])

        exprs = []
        for k, op in enumerate(operands):
            body.append(f"  const {compute_type(op.dtype)} v{k} = ld(a{k} + {offset(op)});")
            exprs.append(f"v{k}")
        lines, result = emit_program(program, exprs, where, dtypes=dtypes)
        body += ["  " + line for line in lines]
        body.append(f"  st(y + {offset(out)}, {result});")
        body.append("}")
        threads = size
    source = (f'extern "C" __global__ void {name}({", ".join(params)}) {{\n  '
              + "\n  ".join(body) + "\n}\n")
    return source, threads, vec


def elementwise_launch(ctx: BindContext, shape: Sequence[int], order: Sequence[int],
                       operands: Sequence[Operand], out: Operand,
                       program: Sequence[Mapping[str, Any]], where: str) -> Launch:
    if int(np.prod(shape, dtype=np.int64)) == 0:
        return lambda stream: None
    source, threads, _ = elementwise_source("pointwise", shape, order, operands, out, program,
                                            where)
    args = [np.uint64(op.ptr) for op in operands] + [np.uint64(out.ptr)]
    return ctx.kernel_launch(source, "pointwise", threads, args)


def over_output(out: Placement) -> tuple[tuple[int, ...], tuple[int, ...], Operand]:
    """Iterate over ``out`` in its memory order."""
    return out.shape, out.physical_order(), Operand(out.ptr, out.dtype, out.strides)


def program_launch(ctx: BindContext, program: Sequence[Mapping[str, Any]],
                   inputs: Sequence[Placement], out: Placement, where: str) -> Launch:
    """``out = program(inputs…)`` with numpy broadcasting."""
    shape, order, target = over_output(out)
    try:
        operands = [Operand(p.ptr, p.dtype, broadcast_strides(p, shape)) for p in inputs]
    except ValueError as e:
        raise KernelError(where, "Pointwise", str(e)) from None
    return elementwise_launch(ctx, shape, order, operands, target, program, where)


def copy_program(dtype: DType) -> list[dict[str, Any]]:
    return [{"op": "Identity", "in": [0], "attrs": {}, "shape": [], "dtype": dtype.name.lower()}]


# -- layers -------------------------------------------------------------------------------
def _inputs(ctx: BindContext, layer: LayerInfo) -> list[Placement]:
    if any(i < 0 for i in layer.inputs):
        raise KernelError(layer.name, layer.op, "a pointwise layer has no optional inputs")
    return [ctx.place(i) for i in layer.inputs]


@kernel("Pointwise")
def bind_pointwise(ctx: BindContext, layer: LayerInfo) -> list[Candidate]:
    out = ctx.place(layer.outputs[0])
    launch = program_launch(ctx, layer.attrs["program"], _inputs(ctx, layer), out, layer.name)
    return [Candidate("nvrtc", launch)]


def _single_step(ctx: BindContext, layer: LayerInfo) -> list[Candidate]:
    inputs = _inputs(ctx, layer)
    out = ctx.place(layer.outputs[0])
    step = {"op": layer.op, "in": list(range(len(inputs))), "attrs": dict(layer.attrs),
            "shape": list(out.shape), "dtype": out.dtype.name.lower()}
    return [Candidate("nvrtc", program_launch(ctx, [step], inputs, out, layer.name))]


kernel(*sorted(POINTWISE), "Identity")(_single_step)


def _copy(ctx: BindContext, src: Placement, dst: Placement, where: str) -> Launch:
    """Same logical shape, any layouts and types."""
    shape, order, target = over_output(dst)
    operand = Operand(src.ptr, src.dtype, src.strides)
    return elementwise_launch(ctx, shape, order, [operand], target, copy_program(dst.dtype),
                              where)


@kernel("Flatten", "Reshape", "Squeeze", "Unsqueeze")
def bind_reshape(ctx: BindContext, layer: LayerInfo) -> list[Candidate]:
    """Row-major order is what a reshape keeps: an NHWC input is first read in NCHW order."""
    src, dst = ctx.place(layer.inputs[0]), ctx.place(layer.outputs[0])
    if src.dtype is not dst.dtype or src.size != dst.size:
        raise KernelError(layer.name, layer.op, "reshape changes the element count or type")
    if src.strides == layout_strides(src.shape, "linear") and dst.strides == layout_strides(
            dst.shape, "linear"):
        nbytes = src.nbytes

        def memcpy(stream: Any) -> None:
            from pydla.backends.cuda.driver import memcpy_async

            memcpy_async(dst.ptr, src.ptr, nbytes, int(stream.ptr))

        return [Candidate("memcpy", memcpy)]
    if dst.strides != layout_strides(dst.shape, "linear"):
        # Into a channels-last tensor: row-major order carried through both shapes.
        from pydla.backends.cuda.kernels.shape import reshape_launch

        return [Candidate("nvrtc", reshape_launch(ctx, src, dst, layer.name))]
    # Both sides seen as row-major vectors over the source's logical shape.
    row_major = Placement(dst.ptr, src.shape, dst.dtype, "linear")
    return [Candidate("nvrtc", _copy(ctx, src, row_major, layer.name))]


@kernel("Expand")
def bind_expand(ctx: BindContext, layer: LayerInfo) -> list[Candidate]:
    """numpy broadcasting of the input to the output's shape (a copy program)."""
    src, dst = ctx.place(layer.inputs[0]), ctx.place(layer.outputs[0])
    return [Candidate("nvrtc", program_launch(ctx, copy_program(dst.dtype), [src], dst,
                                              layer.name))]


@kernel("Transpose")
def bind_transpose(ctx: BindContext, layer: LayerInfo) -> list[Candidate]:
    src, dst = ctx.place(layer.inputs[0]), ctx.place(layer.outputs[0])
    perm = layer.attrs.get("perm") or list(reversed(range(len(src.shape))))
    operand = Operand(src.ptr, src.dtype, tuple(src.strides[p] for p in perm))
    shape, order, target = over_output(dst)
    return [Candidate("nvrtc", elementwise_launch(ctx, shape, order, [operand], target,
                                                  copy_program(dst.dtype), layer.name))]


@kernel("Concat")
def bind_concat(ctx: BindContext, layer: LayerInfo) -> list[Candidate]:
    dst = ctx.place(layer.outputs[0])
    axis = int(layer.attrs["axis"]) % len(dst.shape)
    launches = []
    start = 0
    for i in layer.inputs:
        src = ctx.place(i)
        operand = Operand(src.ptr, src.dtype, src.strides)
        target = Operand(dst.ptr, dst.dtype, dst.strides, start * dst.strides[axis])
        launches.append(elementwise_launch(ctx, src.shape, src.physical_order(), [operand],
                                           target, copy_program(dst.dtype), layer.name))
        start += src.shape[axis]

    def run(stream: Any) -> None:
        for launch in launches:
            launch(stream)

    return [Candidate("nvrtc", run)]
