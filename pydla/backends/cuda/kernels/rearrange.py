"""Tile, DepthToSpace and SpaceToDepth as strided copies (any layout, any stored type).

Each is the CPU backend's numpy view: the output (and input) split into finer dimensions
in row-major order — (repeat, size) per axis for Tile, the block factors for the depth
ops — and the input's split dimensions permuted onto the output's. A split dimension's
stride is its tensor dimension's stride times the sizes split off after it, so the copy
reads channels-last and row-major tensors alike (``pointwise.elementwise_launch``).
"""

from __future__ import annotations

from collections.abc import Sequence

from pydla.backends.cuda.context import BindContext
from pydla.backends.cuda.kernels.pointwise import Operand, copy_program, elementwise_launch
from pydla.backends.cuda.layout import Placement
from pydla.backends.cuda.registry import Candidate, Launch, kernel
from pydla.errors import KernelError
from pydla.loadable.program import LayerInfo


def split_strides(p: Placement, factors: Sequence[Sequence[int]]) -> list[int]:
    """Strides of ``p``'s dimensions split row-major into ``factors`` (one list per
    dimension, multiplying to its size)."""
    strides: list[int] = []
    for d, parts in enumerate(factors):
        after = 1
        for f in parts:
            after *= f
        for f in parts:
            after //= f
            strides.append(p.strides[d] * after)
    return strides


def _copy(ctx: BindContext, x: Placement, x_strides: Sequence[int], out: Placement,
          out_factors: Sequence[Sequence[int]], where: str) -> Launch:
    shape = [f for parts in out_factors for f in parts]
    return elementwise_launch(ctx, shape, tuple(range(len(shape))),
                              [Operand(x.ptr, x.dtype, tuple(x_strides))],
                              Operand(out.ptr, out.dtype, tuple(split_strides(out, out_factors))),
                              copy_program(out.dtype), where)


@kernel("Tile")
def bind_tile(ctx: BindContext, layer: LayerInfo) -> list[Candidate]:
    x, out = ctx.place(layer.inputs[0]), ctx.place(layer.outputs[0])
    repeats = [int(r) for r in layer.attrs["repeats"]]
    if len(repeats) != len(x.shape):
        raise KernelError(layer.name, layer.op, f"repeats {repeats} for shape {x.shape}")
    if out.size == 0:
        return [Candidate("nvrtc", lambda stream: None)]
    # output axis d as (repeat, position): the input is read at the position only
    x_strides = [s for d in range(len(x.shape)) for s in (0, x.strides[d])]
    factors = [[r, n] for r, n in zip(repeats, x.shape)]
    return [Candidate("nvrtc", _copy(ctx, x, x_strides, out, factors, layer.name))]


@kernel("DepthToSpace", "SpaceToDepth")
def bind_depth_space(ctx: BindContext, layer: LayerInfo) -> list[Candidate]:
    x, out = ctx.place(layer.inputs[0]), ctx.place(layer.outputs[0])
    bs = int(layer.attrs["blocksize"])
    dcr = layer.attrs.get("mode", "DCR") == "DCR"
    if layer.op == "DepthToSpace":
        b, c, h, w = x.shape
        inner = c // (bs * bs)
        split = [[b], [bs, bs, inner] if dcr else [inner, bs, bs], [h], [w]]
        perm = (0, 3, 4, 1, 5, 2) if dcr else (0, 1, 4, 2, 5, 3)
        out_factors = [[b], [inner], [h, bs], [w, bs]]
    else:
        b, c, h, w = x.shape
        split = [[b], [c], [h // bs, bs], [w // bs, bs]]
        perm = (0, 3, 5, 1, 2, 4) if dcr else (0, 1, 3, 5, 2, 4)
        out_factors = [[b], [bs, bs, c] if dcr else [c, bs, bs], [h // bs], [w // bs]]
    if out.size == 0:
        return [Candidate("nvrtc", lambda stream: None)]
    strides = split_strides(x, split)
    x_strides = [strides[p] for p in perm]
    return [Candidate("nvrtc", _copy(ctx, x, x_strides, out, out_factors, layer.name))]
