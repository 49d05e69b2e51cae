"""Importers of shape and data-movement ops: Shape, Size, Reshape & co, Transpose, Concat,
Split, Slice, Expand, Tile, and the generators ConstantOfShape, Range, EyeLike.

Shapes are fixed at build time, so Shape and Size become constants here and every parameter
input (target shape, axes, starts/ends, split sizes, repeats) is resolved into absolute,
clamped attributes: kernels never re-derive ONNX's 0/-1/negative-axis rules.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from pydla.dtypes import DType, to_compute, to_storage
from pydla.frontend.onnx.importer import ImportContext, OnnxNode, tensor_to_array
from pydla.frontend.onnx.ops.common import int_list
from pydla.frontend.onnx.registry import onnx_op
from pydla.ir import Value


def data_input(ctx: ImportContext, node: OnnxNode, i: int = 0) -> Value:
    """A required data input."""
    v = node.input(i)
    if v is None:
        raise ctx.error(f"input {i} is required")
    return v


def norm_axis(ctx: ImportContext, axis: int, rank: int, what: str = "axis") -> int:
    """``axis`` in [0, rank), accepting ONNX's negative form."""
    if not -rank <= axis < rank:
        raise ctx.error(f"{what} {axis} is out of range for rank {rank}")
    return axis + rank if axis < 0 else axis


def norm_axes(ctx: ImportContext, axes: Sequence[int], rank: int, what: str = "axes") -> list[int]:
    out = [norm_axis(ctx, int(a), rank, what) for a in axes]
    if len(set(out)) != len(out):
        raise ctx.error(f"{what} {list(axes)} repeat an axis")
    return out


def emit_one(ctx: ImportContext, op: str, inputs: Sequence[Value | None],
             attrs: dict[str, Any], shape: Sequence[int], dtype: DType) -> list[Value]:
    """Emit a single-output canonical node whose output type the importer worked out."""
    return ctx.emit(op, inputs, attrs, out_types=[(tuple(int(d) for d in shape), dtype)])


def axes_param(ctx: ImportContext, node: OnnxNode, index: int, since: int) -> list[int] | None:
    """Axes given as an attribute before opset ``since`` and as input ``index`` from it on."""
    if node.opset < since:
        axes = node.attr("axes")
        return None if axes is None else [int(a) for a in axes]
    v = node.input(index)
    return None if v is None else int_list(ctx, v, "axes")


# -- shapes as constants -------------------------------------------------------------------

@onnx_op("Shape")
def import_shape(ctx: ImportContext, node: OnnxNode) -> list[Value]:
    x = data_input(ctx, node)
    # Python slicing clamps exactly as ONNX's start/end do (negative first, then to [0, r]).
    dims = x.shape[int(node.attr("start", 0)):node.attr("end")]
    return [ctx.const(np.array(dims, np.int64), DType.INT64)]


@onnx_op("Size")
def import_size(ctx: ImportContext, node: OnnxNode) -> list[Value]:
    return [ctx.const(np.array(data_input(ctx, node).size, np.int64), DType.INT64)]


# -- reshapes --------------------------------------------------------------------------------

def _reshape_target(ctx: ImportContext, dims: tuple[int, ...], target: list[int],
                    allowzero: bool) -> list[int]:
    out: list[int] = []
    infer = None
    for i, d in enumerate(target):
        if d == -1:
            if infer is not None:
                raise ctx.error(f"shape {target} has more than one -1")
            infer = i
            out.append(1)
        elif d == 0 and not allowzero:
            if i >= len(dims):
                raise ctx.error(f"shape {target} copies dim {i} (0) of a rank-{len(dims)} input")
            out.append(dims[i])
        elif d < 0:
            raise ctx.error(f"shape {target} has a negative dimension")
        else:
            out.append(d)
    total = math.prod(dims)
    if infer is not None:
        known = math.prod(out)
        if known == 0 or total % known:
            raise ctx.error(f"cannot infer the -1 of shape {target} for input shape {dims}")
        out[infer] = total // known
    if math.prod(out) != total:
        raise ctx.error(f"cannot reshape {dims} ({total} elements) into {out}")
    return out


@onnx_op("Reshape", since=5)
def import_reshape(ctx: ImportContext, node: OnnxNode) -> list[Value]:
    x = data_input(ctx, node)
    target = int_list(ctx, node.input(1), "Reshape shape")
    shape = _reshape_target(ctx, x.shape, target, bool(node.attr("allowzero", 0)))
    return emit_one(ctx, "Reshape", [x], {"shape": shape}, shape, x.dtype)


@onnx_op("Flatten")
def import_flatten(ctx: ImportContext, node: OnnxNode) -> list[Value]:
    x = data_input(ctx, node)
    rank = len(x.shape)
    axis = int(node.attr("axis", 1))
    if not -rank <= axis <= rank:
        raise ctx.error(f"axis {axis} is out of range for rank {rank}")
    axis = axis + rank if axis < 0 else axis
    shape = [math.prod(x.shape[:axis]), math.prod(x.shape[axis:])]
    return emit_one(ctx, "Flatten", [x], {"axis": axis}, shape, x.dtype)


@onnx_op("Squeeze")
def import_squeeze(ctx: ImportContext, node: OnnxNode) -> list[Value]:
    x = data_input(ctx, node)
    axes = axes_param(ctx, node, 1, since=13)
    if not axes:  # absent or empty (as onnxruntime reads it): every size-1 axis
        axes = [i for i, d in enumerate(x.shape) if d == 1]
    axes = sorted(norm_axes(ctx, axes, len(x.shape)))
    bad = [a for a in axes if x.shape[a] != 1]
    if bad:
        raise ctx.error(f"cannot squeeze axes {bad} of shape {x.shape} (size is not 1)")
    shape = [d for i, d in enumerate(x.shape) if i not in axes]
    return emit_one(ctx, "Squeeze", [x], {"axes": axes}, shape, x.dtype)


@onnx_op("Unsqueeze")
def import_unsqueeze(ctx: ImportContext, node: OnnxNode) -> list[Value]:
    x = data_input(ctx, node)
    axes = axes_param(ctx, node, 1, since=13)
    if axes is None:
        raise ctx.error("axes are required")
    axes = sorted(norm_axes(ctx, axes, len(x.shape) + len(axes)))
    shape = list(x.shape)
    for a in axes:
        shape.insert(a, 1)
    return emit_one(ctx, "Unsqueeze", [x], {"axes": axes}, shape, x.dtype)


# -- permutations and pieces -------------------------------------------------------------------

@onnx_op("Transpose")
def import_transpose(ctx: ImportContext, node: OnnxNode) -> list[Value]:
    x = data_input(ctx, node)
    rank = len(x.shape)
    perm = [int(p) for p in node.attr("perm", list(range(rank))[::-1])]
    if sorted(perm) != list(range(rank)):
        raise ctx.error(f"perm {perm} is not a permutation of {rank} axes")
    return emit_one(ctx, "Transpose", [x], {"perm": perm}, [x.shape[p] for p in perm], x.dtype)


@onnx_op("Concat")
def import_concat(ctx: ImportContext, node: OnnxNode) -> list[Value]:
    xs = [data_input(ctx, node, i) for i in range(len(node.inputs))]
    rank = len(xs[0].shape)
    if node.attr("axis") is None:
        raise ctx.error("axis is required")
    axis = norm_axis(ctx, int(node.attr("axis")), rank)
    shape = list(xs[0].shape)
    for x in xs[1:]:
        if len(x.shape) != rank or any(a != b for i, (a, b) in
                                       enumerate(zip(x.shape, shape)) if i != axis):
            raise ctx.error(f"cannot concatenate shapes {[v.shape for v in xs]} on axis {axis}")
        shape[axis] += x.shape[axis]
    return emit_one(ctx, "Concat", xs, {"axis": axis}, shape, xs[0].dtype)


@onnx_op("Split")
def import_split(ctx: ImportContext, node: OnnxNode) -> list[Value]:
    x = data_input(ctx, node)
    axis = norm_axis(ctx, int(node.attr("axis", 0)), len(x.shape))
    dim = x.shape[axis]
    n = len(node.output_names)
    if node.opset < 13:
        split = node.attr("split")
    else:
        split = None if node.input(1) is None else int_list(ctx, node.input(1), "split")
    if not split:
        if node.opset >= 18 and node.attr("num_outputs") is not None:
            n = int(node.attr("num_outputs"))
        # Opset 18: when the axis does not divide evenly, the last chunk is smaller.
        chunk = -(-dim // n)
        split = [chunk] * (n - 1) + [dim - chunk * (n - 1)]
    split = [int(s) for s in split]
    if len(split) != len(node.output_names) or sum(split) != dim or min(split) < 0:
        raise ctx.error(f"cannot split axis {axis} of size {dim} into {split} for "
                        f"{len(node.output_names)} outputs")
    types = []
    for s in split:
        shape = list(x.shape)
        shape[axis] = s
        types.append((tuple(shape), x.dtype))
    return ctx.emit("Split", [x], {"axis": axis, "split": split}, out_types=types)


@onnx_op("Slice")
def import_slice(ctx: ImportContext, node: OnnxNode) -> list[Value]:
    x = data_input(ctx, node)
    dims = x.shape
    steps: list[int] | None = None
    if node.opset < 10:
        starts, ends = list(node.attr("starts", [])), list(node.attr("ends", []))
        axes = node.attr("axes")
    else:
        starts = int_list(ctx, node.input(1), "Slice starts")
        ends = int_list(ctx, node.input(2), "Slice ends")
        axes = None if node.input(3) is None else int_list(ctx, node.input(3), "Slice axes")
        steps = None if node.input(4) is None else int_list(ctx, node.input(4), "Slice steps")
    axes = list(range(len(starts))) if axes is None else norm_axes(ctx, axes, len(dims))
    steps = [1] * len(starts) if steps is None else steps
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise ctx.error(f"starts {starts}, ends {ends}, axes {axes} and steps {steps} "
                        "differ in length")
    full_starts, full_ends, full_steps = [0] * len(dims), list(dims), [1] * len(dims)
    for a, s, e, st in zip(axes, starts, ends, steps):
        d = dims[a]
        if st == 0:
            raise ctx.error("Slice step cannot be 0")
        s, e = s + d if s < 0 else s, e + d if e < 0 else e
        if st > 0:
            s, e = min(max(s, 0), d), min(max(e, 0), d)
        else:
            s, e = min(max(s, 0), d - 1), min(max(e, -1), d - 1)
        full_starts[a], full_ends[a], full_steps[a] = s, e, st
    shape = [len(range(s, e, st)) for s, e, st in zip(full_starts, full_ends, full_steps)]
    attrs = {"starts": full_starts, "ends": full_ends, "steps": full_steps}
    return emit_one(ctx, "Slice", [x], attrs, shape, x.dtype)


# -- replication -----------------------------------------------------------------------------

@onnx_op("Expand", since=8)
def import_expand(ctx: ImportContext, node: OnnxNode) -> list[Value]:
    x = data_input(ctx, node)
    target = int_list(ctx, node.input(1), "Expand shape")
    try:
        shape = list(np.broadcast_shapes(x.shape, tuple(target)))
    except ValueError:
        raise ctx.error(f"cannot broadcast {x.shape} to {target}") from None
    return emit_one(ctx, "Expand", [x], {"shape": shape}, shape, x.dtype)


@onnx_op("Tile", since=6)
def import_tile(ctx: ImportContext, node: OnnxNode) -> list[Value]:
    x = data_input(ctx, node)
    repeats = int_list(ctx, node.input(1), "Tile repeats")
    if len(repeats) != len(x.shape) or min(repeats, default=0) < 0:
        raise ctx.error(f"repeats {repeats} do not fit input shape {x.shape}")
    shape = [d * r for d, r in zip(x.shape, repeats)]
    return emit_one(ctx, "Tile", [x], {"repeats": repeats}, shape, x.dtype)


# -- generators ------------------------------------------------------------------------------

def scalar_param(ctx: ImportContext, v: Value | None, what: str) -> int | float | bool:
    """A constant scalar parameter as a Python number (bfloat16 bits decoded)."""
    arr = ctx.const_value(v, what)
    assert v is not None
    if arr.size != 1:
        raise ctx.error(f"{what} must hold one value, it has shape {arr.shape}")
    return to_compute(arr, v.dtype).reshape(-1)[0].item()


@onnx_op("ConstantOfShape", since=9)
def import_constant_of_shape(ctx: ImportContext, node: OnnxNode) -> list[Value]:
    shape = int_list(ctx, node.input(0), "ConstantOfShape shape")
    if min(shape, default=0) < 0:
        raise ctx.error(f"shape {shape} has a negative dimension")
    value: int | float | bool = 0.0
    dtype = DType.FLOAT32
    for a in node.proto.attribute:
        if a.name == "value":
            arr, dtype = tensor_to_array(a.t)
            value = to_compute(arr, dtype).reshape(-1)[0].item()
    # No data input: emit folds it, unless it is too large to store as a weight.
    return emit_one(ctx, "ConstantOfShape", [], {"value": value}, shape, dtype)


@onnx_op("Range", since=11)
def import_range(ctx: ImportContext, node: OnnxNode) -> list[Value]:
    start_v = data_input(ctx, node, 0)
    start = scalar_param(ctx, start_v, "Range start")
    limit = scalar_param(ctx, node.input(1), "Range limit")
    delta = scalar_param(ctx, node.input(2), "Range delta")
    if delta == 0:
        raise ctx.error("Range delta cannot be 0")
    dtype = start_v.dtype
    if dtype.is_float:
        if not all(map(math.isfinite, (start, limit, delta))):
            raise ctx.error(f"Range start {start}, limit {limit}, delta {delta} must be finite")
        n = max(math.ceil((limit - start) / delta), 0)
        ctx.check_constant_size((n,), dtype, "Range")
        values = start + np.arange(n, dtype=np.float64) * delta
    else:
        n = max(-((start - limit) // delta), 0)  # exact integer ceil division
        ctx.check_constant_size((n,), dtype, "Range")
        values = start + np.arange(n, dtype=np.int64) * delta
    return [ctx.const(to_storage(values, dtype), dtype)]


@onnx_op("EyeLike", since=9)
def import_eye_like(ctx: ImportContext, node: OnnxNode) -> list[Value]:
    x = data_input(ctx, node)
    if len(x.shape) != 2:
        raise ctx.error(f"EyeLike needs a 2-D input, got shape {x.shape}")
    dtype = x.dtype
    if node.attr("dtype") is not None:
        try:
            dtype = DType(int(node.attr("dtype")))
        except ValueError:
            raise ctx.error(f"dtype {node.attr('dtype')} is not supported") from None
    ctx.check_constant_size(x.shape, DType.FLOAT64, "EyeLike")
    eye = np.eye(x.shape[0], x.shape[1], int(node.attr("k", 0)))
    return [ctx.const(to_storage(eye, dtype), dtype)]
