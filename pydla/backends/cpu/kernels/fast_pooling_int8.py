"""MaxPool on uint8/int8 tensors (tactic ``int8``): quantized networks pool their 8-bit
activations (fold_qdq_moves moves DQ → MaxPool → Q of equal parameters onto the int8
tensor, exact: quantization is monotonic); the float tactics take float32 only, and the
reference ran OriNet's four pools in 1.0 ms of a 12 ms int8 run (one thread).

Per output row: the window's valid input rows are reduced into one row (a vectorized
byte max), written between padding of the type's minimum and split into the stride's
column phases, so that each of the kw taps is a vectorized max over consecutive bytes. The
minimum never exceeds a real element; a window wholly in the padding (ceil_mode) gives
the minimum, as the reference does.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
from numba import njit

from pydla.backends.base import LayerSpec, RunFn
from pydla.backends.cpu import threads
from pydla.backends.cpu.fork import fork_call
from pydla.backends.cpu.kernels.int8.thunk import bound
from pydla.backends.cpu.kernels.pooling import _Windows, bind_max_pool
from pydla.backends.cpu.registry import tactic
from pydla.backends.cpu.steps import PreboundKernel
from pydla.dtypes import DType

Thunk = Callable[[], object]


@njit(cache=True, error_model="numpy", boundscheck=False)
def maxpool_task(t: int, nthreads: int, x: np.ndarray, y: np.ndarray, scratch: np.ndarray,
                 geo: np.ndarray, flip: int) -> None:  # pragma: no cover
    """Thread t's planes of x (planes, h, w) → y (planes, oh, ow), both as uint8 (int8
    xor 0x80: order-preserving); geo = (kh, kw, sh, sw, dh, dw, top, left, wq)."""
    kh, kw, sh, sw, dh, dw, top, left, wq = geo
    planes, h, w = x.shape
    oh, ow = y.shape[1], y.shape[2]
    f = np.uint8(flip)
    row = scratch[t, 0]      # the reduced row, padded: column c at row[left + c]
    phases = scratch[t, 1]   # its sw phases, wq bytes each
    acc = scratch[t, 2]
    for p in range(t * planes // nthreads, (t + 1) * planes // nthreads):
        for oy in range(oh):
            for c in range(row.shape[0]):
                row[c] = 0
            reduced = row[left:left + w]
            for i in range(kh):
                iy = oy * sh - top + i * dh
                if 0 <= iy < h:
                    src = x[p, iy]
                    for c in range(w):
                        v = src[c] ^ f
                        reduced[c] = v if v > reduced[c] else reduced[c]
            split = row
            if sw > 1:
                split = phases
                for ph in range(sw):
                    part = phases[ph * wq:(ph + 1) * wq]
                    for k in range(wq):
                        part[k] = row[k * sw + ph]
            for ox in range(ow):
                acc[ox] = 0
            for j in range(kw):
                col = j * dw
                tap = split[(col % sw) * wq + col // sw:]
                for ox in range(ow):
                    v = tap[ox]
                    acc[ox] = v if v > acc[ox] else acc[ox]
            dst = y[p, oy]
            for ox in range(ow):
                dst[ox] = acc[ox] ^ f


def _applies(spec: LayerSpec) -> bool:
    x = spec.inputs[0]
    return (x is not None and x.dtype in (DType.UINT8, DType.INT8) and len(x.shape) == 4
            and len(spec.outputs) == 1 and spec.outputs[0].dtype is x.dtype
            and len(spec.attrs["kernel_shape"]) == 2
            and int(spec.attrs.get("storage_order", 0)) == 0)


class _MaxPool(PreboundKernel):
    def __init__(self, spec: LayerSpec) -> None:
        super().__init__()
        self.reference = bind_max_pool(spec)
        win = _Windows(spec)
        (kh, kw), (sh, sw), (dh, dw) = win.kernel, win.strides, win.dilations
        top, left = win.begin
        ow = win.out_sizes[1]
        width = win.in_sizes[1]
        # columns the taps reach, padding included, rounded up to whole phases
        reach = max(left + width, (ow - 1) * sw + (kw - 1) * dw + 1)
        wq = -(-reach // sw)
        self.width = max(sw * wq, left + width)
        self.geo = np.array([kh, kw, sh, sw, dh, dw, top, left, wq], np.int64)

    def prebind(self, inputs: Sequence[np.ndarray | None],
                outputs: Sequence[np.ndarray]) -> Thunk:
        x, y = inputs[0], outputs[0]
        assert x is not None
        if not (x.flags.c_contiguous and y.flags.c_contiguous):  # views must not copy
            return lambda: self.reference(inputs, outputs)
        n, c, h, w = x.shape
        x3 = x.reshape(n * c, h, w).view(np.uint8)
        y3 = y.reshape(n * c, *y.shape[2:]).view(np.uint8)
        nt = min(threads.configure(), n * c) if threads.parallel_pays(x.size) else 1
        scratch = np.zeros((nt, 3, self.width + 64), np.uint8)
        flip = 0x80 if x.dtype == np.int8 else 0
        call = fork_call(maxpool_task, nt, nt, x3, y3, scratch, self.geo, flip)
        return bound((call,), (x3, y3, scratch))


@tactic("MaxPool", "int8", applies=_applies, priority=10)
def bind_maxpool_int8(spec: LayerSpec) -> RunFn:
    return _MaxPool(spec)
