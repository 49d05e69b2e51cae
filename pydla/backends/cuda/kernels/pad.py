"""Pad in its four modes (constant, reflect, edge, wrap), any rank and stored type (NVRTC).

One thread per output element maps each coordinate back to the input, as the CPU backend
(numpy's ``np.pad``) does: negative pads crop the input first; the modes then apply to the
cropped extent, reflecting (without repeating the edge) and wrapping as often as the pad
needs. Constant mode writes the ``value`` attribute, or reads the fill from its run-time
input.
"""

from __future__ import annotations

import numpy as np

from pydla.backends.cuda.codegen import decompose, defines, f32, offset, storage_type
from pydla.backends.cuda.context import BindContext
from pydla.backends.cuda.registry import Candidate, kernel
from pydla.dtypes import DType
from pydla.errors import KernelError
from pydla.loadable.program import LayerInfo

_PAD = r"""
extern "C" __global__ void pad(const TX* __restrict__ x, TX* __restrict__ y,
                               const TX* __restrict__ fill) {
  for (i64 t = blockIdx.x * (i64)blockDim.x + threadIdx.x; t < TOTAL;
       t += (i64)gridDim.x * blockDim.x) {
COORDS
    bool inside = true;
SOURCE
    if (inside) st(y + Y_OFF, ld(x + X_OFF));
    else st(y + Y_OFF, FILL);
  }
}
"""


def _source_coord(d: int, begin: int, crop: int, extent: int, mode: str) -> list[str]:
    """Statements giving input coordinate ``s{d}`` for output coordinate ``c{d}``
    (``extent``: the cropped input's size along d)."""
    lines = [f"    i64 s{d} = c{d} - {begin};"]
    if mode == "constant":
        lines.append(f"    inside = inside && s{d} >= 0 && s{d} < {extent};")
    elif mode == "edge":
        lines.append(f"    s{d} = s{d} < 0 ? 0 : (s{d} >= {extent} ? {extent - 1} : s{d});")
    elif mode == "wrap":
        lines.append(f"    s{d} %= {extent}; if (s{d} < 0) s{d} += {extent};")
    elif extent == 1:  # reflect over a single element: it repeats
        lines.append(f"    s{d} = 0;")
    else:  # reflect: a triangle wave of period 2·(extent − 1)
        period = 2 * (extent - 1)
        lines.append(f"    s{d} %= {period}; if (s{d} < 0) s{d} += {period};")
        lines.append(f"    if (s{d} >= {extent}) s{d} = {period} - s{d};")
    if crop:
        lines.append(f"    s{d} += {crop};")
    return lines


def _literal(value: float | int | bool, dtype: DType, where: str) -> str:
    if dtype in (DType.FLOAT32, DType.FLOAT16, DType.BFLOAT16):
        return f32(float(value))
    if dtype is DType.BOOL:
        return "true" if value else "false"
    return f"(({storage_type(dtype, where)})({int(value)}ll))"


@kernel("Pad")
def bind_pad(ctx: BindContext, layer: LayerInfo) -> list[Candidate]:
    x, out = ctx.place(layer.inputs[0]), ctx.place(layer.outputs[0])
    mode = str(layer.attrs.get("mode", "constant"))
    pads = [int(p) for p in layer.attrs["pads"]]
    rank = len(x.shape)
    if len(pads) != 2 * rank or mode not in ("constant", "reflect", "edge", "wrap"):
        raise KernelError(layer.name, layer.op, f"mode {mode!r} with pads {pads} for a "
                          f"rank-{rank} input")
    begins, ends = pads[:rank], pads[rank:]
    extents = [d - max(-b, 0) - max(-e, 0) for d, b, e in zip(x.shape, begins, ends)]
    for d, (extent, b, e) in enumerate(zip(extents, begins, ends)):
        if extent <= 0 and (mode != "constant" and (b > 0 or e > 0)):
            raise KernelError(layer.name, layer.op, f"{mode} padding of axis {d}, which is "
                              "empty after cropping")
    if out.size == 0:
        return [Candidate("nvrtc", lambda stream: None)]
    order = out.physical_order()
    lines = decompose("t", [out.shape[d] for d in order], "p", "    ")
    lines += [f"    const i64 c{d} = p{i};" for i, d in enumerate(order)]
    source_lines: list[str] = []
    for d in range(rank):
        extent = extents[d] if mode == "constant" else max(extents[d], 1)
        source_lines += _source_coord(d, max(begins[d], 0), max(-begins[d], 0), extent, mode)
    fill_index = layer.inputs[1] if len(layer.inputs) > 1 else -1
    fill_ptr = 0
    if mode == "constant" and fill_index >= 0:
        fill_ptr = ctx.place(fill_index).ptr
        fill = "ld(fill)"
    else:
        fill = _literal(layer.attrs.get("value", 0), out.dtype, layer.name)
    c = [f"c{d}" for d in range(rank)]
    s = [f"s{d}" for d in range(rank)]
    source = defines({"TX": storage_type(x.dtype, layer.name), "TOTAL": out.size}) + (
        _PAD.replace("COORDS", "\n".join(lines)).replace("SOURCE", "\n".join(source_lines))
        .replace("Y_OFF", offset(c, out.strides)).replace("X_OFF", offset(s, x.strides))
        .replace("FILL", fill))
    args = [np.uint64(x.ptr), np.uint64(out.ptr), np.uint64(fill_ptr)]
    return [Candidate("nvrtc", ctx.kernel_launch(source, "pad", out.size, args))]

