"""MaxPool in the channel-blocked layout (pydla.plan.layouts): the ``max_nchw16c`` tactic.

A ResNet's or CRNN's max pool sits between a stem or convolutions that can run on blocks
of 16 channels; planar, it kept the stem planar too (its output transposed back to NCHW)
and reordered its own output into blocks. Here each output pixel is the maximum of its
window's 16-channel vectors, read in place from the blocked input: the window's rows and
columns inside the image come from depthwise_nchw16c's tables (kernel rows per output row,
column classes at the edges), eight pixels per call in the interior (``simd.tap_max``).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numba import njit, prange

from pydla.backends.base import LayerSpec, RunFn
from pydla.backends.cpu import threads
from pydla.backends.cpu.kernels.conv_fast.depthwise_nchw16c import Columns, kernel_rows
from pydla.backends.cpu.kernels.conv_fast.geometry import BLOCK, BLOCKED, Conv2d
from pydla.backends.cpu.kernels.conv_fast.simd import tap_max
from pydla.backends.cpu.registry import tactic
from pydla.backends.cpu.steps import PreboundKernel, Thunk, kernel_call
from pydla.dtypes import DType

_VEC = BLOCK * 4
_max8, _max4, _max1 = tap_max(8), tap_max(4), tap_max(1)


@njit(cache=True, parallel=True, error_model="numpy")
def max_nchw16c(x: np.ndarray, y: np.ndarray, offs: np.ndarray, widths: np.ndarray,
                cls: np.ndarray, lim: np.ndarray, sh: int, sw: int, top: int, left: int,
                oh: int, ow: int, qa: int, qb: int, band: int, nthreads: int) -> None:
    """x (n, blocks, h, w, 16); y (n·blocks, oh·ow·16); the window tables as in
    depthwise_nchw16c (every window holds at least one pixel of the image)."""
    n, blocks, w = x.shape[0], x.shape[1], x.shape[3]
    ntaps = offs.shape[1]
    bands = -(-oh // band)
    tasks = n * blocks * bands
    per = -(-tasks // nthreads)
    step = sw * _VEC
    for t in prange(nthreads):
        for task in range(t * per, min(tasks, (t + 1) * per)):
            img = task // (blocks * bands)  # bands outermost: rows split among threads
            r0 = (task // blocks) % bands * band
            blk = task % blocks
            plane = x[img, blk].ctypes.data
            out = y[img * blocks + blk].ctypes.data
            for r in range(r0, min(oh, r0 + band)):
                i0, i1 = lim[r, 0], lim[r, 1]
                corner = plane + ((r * sh - top) * w - left) * _VEC
                dst = out + r * ow * _VEC
                taps = (i1 - i0) * widths[0]
                o = offs.ctypes.data + i0 * widths[0] * 8
                q = qa
                while q + 8 <= qb:
                    _max8(corner + q * step, step, o, taps, dst + q * _VEC)
                    q += 8
                while q + 4 <= qb:
                    _max4(corner + q * step, step, o, taps, dst + q * _VEC)
                    q += 4
                while q < qb:
                    _max1(corner + q * step, step, o, taps, dst + q * _VEC)
                    q += 1
                for q in range(ow):
                    if qa <= q < qb:
                        continue
                    c = cls[q]
                    m = widths[c]
                    _max1(corner + q * step, step, offs.ctypes.data + (c * ntaps + i0 * m) * 8,
                          (i1 - i0) * m, dst + q * _VEC)


def _geometry(spec: LayerSpec) -> Conv2d | None:
    """The pool as a depthwise geometry, or None when it is not a blocked 2-D float32 max
    pool every window of which reaches into the image."""
    x, a = spec.inputs[0], spec.attrs
    if (spec.op != "MaxPool" or x is None or len(spec.outputs) != 1
            or a.get("layouts") != [BLOCKED, BLOCKED] or len(a["kernel_shape"]) != 2
            or x.dtype != DType.FLOAT32 or spec.outputs[0].dtype != DType.FLOAT32):
        return None
    y = spec.outputs[0].shape
    if len(x.shape) != 5 or x.shape[4] != BLOCK or len(y) != 5 or y[:2] != x.shape[:2] \
            or y[4] != BLOCK:
        return None
    kh, kw = (int(k) for k in a["kernel_shape"])
    sh, sw = (int(s) for s in a.get("strides") or (1, 1))
    dh, dw = (int(d) for d in a.get("dilations") or (1, 1))
    top, left = (int(p) for p in (a.get("pads") or (0, 0, 0, 0))[:2])
    n, blocks, h, w = x.shape[:4]
    c = blocks * BLOCK
    geo = Conv2d(n, c, h, w, c, kh, kw, y[2], y[3], sh, sw, dh, dw, top, left, c, False,
                 True, True)
    rows, cols = kernel_rows(geo), Columns(geo)
    if (rows[:, 1] <= rows[:, 0]).any() or (cols.widths[cols.cls] == 0).any():
        return None  # a window wholly in the padding: nothing to take the maximum of
    return geo


def _applies(spec: LayerSpec) -> bool:
    return _geometry(spec) is not None


@tactic("MaxPool", "max_nchw16c", applies=_applies, priority=20)
def bind_max_nchw16c(spec: LayerSpec) -> RunFn:
    geo = _geometry(spec)
    assert geo is not None
    nthreads = threads.configure()
    blocks = geo.n * geo.c // BLOCK
    # Bands of rows, each thread taking whole bands of every block: the layer before split
    # its output by rows too (the stem, the GEMMs), so a thread mostly reads what its own
    # core wrote — split by blocks, half the input crossed between the cores' caches
    # (ResNet-50's pool: 44 µs alone, 117 in the network).
    band = max(1, -(-geo.oh // -(-2 * nthreads // geo.n)))
    cols, lim = Columns(geo), kernel_rows(geo)

    def prebind(ins: Sequence[np.ndarray | None], outs: Sequence[np.ndarray]) -> Thunk:
        x = ins[0]
        assert x is not None
        y = outs[0].reshape(blocks, geo.pixels * BLOCK)
        return kernel_call(max_nchw16c, np.ascontiguousarray(x), y, cols.offs, cols.widths,
                           cols.cls, lim, geo.sh, geo.sw, geo.top, geo.left, geo.oh, geo.ow,
                           cols.qa, cols.qb, band, nthreads)

    return PreboundKernel(prebind)
