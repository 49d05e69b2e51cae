"""Tile, DepthToSpace and SpaceToDepth as strided views (pure functions, no CUDA).

Each is the CPU backend's numpy view: the output (and the input) split into finer
dimensions in row-major order — (repeat, size) per axis for Tile, the block factors for the
depth ops — and the input's split dimensions permuted onto the output's. A split
dimension's stride is its tensor dimension's stride times the sizes split off after it, so
one strided copy (``kernels/rearrange.py``) reads channels-last and row-major tensors alike.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydla.backends.cuda.layout import Placement

# (iteration shape, input strides, output strides), by dimension of the iteration space
CopyView = tuple[list[int], list[int], list[int]]


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


def _view(x_strides: list[int], out: Placement, out_factors: list[list[int]]) -> CopyView:
    shape = [f for parts in out_factors for f in parts]
    return shape, x_strides, split_strides(out, out_factors)


def tile_view(x: Placement, out: Placement, repeats: Sequence[int]) -> CopyView:
    """Output axis d as (repeat, position): the input is read at the position only."""
    x_strides = [s for d in range(len(x.shape)) for s in (0, x.strides[d])]
    return _view(x_strides, out, [[int(r), n] for r, n in zip(repeats, x.shape)])


def depth_space_view(op: str, x: Placement, out: Placement, bs: int, dcr: bool) -> CopyView:
    """DepthToSpace (DCR or CRD) or SpaceToDepth (DCR or CRD order of the channels)."""
    b, c, h, w = x.shape
    if op == "DepthToSpace":
        inner = c // (bs * bs)
        split = [[b], [bs, bs, inner] if dcr else [inner, bs, bs], [h], [w]]
        perm = (0, 3, 4, 1, 5, 2) if dcr else (0, 1, 4, 2, 5, 3)
        out_factors = [[b], [inner], [h, bs], [w, bs]]
    else:
        split = [[b], [c], [h // bs, bs], [w // bs, bs]]
        perm = (0, 3, 5, 1, 2, 4) if dcr else (0, 1, 3, 5, 2, 4)
        out_factors = [[b], [bs, bs, c] if dcr else [c, bs, bs], [h // bs], [w // bs]]
    strides = split_strides(x, split)
    return _view([strides[p] for p in perm], out, out_factors)
