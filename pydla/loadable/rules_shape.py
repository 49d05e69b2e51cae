"""Shape rules of the data-movement layers: reshapes, transposes, concatenation and split,
gathers, slices, pads, expands and tiles. The importer resolves every shape-like input into
absolute attributes (pydla.frontend.onnx.ops.shape), which these rules re-apply."""

from __future__ import annotations

import math

from pydla.dtypes import DType
from pydla.loadable.validate import Expected, LayerCheck, rule

_DIM = 1 << 40


def _count(shape: tuple[int, ...]) -> int:
    return math.prod(shape)


@rule("Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity")
def _reshape(check: LayerCheck) -> Expected:
    check.arity(1, 1)
    x = check.x(0)
    y = check.outs[0].shape
    op = check.layer.op
    if op == "Reshape":
        target = tuple(check.ints("shape", None, None, 0, _DIM))
        if target != y:
            raise check.fail(".attrs.shape", f"{list(target)} is not the output's {y}")
    elif op == "Flatten":
        axis = check.axis("axis", len(x.shape) + 1, 1)
        y = (_count(x.shape[:axis]), _count(x.shape[axis:]))
    elif op == "Squeeze":
        axes = check.axes("axes", len(x.shape))
        if any(x.shape[a] != 1 for a in axes):
            raise check.fail(".attrs.axes", f"{axes} are not all 1 in {x.shape}")
        y = tuple(d for i, d in enumerate(x.shape) if i not in axes)
    elif op == "Unsqueeze":
        rank = len(x.shape) + len(check.ints("axes", None, None))
        axes = check.axes("axes", rank)
        it = iter(x.shape)
        y = tuple(1 if i in axes else next(it) for i in range(rank))
    else:
        y = x.shape
    if _count(y) != _count(x.shape):
        raise check.fail(".outputs[0]", f"{y} does not hold the {_count(x.shape)} elements "
                         f"of {x.shape}")
    return [(y, x.dtype)]


@rule("Transpose")
def _transpose(check: LayerCheck) -> Expected:
    check.arity(1, 1)
    x = check.x(0)
    perm = check.ints("perm", len(x.shape), None, 0, max(len(x.shape) - 1, 0))
    if sorted(perm) != list(range(len(x.shape))):
        raise check.fail(".attrs.perm", f"{perm} is not a permutation of {len(x.shape)} axes")
    return [(tuple(x.shape[p] for p in perm), x.dtype)]


@rule("Concat")
def _concat(check: LayerCheck) -> Expected:
    check.arity(1, 4096)
    xs = [check.x(k) for k in range(len(check.ins))]
    rank = len(xs[0].shape)
    axis = check.axis("axis", rank)
    total = 0
    for k, t in enumerate(xs):
        if len(t.shape) != rank or any(d != e for i, (d, e) in
                                       enumerate(zip(t.shape, xs[0].shape)) if i != axis):
            raise check.fail(f".inputs[{k}]", f"{t.shape} does not concatenate with "
                             f"{xs[0].shape} on axis {axis}")
        check.need(t.dtype is xs[0].dtype, k, "inputs of different dtypes")
        total += t.shape[axis]
    shape = list(xs[0].shape)
    shape[axis] = total
    return [(tuple(shape), xs[0].dtype)]


@rule("Split")
def _split(check: LayerCheck) -> Expected:
    check.arity(1, 1, (1, 4096))
    x = check.x(0)
    axis = check.axis("axis", len(x.shape))
    sizes = check.ints("split", len(check.outs), None, 0, _DIM)
    if sum(sizes) != x.shape[axis]:
        raise check.fail(".attrs.split", f"{sizes} do not add up to {x.shape[axis]}")
    return [(x.shape[:axis] + (s,) + x.shape[axis + 1:], x.dtype) for s in sizes]


@rule("Gather")
def _gather(check: LayerCheck) -> Expected:
    check.arity(2, 2)
    data, idx = check.x(0, (1, 16)), check.x(1)
    check.need(idx.dtype in (DType.INT32, DType.INT64), 1, f"indices are "
               f"{idx.dtype.name.lower()}, not int32 or int64")
    axis = check.axis("axis", len(data.shape), 0)
    return [(data.shape[:axis] + idx.shape + data.shape[axis + 1:], data.dtype)]


@rule("Slice")
def _slice(check: LayerCheck) -> Expected:
    check.arity(1, 1)
    x = check.x(0).shape
    n = len(x)
    starts = check.ints("starts", n, None)
    ends = check.ints("ends", n, None)
    steps = check.ints("steps", n, [1] * n)
    if 0 in steps:
        raise check.fail(".attrs.steps", "a step of 0")
    # Ends are clamped by the importer; with a negative step, -1 means "past index 0"
    # (as the kernel reads it), which a Python slice can only say with None.
    shape = tuple(len(range(*slice(s, e if e >= 0 else None, st).indices(d)))
                  for d, s, e, st in zip(x, starts, ends, steps))
    return [(shape, check.x(0).dtype)]


@rule("Pad")
def _pad(check: LayerCheck) -> Expected:
    check.arity(1, 2)  # the constant may be a runtime input
    x = check.x(0).shape
    n = len(x)
    pads = check.ints("pads", 2 * n, None)
    check.choice("mode", ("constant", "reflect", "edge", "wrap"), "constant")
    shape = tuple(d + a + b for d, a, b in zip(x, pads[:n], pads[n:]))
    if min(shape, default=0) < 0:
        raise check.fail(".attrs.pads", f"{pads} cut more than {x} holds")
    return [(shape, check.x(0).dtype)]


@rule("Expand")
def _expand(check: LayerCheck) -> Expected:
    check.arity(1, 1)
    x = check.x(0)
    target = tuple(check.ints("shape", None, None, 0, _DIM))
    rank = max(len(target), len(x.shape))
    a = (1,) * (rank - len(x.shape)) + x.shape
    b = (1,) * (rank - len(target)) + target
    out = []
    for d, e in zip(a, b):
        if d != e and 1 not in (d, e):
            raise check.fail(".attrs.shape", f"{list(target)} does not broadcast {x.shape}")
        out.append(e if d == 1 else d)
    return [(tuple(out), x.dtype)]


@rule("Tile")
def _tile(check: LayerCheck) -> Expected:
    check.arity(1, 1)
    x = check.x(0)
    reps = check.ints("repeats", len(x.shape), None, 0, _DIM)
    return [(tuple(d * r for d, r in zip(x.shape, reps)), x.dtype)]


@rule("DepthToSpace", "SpaceToDepth")
def _depth_space(check: LayerCheck) -> Expected:
    check.arity(1, 1)
    n, c, h, w = check.x(0, 4).shape
    bs = check.int_("blocksize", None, 1, 1 << 16)
    if check.layer.op == "DepthToSpace":
        if c % (bs * bs):
            raise check.fail(".attrs.blocksize", f"{bs}² does not divide {c} channels")
        return [((n, c // (bs * bs), h * bs, w * bs), check.x(0).dtype)]
    if h % bs or w % bs:
        raise check.fail(".attrs.blocksize", f"{bs} does not divide {h}×{w}")
    return [((n, c * bs * bs, h // bs, w // bs), check.x(0).dtype)]


@rule("Trilu", "CumSum", "CumProd")
def _same_shape(check: LayerCheck) -> Expected:
    check.arity(1, 2)
    x = check.x(0)
    if check.layer.op == "Trilu":
        check.x(0, (2, 16))
    return [(x.shape, x.dtype)]
