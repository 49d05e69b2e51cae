"""TopK along one axis, for every stored numeric type, values and int64 indices (NVRTC).

One thread per input element counts the elements of its row that come before it in the
output order — larger (``largest``) or smaller, or equal with a lower index — and, when
fewer than k do, writes itself at that position: the output is sorted whatever ``sorted``
says, ties keep the lower index first, and NaN counts as larger than every number (the
first NaN first), as the CPU backend's stable sorts order them (and onnxruntime ties). A
thread stops counting once k elements are before it, so a row of n costs about k·n·ln n
comparisons for small k and n² at most; the threads never cooperate, so the host emulator
runs it too. Values are copied as stored (NaN payloads kept).
"""

from __future__ import annotations

import numpy as np

from pydla.backends.cuda.codegen import compute_type, decompose, defines, offset, storage_type
from pydla.backends.cuda.context import BindContext
from pydla.backends.cuda.registry import Candidate, kernel
from pydla.dtypes import DType
from pydla.errors import KernelError
from pydla.loadable.program import LayerInfo

_TOPK = r"""
#define IS_NAN(a) ((a) != (a))
#if LARGEST
#define BEFORE(u, v) ((IS_NAN(u) && !IS_NAN(v)) || (u) > (v))
#else
#define BEFORE(u, v) ((!IS_NAN(u) && IS_NAN(v)) || (u) < (v))
#endif
#define SAME(u, v) ((IS_NAN(u) && IS_NAN(v)) || (u) == (v))
extern "C" __global__ void topk(const TX* __restrict__ x, TX* __restrict__ y,
                                long long* __restrict__ yi) {
  for (i64 e = blockIdx.x * (i64)blockDim.x + threadIdx.x; e < TOTAL;
       e += (i64)gridDim.x * blockDim.x) {
COORDS
    const TX* base = x + X_OFF;
    const i64 at = AXIS_COORD;
    const CT v = ld(base + at * XSA);
    i64 rank = 0;
    for (i64 j = 0; j < DIM && rank < K; ++j) {
      const CT u = ld(base + j * XSA);
      if (BEFORE(u, v) || (j < at && SAME(u, v))) ++rank;
    }
    if (rank < K) {
      if (HAS_Y) y[Y_OFF] = base[at * XSA];
      if (HAS_YI) yi[YI_OFF] = (long long)at;
    }
  }
}
"""


@kernel("TopK")
def bind_topk(ctx: BindContext, layer: LayerInfo) -> list[Candidate]:
    x = ctx.place(layer.inputs[0])
    rank = len(x.shape)
    axis = int(layer.attrs["axis"]) % rank
    k = int(layer.attrs["k"])
    outs = [ctx.place(o) if o >= 0 else None for o in
            list(layer.outputs) + [-1] * (2 - len(layer.outputs))]
    y, yi = outs[:2]
    if y is not None and y.dtype is not x.dtype:
        raise KernelError(layer.name, layer.op, f"values are {y.dtype.name.lower()}, the "
                          f"input {x.dtype.name.lower()}")
    if yi is not None and yi.dtype is not DType.INT64:
        raise KernelError(layer.name, layer.op, f"writes int64 indices, not "
                          f"{yi.dtype.name.lower()}")
    if k == 0 or x.size == 0:
        return [Candidate("nvrtc", lambda stream: None)]
    order = x.physical_order()
    lines = decompose("e", [x.shape[d] for d in order], "p", "    ")
    lines += [f"    const i64 c{d} = p{i};" for i, d in enumerate(order)]
    coords = [f"c{d}" for d in range(rank)]
    row = [0 if d == axis else s for d, s in enumerate(x.strides)]  # the row's first element
    out_coords = coords[:axis] + ["rank"] + coords[axis + 1:]
    ref = y if y is not None else yi
    assert ref is not None  # a layer has at least one output
    values = {"TX": storage_type(x.dtype, layer.name), "CT": compute_type(x.dtype),
              "TOTAL": x.size, "DIM": x.shape[axis], "XSA": x.strides[axis], "K": k,
              "LARGEST": int(bool(layer.attrs.get("largest", 1))),
              "HAS_Y": int(y is not None), "HAS_YI": int(yi is not None)}
    source = defines(values) + (
        _TOPK.replace("COORDS", "\n".join(lines)).replace("AXIS_COORD", coords[axis])
        .replace("X_OFF", offset(coords, row))
        .replace("YI_OFF", offset(out_coords, (yi or ref).strides))
        .replace("Y_OFF", offset(out_coords, ref.strides)))
    args = [np.uint64(y.ptr if y is not None else 0), np.uint64(yi.ptr if yi is not None else 0)]
    return [Candidate("nvrtc", ctx.kernel_launch(source, "topk", x.size,
                                                 [np.uint64(x.ptr), *args]))]
