"""Direct convolution for layers with few input channels (a network's stem: 3 channels,
3×3 to 7×7, usually stride 2) or a tiny output plane (squeeze-excitation blocks): the
``direct_c16`` tactic.

With K = c·kh·kw small, a GEMM spends its time on packing and on a short K loop per
micro-kernel call. Here the output is computed 16 output channels at a time: for every
output pixel, the K input values it reads are each spread over the lanes and multiplied
by that tap's 16 weights, accumulated in registers (``simd.tap_sum`` with broadcast) — the
input's NCHW planes read in place through a table of tap offsets into a zero-bordered band.
Blocks of 16 output channels leave in channels-innermost layout and are transposed to
NCHW rows through the layer's epilogue (as in ``depthwise_c16``) — or, as the first layer
of a channel-blocked network (pydla.plan.layouts), stored as they are.
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
from pydla.backends.cpu.kernels.conv_fast.depthwise_c16 import L, emit, emit_blocked, streams
from pydla.backends.cpu.kernels.conv_fast.epilogue import (
    Epilogue,
    EpilogueArgs,
    native_epilogue,
)
from pydla.backends.cpu.kernels.conv_fast.geometry import Conv2d, conv2d
from pydla.backends.cpu.kernels.conv_fast.simd import copy_bytes, tap_sum, zero_bytes
from pydla.backends.cpu.registry import tactic
from pydla.backends.cpu.steps import Fixed
from pydla.backends.cpu.workspace import aligned_zeros

MAX_K = 160  # c·kh·kw up to this: stems (3×3×3 = 27, 7×7×3 = 147) and thin layers
MAX_PIXELS = 4  # or output planes this small, whatever K
_OUT_BYTES = 64 * 1024  # a band's block of 16 output channels, kept in L1/L2

# Blocks of 16 output channels computed together (each input value loaded once for all):
# 1 to 4, with 4 pixels per call (up to 16 accumulators; 8 for two blocks) and a 1-pixel
# tail. Two blocks of 4 pixels kept 8 accumulators: one multiply-add's latency per tap
# (alone 216 GFLOP/s a core, 254 with 8 pixels; YOLOv8n's 16→32 3×3 at 80×80 0.227 ->
# 0.199 ms).
_PIXELS_2 = 8
_S4_1, _S1_1 = tap_sum(4, True, 1), tap_sum(1, True, 1)
_S8_2, _S4_2, _S1_2 = tap_sum(_PIXELS_2, True, 2), tap_sum(4, True, 2), tap_sum(1, True, 2)
_S4_3, _S1_3 = tap_sum(4, True, 3), tap_sum(1, True, 3)
_S4_4, _S1_4 = tap_sum(4, True, 4), tap_sum(1, True, 4)


@njit
def _taps(g: int, pixels: int, src: int, step: int, offs: int, w: int, taps: int, b: int,
          dst: int, dst_step: int) -> None:
    """``pixels`` (8 for two blocks, else 4; or 1) pixels of g blocks."""
    if g == 1:
        if pixels > 1:
            _S4_1(src, step, offs, w, taps, b, dst, dst_step)
        else:
            _S1_1(src, step, offs, w, taps, b, dst, dst_step)
    elif g == 2:
        if pixels == _PIXELS_2:
            _S8_2(src, step, offs, w, taps, b, dst, dst_step)
        elif pixels > 1:
            _S4_2(src, step, offs, w, taps, b, dst, dst_step)
        else:
            _S1_2(src, step, offs, w, taps, b, dst, dst_step)
    elif g == 3:
        if pixels > 1:
            _S4_3(src, step, offs, w, taps, b, dst, dst_step)
        else:
            _S1_3(src, step, offs, w, taps, b, dst, dst_step)
    elif pixels > 1:
        _S4_4(src, step, offs, w, taps, b, dst, dst_step)
    else:
        _S1_4(src, step, offs, w, taps, b, dst, dst_step)


@njit(inline="always", error_model="numpy")
def _stage(x: np.ndarray, img: int, iy0: int, rows: int, left: int, st: np.ndarray) -> None:
    """st[ci, r, q] = x[img, ci, iy0 + r, q - left], zero outside the image."""
    c, h, w = x.shape[1], x.shape[2], x.shape[3]
    cols = st.shape[2]
    width = min(w, cols - left)
    for ci in range(c):
        for r in range(rows):
            iy = iy0 + r
            row = st[ci, r].ctypes.data
            if iy < 0 or iy >= h:
                zero_bytes(row, cols * 4)
                continue
            zero_bytes(row, left * 4)
            zero_bytes(row + (left + width) * 4, (cols - left - width) * 4)
            copy_bytes(row + left * 4, x[img, ci, iy].ctypes.data, width * 4)


@njit(cache=True, error_model="numpy")
def direct_c16(t: int, x: np.ndarray, wp: np.ndarray, bp: np.ndarray, offs: np.ndarray,
               y: np.ndarray, kh: int, sh: int, sw: int, dh: int, top: int, left: int,
               oh: int, ow: int, band: int, nthreads: int, stage: np.ndarray,
               obuf: np.ndarray, acc: np.ndarray, code: np.ndarray, prm: np.ndarray,
               full0: np.ndarray, full1: np.ndarray, vecs: np.ndarray, scratch: np.ndarray,
               local: bool, m: int, blocked: bool, stream: bool) -> None:
    """x (n, c, h, w); wp (groups, K, g·16) and bp (groups, g·16) packed, g blocks of 16
    output channels per group; offs the K taps' byte offsets in a staged band; y (n·m,
    oh·ow), or (n·⌈m/16⌉, oh·ow·16) when ``blocked``. Per thread: stage (c, rows, cols),
    obuf (g, band·ow, 16), acc (band·ow·16). ``local``: the epilogue reads no extra
    inputs."""
    n = x.shape[0]
    groups, taps, g = wp.shape[0], wp.shape[1], wp.shape[2] // L
    bands = -(-oh // band)
    tasks = n * bands
    per = -(-tasks // nthreads)
    st, ob, a = stage[t], obuf[t], acc[t]
    row_bytes = st.shape[2] * 4
    block_bytes = ob.shape[1] * L * 4  # between the group's blocks in obuf
    for task in range(t * per, min(tasks, (t + 1) * per)):
        img, r0 = task // bands, task % bands * band
        rows = min(oh, r0 + band) - r0
        _stage(x, img, r0 * sh - top, (rows - 1) * sh + (kh - 1) * dh + 1, left, st)
        p = rows * ow
        for grp in range(groups):
            w0, b0 = wp[grp].ctypes.data, bp[grp].ctypes.data
            for r in range(rows):
                src = st.ctypes.data + r * sh * row_bytes
                dst = ob.ctypes.data + r * ow * L * 4
                q = 0
                if g == 2:
                    while q + _PIXELS_2 <= ow:
                        _taps(g, _PIXELS_2, src + q * sw * 4, sw * 4, offs.ctypes.data,
                              w0, taps, b0, dst + q * L * 4, block_bytes)
                        q += _PIXELS_2
                while q + 4 <= ow:
                    _taps(g, 4, src + q * sw * 4, sw * 4, offs.ctypes.data, w0, taps,
                          b0, dst + q * L * 4, block_bytes)
                    q += 4
                while q < ow:
                    _taps(g, 1, src + q * sw * 4, sw * 4, offs.ctypes.data, w0, taps,
                          b0, dst + q * L * 4, block_bytes)
                    q += 1
            for k in range(g):
                c0 = (grp * g + k) * L
                if c0 >= m:
                    break
                if blocked:
                    emit_blocked(ob[k], p, y, img * groups * g + grp * g + k, r0 * ow * L,
                                 code, prm, full0, full1, vecs, scratch[t], stream)
                    continue
                emit(ob[k], min(L, m - c0), p, y, img * m + c0, r0 * ow, a, local, code,
                     prm, full0, full1, vecs, scratch[t])


def applies(spec: LayerSpec) -> bool:
    g = conv2d(spec)
    # Few input channels, or a tiny output plane (squeeze-excitation's 1×1 convolutions
    # on pooled vectors: a GEMV, where a GEMM would fill its 32-pixel strips with padding).
    return (g is not None and g.group == 1 and g.m >= 4
            and (g.c * g.kh * g.kw <= MAX_K or g.pixels <= MAX_PIXELS))


def _make(spec: LayerSpec, geo: Conv2d, epi: Epilogue, nthreads: int) -> RunFn:
    cols = (geo.ow - 1) * geo.sw + (geo.kw - 1) * geo.dw + 1
    band = max(1, min(geo.oh, _OUT_BYTES // (geo.ow * L * 4)))
    if geo.n * -(-geo.oh // band) < 2 * nthreads:  # work for every thread
        band = max(1, -(-geo.n * geo.oh // (2 * nthreads)))
    rows_in = (band - 1) * geo.sh + (geo.kh - 1) * geo.dh + 1
    blocks = -(-geo.m // L)
    g = max(d for d in (1, 2, 3, 4) if blocks % d == 0)  # blocks per group, none wasted
    groups = blocks // g
    k = geo.c * geo.kh * geo.kw
    work = [workspace.scratch(shape) for shape in (
        (nthreads, geo.c, rows_in, cols),  # stage
        (nthreads, g, band * geo.ow, L),  # obuf
        (nthreads, band * geo.ow * L))]  # acc
    offs = np.array([((ci * rows_in + i * geo.dh) * cols + j * geo.dw) * 4
                     for ci in range(geo.c) for i in range(geo.kh) for j in range(geo.kw)],
                    np.int64)
    wp = aligned_zeros((groups, k, g * L))
    bp = aligned_zeros((groups, g * L))
    local = not epi.full and not epi.vec
    blocked = geo.y_blocked
    args = EpilogueArgs(epi, spec.outputs[0].shape, nthreads,
                        band * geo.ow * (L if local or blocked else 1))
    y_shape = (geo.n * blocks, geo.pixels * L) if blocked else (geo.n * geo.m, geo.pixels)
    zeros = np.zeros(geo.m, np.float32)
    zeros.flags.writeable = False  # a constant bias
    code, prm, vecs = epi.code, epi.prm, args.vecs

    def pack(w: np.ndarray) -> None:
        flat = np.zeros((blocks * L, k), np.float32)
        flat[:geo.m] = w.reshape(geo.m, k)
        # wp[group, tap, block·16 + lane] = w[(group·g + block)·16 + lane, tap]
        wp[:] = flat.reshape(groups, g * L, k).transpose(0, 2, 1)

    packed = Derived(pack)

    def prepare(inputs: Sequence[np.ndarray | None], outputs: Sequence[np.ndarray]) -> Thunk:
        x, w = inputs[0], inputs[1]
        assert x is not None and w is not None
        full0, full1 = args.fulls(inputs)
        stage, obuf, acc = (s.array for s in work)
        call = fork_call(direct_c16, nthreads, x, wp, bp, offs, out_rows(outputs[0], *y_shape),
                         geo.kh, geo.sh, geo.sw, geo.dh, geo.top, geo.left, geo.oh, geo.ow, band,
                         nthreads, stage, obuf, acc, code, prm, full0, full1, vecs,
                         args.scratch.array,
                         local, geo.m, Fixed(blocked), blocked and streams(spec.outputs[0].shape))
        call = with_bias_copy(call, bias_of(inputs, geo, zeros), bp.reshape(-1))
        return with_registers(packed.before(w, call), args, inputs)

    return runner(prepare)


def applies_blocked(spec: LayerSpec) -> bool:
    """A stem from a planar input into the blocked layout."""
    g = conv2d(spec, blocked=True)
    return (g is not None and not g.x_blocked and g.y_blocked and g.group == 1
            and g.c * g.kh * g.kw <= MAX_K and blocked_epilogue_ok(spec))


@tactic("Conv", "direct_c16", applies=applies, native_epilogue=native_epilogue, priority=20)
def bind_direct_c16(spec: LayerSpec) -> RunFn:
    return bind_conv(spec, _make)


@tactic("Conv", "direct_nchw16c", applies=applies_blocked, native_epilogue=native_epilogue,
        priority=20)
def bind_direct_nchw16c(spec: LayerSpec) -> RunFn:
    return bind_conv(spec, _make, blocked=True)
