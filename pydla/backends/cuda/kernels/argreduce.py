"""ArgMax and ArgMin over one axis, for every stored input type, into int64 (NVRTC).

One thread per output element walks the axis, as numpy's argmax/argmin in the CPU backend
do: the first extreme wins, a NaN counts as the extreme (its first occurrence);
``select_last_index`` walks the axis backwards, so the last one wins. ``keepdims`` only
changes the output's shape: its coordinates map onto the input's with the axis at 0.
"""

from __future__ import annotations

import numpy as np

from pydla.backends.cuda.codegen import compute_type, decompose, defines, offset, storage_type
from pydla.backends.cuda.context import BindContext
from pydla.backends.cuda.registry import Candidate, kernel
from pydla.dtypes import DType
from pydla.errors import KernelError
from pydla.loadable.program import LayerInfo

_ARG = r"""
extern "C" __global__ void argreduce(const TX* __restrict__ x, long long* __restrict__ y) {
  for (i64 t = blockIdx.x * (i64)blockDim.x + threadIdx.x; t < TOTAL;
       t += (i64)gridDim.x * blockDim.x) {
COORDS
    const TX* base = x + X_OFF;
    i64 at = LAST ? DIM - 1 : 0;
    CT best = ld(base + at * XSA);
    for (i64 n = 1; n < DIM; ++n) {
      const i64 k = LAST ? DIM - 1 - n : n;
      const CT v = ld(base + k * XSA);
      if (!(best != best) && (v != v || v CMP best)) { best = v; at = k; }
    }
    st(y + Y_OFF, (long long)at);
  }
}
"""


@kernel("ArgMax", "ArgMin")
def bind_argreduce(ctx: BindContext, layer: LayerInfo) -> list[Candidate]:
    x, out = ctx.place(layer.inputs[0]), ctx.place(layer.outputs[0])
    rank = len(x.shape)
    axis = int(layer.attrs.get("axis", 0)) % rank
    keep = bool(layer.attrs.get("keepdims", 1))
    if out.dtype is not DType.INT64:
        raise KernelError(layer.name, layer.op, f"writes int64, not {out.dtype.name.lower()}")
    if x.shape[axis] == 0:
        raise KernelError(layer.name, layer.op, f"axis {axis} of {x.shape} is empty")
    if out.size == 0:
        return [Candidate("nvrtc", lambda stream: None)]
    order = out.physical_order()
    lines = decompose("t", [out.shape[d] for d in order], "p", "    ")
    lines += [f"    const i64 c{d} = p{i};" for i, d in enumerate(order)]
    c = [f"c{d}" for d in range(len(out.shape))]
    # the input's coordinates with the axis at 0 (dropped from the strides)
    x_coords = c if keep else c[:axis] + ["0"] + c[axis:]
    x_strides = [0 if d == axis else s for d, s in enumerate(x.strides)]
    values = {"TX": storage_type(x.dtype, layer.name), "CT": compute_type(x.dtype),
              "TOTAL": out.size, "DIM": x.shape[axis], "XSA": x.strides[axis],
              "LAST": int(bool(layer.attrs.get("select_last_index", 0))),
              "CMP": ">" if layer.op == "ArgMax" else "<"}
    source = defines(values) + (
        _ARG.replace("COORDS", "\n".join(lines))
        .replace("X_OFF", offset(x_coords, x_strides)).replace("Y_OFF", offset(c, out.strides)))
    args = [np.uint64(x.ptr), np.uint64(out.ptr)]
    return [Candidate("nvrtc", ctx.kernel_launch(source, "argreduce", out.size, args))]
