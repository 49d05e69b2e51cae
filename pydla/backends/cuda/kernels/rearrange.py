"""Tile, DepthToSpace and SpaceToDepth as strided copies of any layout and stored type, over
the views of ``pydla.backends.cuda.views`` (the CPU backend's numpy views)."""

from __future__ import annotations

from pydla.backends.cuda.context import BindContext
from pydla.backends.cuda.kernels.pointwise import Operand, copy_program, elementwise_launch
from pydla.backends.cuda.layout import Placement
from pydla.backends.cuda.registry import Candidate, Launch, kernel
from pydla.backends.cuda.views import CopyView, depth_space_view, tile_view
from pydla.errors import KernelError
from pydla.loadable.program import LayerInfo


def _copy(ctx: BindContext, x: Placement, out: Placement, view: CopyView,
          where: str) -> Launch:
    if out.size == 0:
        return lambda stream: None
    shape, x_strides, out_strides = view
    return elementwise_launch(ctx, shape, tuple(range(len(shape))),
                              [Operand(x.ptr, x.dtype, tuple(x_strides))],
                              Operand(out.ptr, out.dtype, tuple(out_strides)),
                              copy_program(out.dtype), where)


@kernel("Tile")
def bind_tile(ctx: BindContext, layer: LayerInfo) -> list[Candidate]:
    x, out = ctx.place(layer.inputs[0]), ctx.place(layer.outputs[0])
    repeats = [int(r) for r in layer.attrs["repeats"]]
    if len(repeats) != len(x.shape):
        raise KernelError(layer.name, layer.op, f"repeats {repeats} for shape {x.shape}")
    return [Candidate("nvrtc", _copy(ctx, x, out, tile_view(x, out, repeats), layer.name))]


@kernel("DepthToSpace", "SpaceToDepth")
def bind_depth_space(ctx: BindContext, layer: LayerInfo) -> list[Candidate]:
    x, out = ctx.place(layer.inputs[0]), ctx.place(layer.outputs[0])
    if len(x.shape) != 4:
        raise KernelError(layer.name, layer.op, f"needs a rank-4 input, not {x.shape}")
    view = depth_space_view(layer.op, x, out, int(layer.attrs["blocksize"]),
                            layer.attrs.get("mode", "DCR") == "DCR")
    return [Candidate("nvrtc", _copy(ctx, x, out, view, layer.name))]
