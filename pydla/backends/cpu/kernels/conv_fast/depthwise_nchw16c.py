"""Depthwise convolution in the channel-blocked layout: the ``depthwise_nchw16c`` tactic.

Input (n, blocks, h, w, 16) and output (n·blocks, oh·ow·16) are both in blocks of 16
channels (pydla.plan.layouts), so every tap of every output pixel is one 16-lane
multiply-add read straight from the input — no staged, zero-bordered copy (staging
moved the whole input once more: a stride-2 layer over a 112×112 plane spent more time
copying than multiplying). The zero padding is handled by leaving taps out instead:

- a kernel row outside the image is left out of every pixel of that output row: the
  taps are in row-major order, so the rows inside form one contiguous run of them;
- a kernel column outside the image only occurs in the few output columns at the left
  and right edges. Each such column has a *class* (the run of kernel columns inside) with
  its own packed taps and weights; the interior columns share class 0 (every column),
  eight pixels per call; a lone pixel spreads its taps over four accumulators
  (simd.tap_sum_one).

Large kernels at stride 1 on narrow planes (5×5 on 7×7 or 14×14: a third of the
columns are edges) copy each band into a zero-bordered stage instead, where every pixel
takes every tap and eight pixels anywhere in the band share a call (``tap_sum`` with
``gather``).

A fused Relu/Clip (or none) bounds the taps' sums on their way into the output; any other
epilogue runs on a band of output rows in a per-thread buffer, while it is in cache.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numba import njit

from pydla.backends.base import LayerSpec, RunFn
from pydla.backends.cpu import workspace
from pydla.backends.cpu.fork import fork_call
from pydla.backends.cpu.kernels.conv_fast.binding import (
    Derived,
    Thunk,
    bias_of,
    bind_conv,
    blocked_epilogue_ok,
    out_rows,
    runner,
    with_bias_copy,
    with_registers,
)
from pydla.backends.cpu.kernels.conv_fast.depthwise_c16 import L, emit_blocked, streams
from pydla.backends.cpu.kernels.conv_fast.epilogue import (
    ACC,
    CLIP,
    RELU,
    Epilogue,
    EpilogueArgs,
    native_epilogue,
)
from pydla.backends.cpu.kernels.conv_fast.geometry import Conv2d, conv2d, inside
from pydla.backends.cpu.kernels.conv_fast.simd import copy_bytes, tap_sum, tap_sum_one, zero_bytes
from pydla.backends.cpu.registry import tactic
from pydla.backends.cpu.workspace import aligned_zeros

_OUT_BYTES = 32 * 1024  # a band of one block's output rows, for a non-fused epilogue
_VEC = L * 4  # bytes of one pixel's 16 channels
_NONE = np.zeros(1, np.int64)
STAGE_MAX_WIDTH = 16

_sum8, _sum4, _sum1 = tap_sum(8, clamp=True), tap_sum(4, clamp=True), tap_sum_one
_gather8, _gather4, _gather1 = (tap_sum(8, clamp=True, gather=True),
                                tap_sum(4, clamp=True, gather=True),
                                tap_sum(1, clamp=True, gather=True))


@njit(inline="always", error_model="numpy")
def _bias_only(bp: np.ndarray, blk: int, out: np.ndarray, at: int, lo: np.float32,
               hi: np.float32) -> None:
    """A pixel none of whose taps lies inside the image (padding ≥ the kernel's reach)."""
    for lane in range(L):
        v = bp[blk, lane]
        out[at + lane] = hi if v > hi else (lo if v < lo else v)


@njit(inline="always", error_model="numpy")
def stage_blocked(x: np.ndarray, img: int, blk: int, iy0: int, rows: int, left: int,
                  st: np.ndarray) -> None:
    """st[r, q] = x[img, blk, iy0 + r, q - left] (16 channels), zero outside the image;
    x is (n, blocks, h, w, 16) or, flattened, (n, blocks, h, w·16)."""
    h = x.shape[2]
    cols = st.shape[1]
    sf, plane = st.reshape(-1), x[img, blk].reshape(-1)
    w = plane.size // (h * L)
    width = min(w, cols - left)
    line = cols * L * 4  # bytes
    for r in range(rows):
        iy = iy0 + r
        row = sf.ctypes.data + r * line
        if iy < 0 or iy >= h:
            zero_bytes(row, line)
            continue
        zero_bytes(row, left * L * 4)
        zero_bytes(row + (left + width) * L * 4, (cols - left - width) * L * 4)
        copy_bytes(row + left * L * 4, plane.ctypes.data + iy * w * L * 4, width * L * 4)


@njit(inline="always", error_model="numpy")
def _staged_band(st: np.ndarray, rel: np.ndarray, offs: np.ndarray, wp: int, b0: int,
                 dst: int, count: int, lo: np.float32, hi: np.float32) -> None:
    """``count`` output pixels from a staged band, every tap inside it: eight per call at
    their gathered offsets ``rel``; a ragged end recomputes some pixels of the call
    before it (the same values) rather than running latency-bound single pixels."""
    src, r0, o, taps = st.ctypes.data, rel.ctypes.data, offs.ctypes.data, offs.shape[0]
    k = 0
    while k + 8 <= count:
        _gather8(src, r0 + k * 8, o, wp, taps, b0, dst + k * _VEC, 0, lo, hi)
        k += 8
    if k < count and count >= 8:
        k = count - 8
        _gather8(src, r0 + k * 8, o, wp, taps, b0, dst + k * _VEC, 0, lo, hi)
        return
    while k + 4 <= count:
        _gather4(src, r0 + k * 8, o, wp, taps, b0, dst + k * _VEC, 0, lo, hi)
        k += 4
    if k < count and count >= 4:
        k = count - 4
        _gather4(src, r0 + k * 8, o, wp, taps, b0, dst + k * _VEC, 0, lo, hi)
        return
    while k < count:
        _gather1(src, r0 + k * 8, o, wp, taps, b0, dst + k * _VEC, 0, lo, hi)
        k += 1


@njit(cache=True, error_model="numpy")
def depthwise_nchw16c(t: int, x: np.ndarray, wt: np.ndarray, bp: np.ndarray, offs: np.ndarray,
                      widths: np.ndarray, cls: np.ndarray, lim: np.ndarray, y: np.ndarray,
                      sh: int, sw: int, top: int, left: int, oh: int, ow: int, qa: int,
                      qb: int, band: int, nthreads: int, obuf: np.ndarray, code: np.ndarray,
                      prm: np.ndarray, full0: np.ndarray, full1: np.ndarray,
                      vecs: np.ndarray, scratch: np.ndarray, bounds: np.ndarray,
                      kh: int, dh: int, stage: np.ndarray, rel: np.ndarray,
                      soffs: np.ndarray, stream: bool) -> None:
    """x (n, blocks, h, w, 16); wt (blocks, classes, kh·kw, 16) the weights of each column
    class's taps, row-major; offs (classes, kh·kw) their byte offsets from the pixel's
    corner; widths (classes,) taps per kernel row; cls (ow,) each output column's class;
    lim (oh, 2) the kernel rows [i0, i1) inside the image; columns [qa, qb) are class 0;
    y (n·blocks, oh·ow·16). With bounds[2] nonzero the epilogue is at most a clamp to
    [bounds[0], bounds[1]], stored straight into y; otherwise a band of rows goes through
    obuf[thread] (band·ow, 16) and the epilogue. With a ``stage`` (threads, rows, cols, 16)
    of more than one row, each band is first copied into it, zero-bordered, and computed
    from there: pixel p of the band at byte offset rel[p], tap t at soffs[t]."""
    n, blocks, w = x.shape[0], x.shape[1], x.shape[3]
    classes, ntaps = wt.shape[1], wt.shape[2]
    fused = bounds[2] != 0
    lo, hi = (bounds[0], bounds[1]) if fused else (np.float32(-np.inf), np.float32(np.inf))
    bands = -(-oh // band)
    tasks = n * blocks * bands
    per = -(-tasks // nthreads)
    step = sw * _VEC
    staged = stage.shape[1] > 1
    ob = obuf[t].reshape(-1)
    st = stage[t]
    for task in range(t * per, min(tasks, (t + 1) * per)):
        img = task // (blocks * bands)
        if staged:  # whole blocks per thread: a band's halo is staged once per block
            blk, r0 = (task // bands) % blocks, task % bands * band
        else:  # bands outermost: rows split among threads
            r0, blk = (task // blocks) % bands * band, task % blocks
        r1 = min(oh, r0 + band)
        row = img * blocks + blk
        out, at0 = (y[row], r0 * ow * L) if fused else (ob, 0)
        plane = x[img, blk].ctypes.data
        w0 = wt.ctypes.data + blk * classes * ntaps * _VEC
        b0 = bp.ctypes.data + blk * _VEC
        if staged:
            stage_blocked(x, img, blk, r0 * sh - top,
                          (r1 - r0 - 1) * sh + (kh - 1) * dh + 1, left, st)
            _staged_band(st, rel, soffs, w0, b0, out.ctypes.data + at0 * 4,
                         (r1 - r0) * ow, lo, hi)
        for r in range(r0 if not staged else r1, r1):
            i0, i1 = lim[r, 0], lim[r, 1]
            corner = plane + ((r * sh - top) * w - left) * _VEC  # pixel (iy0, -left)
            at = at0 + (r - r0) * ow * L
            dst = out.ctypes.data + at * 4
            taps = (i1 - i0) * widths[0]
            o = offs.ctypes.data + i0 * widths[0] * 8
            wp = w0 + i0 * widths[0] * _VEC
            q = qa
            if taps > 0:
                while q + 8 <= qb:
                    _sum8(corner + q * step, step, o, wp, taps, b0, dst + q * _VEC, 0,
                          lo, hi)
                    q += 8
                while q + 4 <= qb:
                    _sum4(corner + q * step, step, o, wp, taps, b0, dst + q * _VEC, 0,
                          lo, hi)
                    q += 4
                while q < qb:
                    _sum1(corner + q * step, step, o, wp, taps, b0, dst + q * _VEC, 0,
                          lo, hi)
                    q += 1
            else:
                for q in range(qa, qb):
                    _bias_only(bp, blk, out, at + q * L, lo, hi)
            for q in range(ow):
                if qa <= q < qb:
                    continue
                c = cls[q]
                m = widths[c]
                taps = (i1 - i0) * m
                if taps == 0:
                    _bias_only(bp, blk, out, at + q * L, lo, hi)
                    continue
                _sum1(corner + q * step, step,
                      offs.ctypes.data + (c * ntaps + i0 * m) * 8,
                      w0 + (c * ntaps + i0 * m) * _VEC, taps, b0, dst + q * _VEC, 0,
                      lo, hi)
        if not fused:
            emit_blocked(obuf[t], (r1 - r0) * ow, y, row, r0 * ow * L, code, prm, full0,
                         full1, vecs, scratch[t], stream)


class Columns:
    """The output columns' classes: class 0 uses every kernel column; each distinct run of
    kernel columns inside the image at the edges gets a class of its own."""

    def __init__(self, geo: Conv2d) -> None:
        runs: list[tuple[int, int]] = [(0, geo.kw)]
        cls = []
        for q in range(geo.ow):
            run = inside(q * geo.sw - geo.left, geo.kw, geo.dw, geo.w)
            if run not in runs:
                runs.append(run)
            cls.append(runs.index(run))
        self.runs = runs
        self.cls = np.array(cls, np.int64)
        interior = [q for q in range(geo.ow) if cls[q] == 0]
        # class-0 columns are one run: those whose whole kernel row lies inside
        self.qa, self.qb = (interior[0], interior[-1] + 1) if interior else (0, 0)
        self.widths = np.array([j1 - j0 for j0, j1 in runs], np.int64)
        ntaps = geo.kh * geo.kw
        self.offs = np.zeros((len(runs), ntaps), np.int64)
        for c, (j0, j1) in enumerate(runs):
            m = j1 - j0
            for i in range(geo.kh):
                for j in range(j0, j1):
                    self.offs[c, i * m + j - j0] = (i * geo.dh * geo.w + j * geo.dw) * _VEC


def kernel_rows(geo: Conv2d) -> np.ndarray:
    """(oh, 2): for each output row, the kernel rows [i0, i1) inside the image."""
    return np.array([inside(r * geo.sh - geo.top, geo.kh, geo.dh, geo.h)
                     for r in range(geo.oh)], np.int64).reshape(geo.oh, 2)


def _band(geo: Conv2d, nthreads: int) -> int:
    """Output rows per task: a band's output within _OUT_BYTES, and the bands of an image
    a multiple of the threads. Each thread takes whole bands of every block, as the 1×1
    layers around a depthwise one split their pixels: a thread then reads mostly what its
    own core wrote (split by blocks, half of every input crossed between the cores'
    caches, and half of every output on its way to the next layer). A staged layer's
    threads take whole blocks instead: its planes are narrow, and a band stages
    (kernel - 1) rows of halo on top of its own."""
    bands = -(-geo.oh // max(1, _OUT_BYTES // (geo.ow * _VEC)))
    if staged(geo):  # few rows: each extra band stages its halo again (whole planes)
        blocks = geo.n * -(-geo.m // L)
        if blocks < 2 * nthreads:
            bands = max(bands, -(-2 * nthreads // blocks))
    elif geo.n < nthreads:
        bands = -(-max(bands, nthreads) // nthreads) * nthreads
    return max(1, -(-geo.oh // bands))


def staged(geo: Conv2d) -> bool:
    """Whether to compute from a staged copy: 5×5 and larger kernels at stride 1 on narrow
    planes, where the direct path's edge columns (a third of a 14-wide row, one pixel
    per call) outweigh copying the band. Measured here, direct vs staged: 576 channels at
    7×7, 5×5 kernel 20 vs 16 µs, 240 at 14×14 23 vs 21; 3×3 kernels and strided layers
    lose 1-10 µs to the copy."""
    return geo.sh == geo.sw == 1 and geo.kw >= 5 and geo.ow <= STAGE_MAX_WIDTH


def _make(spec: LayerSpec, geo: Conv2d, epi: Epilogue, nthreads: int) -> RunFn:
    cols = Columns(geo)
    band = _band(geo, nthreads)
    blocks = -(-geo.m // L)
    ntaps = geo.kh * geo.kw
    lim = kernel_rows(geo)
    obuf = workspace.scratch((nthreads, band * geo.ow, L))
    wt = aligned_zeros((blocks, len(cols.runs), ntaps, L))
    bp = aligned_zeros((blocks, L))
    args = EpilogueArgs(epi, spec.outputs[0].shape, nthreads, band * geo.ow * L)
    clamp = clamp_bounds(epi)
    bounds = np.array([*(clamp or (0.0, 0.0)), 1.0 if clamp else 0.0], np.float32)
    zeros = np.zeros(geo.m, np.float32)
    zeros.flags.writeable = False  # a constant bias
    code, prm, vecs = epi.code, epi.prm, args.vecs
    if staged(geo):
        span = (band - 1) * geo.sh + (geo.kh - 1) * geo.dh + 1
        width = (geo.ow - 1) * geo.sw + (geo.kw - 1) * geo.dw + 1
        stage = workspace.scratch((nthreads, span, width, L))
        rel = np.array([(r * geo.sh * width + q * geo.sw) * _VEC
                        for r in range(band) for q in range(geo.ow)], np.int64)
        soffs = np.array([(i * geo.dh * width + j * geo.dw) * _VEC
                          for i in range(geo.kh) for j in range(geo.kw)], np.int64)
    else:
        stage, rel, soffs = workspace.scratch((1, 1, 1, L)), _NONE, _NONE

    def pack(w: np.ndarray) -> None:
        full = np.zeros((blocks * L, geo.kh, geo.kw), np.float32)
        full[:geo.m] = w.reshape(geo.m, geo.kh, geo.kw)
        for c, (j0, j1) in enumerate(cols.runs):
            taps = full[:, :, j0:j1].reshape(blocks, L, -1)  # row-major over the run
            wt[:, c, :taps.shape[2]] = taps.transpose(0, 2, 1)

    packed = Derived(pack)

    def prepare(inputs: Sequence[np.ndarray | None], outputs: Sequence[np.ndarray]) -> Thunk:
        x, w = inputs[0], inputs[1]
        assert x is not None and w is not None
        full0, full1 = args.fulls(inputs)
        call = fork_call(depthwise_nchw16c, nthreads, x, wt, bp, cols.offs, cols.widths,
                         cols.cls, lim, out_rows(outputs[0], geo.n * blocks, geo.pixels * L),
                         geo.sh, geo.sw, geo.top, geo.left, geo.oh, geo.ow, cols.qa, cols.qb,
                         band, nthreads, obuf.array, code, prm, full0, full1, vecs,
                         args.scratch.array, bounds, geo.kh, geo.dh, stage.array, rel, soffs,
                         streams(spec.outputs[0].shape))
        call = with_bias_copy(call, bias_of(inputs, geo, zeros), bp.reshape(-1))
        return with_registers(packed.before(w, call), args, inputs)

    return runner(prepare)


def clamp_bounds(epi: Epilogue) -> tuple[float, float] | None:
    """(lo, hi) when the epilogue is nothing, a Relu or a Clip of the convolution."""
    if epi.steps == 0:
        return -np.inf, np.inf
    if epi.steps == 1 and epi.code[0, 1] == ACC and epi.code[0, 0] in (RELU, CLIP):
        if epi.code[0, 0] == RELU:
            return 0.0, np.inf
        return float(epi.prm[0, 0]), float(epi.prm[0, 1])
    return None


def applies_blocked(spec: LayerSpec) -> bool:
    """A depthwise layer with input and output in the blocked layout."""
    g = conv2d(spec, blocked=True)
    return (g is not None and g.x_blocked and g.y_blocked and g.group == g.c == g.m
            and blocked_epilogue_ok(spec))


@tactic("Conv", "depthwise_nchw16c", applies=applies_blocked,
        native_epilogue=native_epilogue, priority=31)
def bind_depthwise_nchw16c(spec: LayerSpec) -> RunFn:
    return bind_conv(spec, _make, blocked=True)
