"""Depthwise convolution on channel blocks of 16: the ``depthwise_c16`` tactic.

The plane-at-a-time kernel (conv_fast.depthwise) vectorizes along a row, which pays on
large planes; on the small planes of a network's late stages (7×7, 14×14) its border
handling and short rows dominate, and a strided plane needs extra passes. Here 16
channels are staged, band by band of output rows, into a zero-bordered (rows, cols, 16)
block — channels innermost, as in onnxruntime's NCHWc — so every tap of every output
pixel is one 16-lane multiply-add whatever the stride, dilation or plane size. The
band is written back to NCHW rows, through the layer's epilogue while it is in cache.
(In the channel-blocked layout depthwise_nchw16c reads its input in place instead.)
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
    out_rows,
    runner,
    with_bias_copy,
    with_registers,
)
from pydla.backends.cpu.kernels.conv_fast.depthwise import applies
from pydla.backends.cpu.kernels.conv_fast.epilogue import (
    Epilogue,
    EpilogueArgs,
    native_epilogue,
    run_epilogue,
    run_epilogue_to,
)
from pydla.backends.cpu.kernels.conv_fast.geometry import Conv2d
from pydla.backends.cpu.kernels.conv_fast.simd import (
    copy_bytes,
    store_stream,
    tap_sum,
    transpose16,
    zero_bytes,
)
from pydla.backends.cpu.registry import tactic
from pydla.backends.cpu.workspace import aligned_zeros

L = 16  # channels per block: one AVX-512 vector of float32
_STAGE_BYTES = 96 * 1024  # a band's staged input; with its output it stays in L2


# Eight pixels a call: eight independent accumulators hide the FMA latency along the
# taps (four left the FMA units half idle).
_sum8, _sum4, _sum1 = tap_sum(8), tap_sum(4), tap_sum(1)


@njit(inline="always", error_model="numpy")
def _stage(x: np.ndarray, img: int, c0: int, nl: int, iy0: int, rows: int, left: int,
           st: np.ndarray, flat: np.ndarray) -> None:
    """st[r, q, l] = x[img, c0 + l, iy0 + r, q - left], zero outside the image, transposed
    16 pixels × 16 channels at a time: straight into the staged rows when they are whole
    vectors wide, else first into ``flat`` (pixels, 16) — consecutive short rows as one
    run — and copied from there row by row between the zero borders."""
    h, w = x.shape[2], x.shape[3]
    cols = st.shape[1]
    a, b = max(0, iy0), min(h, iy0 + rows)  # input rows inside the image
    width = min(w, cols - left)
    direct = nl == L and width % L == 0
    if not direct:
        n = max(0, b - a) * w
        k = 0
        if nl == L:
            src = x.ctypes.data + (((img * x.shape[1] + c0) * h + a) * w) * 4
            while k + L <= n:
                transpose16(src + k * 4, h * w * 4, flat.ctypes.data + k * L * 4, L * 4, 0)
                k += L
        if nl < L:  # lanes past the last channel (scratch holds other layers' data)
            for p in range(n):  # loops: a 2-D slice fill stays scalar in a task
                for lane in range(nl, L):
                    flat[p, lane] = 0
        for lane in range(nl):
            plane = x[img, c0 + lane].reshape(-1)
            for p in range(k, n):
                flat[p, lane] = plane[a * w + p]
    line = cols * L
    for r in range(rows):
        iy = iy0 + r
        row = st.ctypes.data + r * line * 4
        if iy < a or iy >= b:
            zero_bytes(row, line * 4)
            continue
        zero_bytes(row, left * L * 4)
        zero_bytes(row + (left + width) * L * 4, (cols - left - width) * L * 4)
        if direct:
            src = x.ctypes.data + (((img * x.shape[1] + c0) * h + iy) * w) * 4
            for q in range(0, width, L):
                transpose16(src + q * 4, h * w * 4, row + (left + q) * L * 4, L * 4, 0)
        else:
            copy_bytes(row + left * L * 4, flat.ctypes.data + (iy - a) * w * L * 4,
                       width * L * 4)


@njit(inline="always", error_model="numpy")
def _taps(st: np.ndarray, wb: np.ndarray, bb: np.ndarray, offs: np.ndarray, ob: np.ndarray,
          rows: int, ow: int, sh: int, sw: int) -> None:
    """ob[r·ow + q, :] = bb + Σ_t wb[t, :] · st[r·sh, q·sw, :] shifted by tap t's offset."""
    row_bytes = st.shape[1] * L * 4
    step = sw * L * 4
    w0, b0, o0, t = wb.ctypes.data, bb.ctypes.data, offs.ctypes.data, offs.shape[0]
    for r in range(rows):
        src = st.ctypes.data + r * sh * row_bytes
        dst = ob.ctypes.data + r * ow * L * 4
        q = 0
        while q + 8 <= ow:
            _sum8(src + q * step, step, o0, w0, t, b0, dst + q * L * 4, 0)
            q += 8
        while q + 4 <= ow:
            _sum4(src + q * step, step, o0, w0, t, b0, dst + q * L * 4, 0)
            q += 4
        while q < ow:
            _sum1(src + q * step, step, o0, w0, t, b0, dst + q * L * 4, 0)
            q += 1


@njit(inline="always", error_model="numpy")
def unstage(ob: np.ndarray, nl: int, p: int, dst: np.ndarray, d0: int) -> None:
    """dst[l, d0:d0 + p] = ob[:p, l] for l < nl (dst rows contiguous)."""
    k = 0
    if nl == L:
        while k + L <= p:
            transpose16(ob.ctypes.data + k * L * 4, L * 4,
                        dst.ctypes.data + (d0 + k) * 4, dst.shape[1] * 4, 0)
            k += L
    for lane in range(nl):
        out = dst[lane]
        for j in range(k, p):
            out[d0 + j] = ob[j, lane]


@njit(error_model="numpy")
def emit(ob: np.ndarray, nl: int, p: int, y: np.ndarray, row0: int, col0: int,
         a: np.ndarray, local: bool, code: np.ndarray, prm: np.ndarray, full0: np.ndarray,
         full1: np.ndarray, vecs: np.ndarray, scratch: np.ndarray) -> None:
    """A block of nl ≤ 16 channels (ob: p pixels × 16) to its NCHW rows y[row0 + l,
    col0:col0 + p] through the layer's epilogue; ``a`` (p·16 floats) is scratch. An
    epilogue reading no extra inputs (``local``) runs on the whole block in its layout,
    others on each channel's row after the transpose."""
    if code.shape[0] == 0:
        unstage(ob, nl, p, y[row0:row0 + nl], col0)
    elif local:
        run_epilogue(ob.reshape(-1)[:p * L], a.reshape(1, -1), 0, 0, code, prm, full0, full1,
                     vecs, scratch)
        unstage(a.reshape(-1, L), nl, p, y[row0:row0 + nl], col0)
    else:
        lanes = a.reshape(L, -1)
        unstage(ob, nl, p, lanes, 0)
        for lane in range(nl):
            run_epilogue(lanes[lane, :p], y, row0 + lane, col0, code, prm, full0, full1, vecs,
                         scratch)


@njit(error_model="numpy")
def emit_blocked(ob: np.ndarray, p: int, y: np.ndarray, row: int, col0: int,
                 code: np.ndarray, prm: np.ndarray, full0: np.ndarray, full1: np.ndarray,
                 vecs: np.ndarray, scratch: np.ndarray, stream: bool) -> None:
    """A block of 16 channels (ob: p pixels × 16) to its run y[row, col0:col0 + 16·p] of
    a blocked output (y: (images·blocks, pixels·16)) through the layer's epilogue, whose
    registers are full-shape blocked tensors addressed the same way. Lanes past the last
    channel hold what zero weights and bias give, so they stay finite. With ``stream``
    (an output larger than the caches: ``streams``) the run is stored around the caches,
    from the epilogue's last scratch row, where the run is 64-byte aligned."""
    src = ob.reshape(-1)[:p * L]
    run = y[row, col0:col0 + p * L]
    if stream and run.ctypes.data % 64 == 0:
        steps = code.shape[0]
        if steps:
            out = scratch[steps - 1, :p * L]
            run_epilogue_to(src, out, row, col0, code, prm, full0, full1, vecs, scratch)
            src = out
        store_stream(src.ctypes.data, run.ctypes.data, p)
    elif code.shape[0] == 0:
        copy_bytes(run.ctypes.data, src.ctypes.data, p * L * 4)
    else:
        run_epilogue(src, y, row, col0, code, prm, full0, full1, vecs, scratch)


# Blocked outputs at least this large are stored around the caches (emit_blocked): they
# do not stay in the last-level cache (32 MiB here, shared) for the next layer anyway, and
# a normal store first reads every line it writes. ResNet-50's 1×1 layers at batch 8
# (25.7 MB out): 2.47 -> 1.90 ms (64 -> 256 channels), 3.15 -> 2.67 (256 -> 64); outputs
# that fit the cache lose (the next layer would find them there).
STREAM_BYTES = 16 << 20


def streams(out_shape: tuple[int, ...]) -> bool:
    """Whether a blocked output of this shape is stored around the caches."""
    return int(np.prod(out_shape, dtype=np.int64)) * 4 >= STREAM_BYTES


@njit(cache=True, error_model="numpy")
def depthwise_c16(t: int, x: np.ndarray, wp: np.ndarray, bp: np.ndarray, offs: np.ndarray,
                  y: np.ndarray, kh: int, sh: int, sw: int, dh: int, top: int, left: int,
                  oh: int, ow: int, band: int, nthreads: int, stage: np.ndarray,
                  flat: np.ndarray, obuf: np.ndarray, acc: np.ndarray, code: np.ndarray,
                  prm: np.ndarray, full0: np.ndarray, full1: np.ndarray, vecs: np.ndarray,
                  scratch: np.ndarray, local: bool) -> None:
    """x (n, c, h, w); wp (blocks, taps, 16) and bp (blocks, 16) packed; offs the taps'
    byte offsets in a staged band; y (n·c, oh·ow). Per thread: stage (rows, cols, 16),
    flat (rows·w, 16), obuf (band·ow, 16), acc (band·ow·16). ``local``: the
    epilogue reads no extra inputs."""
    n, c = x.shape[0], x.shape[1]
    blocks = wp.shape[0]
    bands = -(-oh // band)
    tasks = n * blocks * bands
    per = -(-tasks // nthreads)
    st, ob, a = stage[t], obuf[t], acc[t]
    for task in range(t * per, min(tasks, (t + 1) * per)):
        img = task // (blocks * bands)
        blk = (task // bands) % blocks
        r0 = (task % bands) * band
        rows = min(oh, r0 + band) - r0
        c0 = blk * L
        nl = min(L, c - c0)
        span = (rows - 1) * sh + (kh - 1) * dh + 1
        _stage(x, img, c0, nl, r0 * sh - top, span, left, st, flat[t])
        _taps(st, wp[blk], bp[blk], offs, ob, rows, ow, sh, sw)
        emit(ob, nl, rows * ow, y, img * c + c0, r0 * ow, a, local, code, prm, full0,
             full1, vecs, scratch[t])


def _band(geo: Conv2d, cols: int, nthreads: int) -> int:
    """Output rows per band: the staged input within _STAGE_BYTES, and enough bands for
    every thread to have work when there are few channel blocks."""
    per_row = cols * L * 4 * geo.sh
    band = max(1, (_STAGE_BYTES // per_row) - geo.kh)
    blocks = geo.n * -(-geo.m // L)
    if blocks < 2 * nthreads:
        band = min(band, max(1, -(-geo.oh // -(-2 * nthreads // blocks))))
    return min(band, geo.oh)


def _make(spec: LayerSpec, geo: Conv2d, epi: Epilogue, nthreads: int) -> RunFn:
    cols = (geo.ow - 1) * geo.sw + (geo.kw - 1) * geo.dw + 1
    band = _band(geo, cols, nthreads)
    rows_in = (band - 1) * geo.sh + (geo.kh - 1) * geo.dh + 1
    blocks = -(-geo.m // L)
    work = [workspace.scratch(shape) for shape in (
        (nthreads, rows_in, cols, L),  # stage
        (nthreads, rows_in * geo.w, L),  # flat: _stage's transposes
        (nthreads, band * geo.ow, L),  # obuf
        (nthreads, band * geo.ow * L))]  # acc
    offs = np.array([(i * geo.dh * cols + j * geo.dw) * L * 4
                     for i in range(geo.kh) for j in range(geo.kw)], np.int64)
    wp = aligned_zeros((blocks, geo.kh * geo.kw, L))
    bp = aligned_zeros((blocks, L))
    local = not epi.full and not epi.vec
    args = EpilogueArgs(epi, spec.outputs[0].shape, nthreads,
                        band * geo.ow * (L if local else 1))
    zeros = np.zeros(geo.m, np.float32)
    zeros.flags.writeable = False  # a constant bias
    code, prm, vecs = epi.code, epi.prm, args.vecs

    def pack(w: np.ndarray) -> None:
        flat = np.zeros((blocks * L, geo.kh * geo.kw), np.float32)
        flat[:geo.m] = w.reshape(geo.m, -1)
        wp[:] = flat.reshape(blocks, L, -1).transpose(0, 2, 1)

    packed = Derived(pack)

    def prepare(inputs: Sequence[np.ndarray | None], outputs: Sequence[np.ndarray]) -> Thunk:
        x, w = inputs[0], inputs[1]
        assert x is not None and w is not None
        full0, full1 = args.fulls(inputs)
        stage, flat, obuf, acc = (s.array for s in work)
        y = out_rows(outputs[0], geo.n * geo.m, geo.pixels)
        call = fork_call(depthwise_c16, nthreads, x, wp, bp, offs, y, geo.kh, geo.sh, geo.sw,
                         geo.dh, geo.top, geo.left, geo.oh, geo.ow, band, nthreads, stage, flat,
                         obuf, acc, code, prm, full0, full1, vecs, args.scratch.array, local)
        call = with_bias_copy(call, bias_of(inputs, geo, zeros), bp.reshape(-1))
        return with_registers(packed.before(w, call), args, inputs)

    return runner(prepare)


@tactic("Conv", "depthwise_c16", applies=applies, native_epilogue=native_epilogue, priority=31)
def bind_depthwise_c16(spec: LayerSpec) -> RunFn:
    return bind_conv(spec, _make)

