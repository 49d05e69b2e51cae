"""Convolution as a GEMM over kernel taps on channel blocks of 16: the ``taps_c16`` tactic.

The im2col tactic gathers every window into columns with the pixels on the vector lanes;
a strided layer's columns are scattered reads, and a plane narrower than the 32-pixel
strips wastes lanes. Here, as in onnxruntime's NCHWc convolution, the lanes hold output
channels: a band of input rows is staged once per task into a zero-bordered,
channels-innermost block (⌈c/16⌉ blocks of rows × columns × 16), and the GEMM's rows are
output pixels — 12 or 7 (``panels``) along an output row form a panel, whatever the
stride (at stride 1 they may run on across rows) — its K runs over (input block, kernel
tap, lane) through a table of tap offsets (gemm.micro_kernel_taps),
and its columns are two blocks of 16 output channels from weights packed once. Each strip
of 32 output channels is staged with its bias and leaves through the layer's epilogue as
NCHW rows (depthwise_c16.emit).

In the channel-blocked layout (``taps_nchw16c``, pydla.plan.layouts) the input's rows are
already blocks of 16 channels: staging is a copy of each row between the zero borders, and
the output blocks leave as they are (depthwise_c16.emit_blocked) — neither transposes, which
cost 15-25 % of a YOLOv8n layer alone.
"""

from __future__ import annotations

import math
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
from pydla.backends.cpu.kernels.conv_fast.depthwise_c16 import (
    L,
    _stage,
    emit,
    emit_blocked,
    streams,
)
from pydla.backends.cpu.kernels.conv_fast.depthwise_nchw16c import stage_blocked
from pydla.backends.cpu.kernels.conv_fast.epilogue import (
    Epilogue,
    EpilogueArgs,
    FusedStore,
    native_epilogue,
)
from pydla.backends.cpu.kernels.conv_fast.gemm import (
    KC,
    MR,
    MR7,
    NR,
    micro_kernel_taps,
    micro_kernel_taps7,
)
from pydla.backends.cpu.kernels.conv_fast.geometry import Conv2d, conv2d
from pydla.backends.cpu.registry import tactic
from pydla.backends.cpu.steps import Fixed
from pydla.backends.cpu.workspace import aligned_zeros

PIXELS = 192  # output pixels per band (a K slice of their windows stays in L2)
STAGE_BYTES = 768 * 1024  # a band's staged input (all channel blocks), kept in L2
MIN_K = 64  # c·kh·kw below this: direct_c16's broadcast loop is the better kernel


@njit
def _panel(sw: int, mr: int, src: int, tk: int, b: int, kc: int, out: int, c_half: int,
           bias: int, more: int, fin: int, y: int, y_half: int, res: int, lohi: int) -> None:
    # The row stride is a literal at each call (strides 1 and 2): LLVM then keeps the
    # row addresses in one base register; a variable stride spilled them (2× slower).
    # ``fin`` … ``lohi``: gemm.Final, the output's rows 16 floats apart.
    if mr == MR7:
        if sw == 1:
            micro_kernel_taps7(src, L * 4, tk, b, kc, out, L * 4, c_half, bias, more,
                               fin, y, L * 4, y_half, res, lohi)
        elif sw == 2:
            micro_kernel_taps7(src, 2 * L * 4, tk, b, kc, out, L * 4, c_half, bias, more,
                               fin, y, L * 4, y_half, res, lohi)
        else:
            micro_kernel_taps7(src, sw * L * 4, tk, b, kc, out, L * 4, c_half, bias, more,
                               fin, y, L * 4, y_half, res, lohi)
    elif sw == 1:
        micro_kernel_taps(src, L * 4, tk, b, kc, out, L * 4, c_half, bias, more,
                          fin, y, L * 4, y_half, res, lohi)
    elif sw == 2:
        micro_kernel_taps(src, 2 * L * 4, tk, b, kc, out, L * 4, c_half, bias, more,
                          fin, y, L * 4, y_half, res, lohi)
    else:
        micro_kernel_taps(src, sw * L * 4, tk, b, kc, out, L * 4, c_half, bias, more,
                          fin, y, L * 4, y_half, res, lohi)


@njit(cache=True, error_model="numpy")
def taps_c16(t: int, x: np.ndarray, bp: np.ndarray, bias: np.ndarray, y: np.ndarray, m: int,
             oh: int, ow: int, sh: int, sw: int, top: int, left: int, reach: int, band: int,
             rstride: int,
             groups: int, nthreads: int, taps: np.ndarray, stage: np.ndarray,
             flat: np.ndarray, cbuf: np.ndarray, acc: np.ndarray, code: np.ndarray,
             prm: np.ndarray, full0: np.ndarray, full1: np.ndarray, vecs: np.ndarray,
             scratch: np.ndarray, local: bool, mr: int, x_blocked: bool, blocked: bool,
             stream: bool, fused: int, res: int, lohi: np.ndarray) -> None:
    """x (n, c, h, w), or (n, ⌈c/16⌉, h, w·16) when ``x_blocked``; bp (strips, K, 32)
    packed weights, K = 16 · blocks · taps; bias (strips · 32); ``reach`` = (kh - 1)·dh + 1.
    Per thread: stage (blocks, rows_in + 1, cols, 16), flat (rows_in · w, 16) for _stage,
    cbuf (2 · strips per group, pad, 16) the staged output blocks, output row r from
    pixel r · rstride — rstride = cols where panels of mr pixels run on across rows over
    the staged width (stride 1; the pixels past ow are computed and dropped), else ow
    rounded up to mr, each row's last panel spilling into its padding — and acc, scratch
    for emit. y is (n · m, oh · ow), or (n · ⌈m/16⌉, oh · ow · 16) when ``blocked``.
    ``fused``, ``res``, ``lohi``: as in gemm_c16 — with rows padded to whole panels
    (rstride ≠ cols), a panel wholly inside its output row is stored into y by the last K
    slice; the rest of a row leaves through the stage."""
    n, c = x.shape[0], x.shape[1] * (L if x_blocked else 1)
    strips, k = bp.shape[0], bp.shape[1]
    kb, cols = stage.shape[1], stage.shape[3]
    bands = -(-oh // band)
    mb = -(-m // L)
    per_group = -(-strips // groups)
    tasks = n * bands * groups
    per = -(-tasks // nthreads)
    st, cb = stage[t], cbuf[t]
    sa, ca, ba, la = st.ctypes.data, cb.ctypes.data, bias.ctypes.data, lohi.ctypes.data
    pad = cb.shape[1]
    for task in range(t * per, min(tasks, (t + 1) * per)):
        img = task // (bands * groups)
        r0 = (task // groups) % bands * band
        s0 = task % groups * per_group
        nrows = min(oh, r0 + band) - r0
        span = (nrows - 1) * sh + reach
        for blk in range(kb):
            if x_blocked:
                stage_blocked(x, img, blk, r0 * sh - top, span, left, st[blk])
            else:
                _stage(x, img, blk * L, min(L, c - blk * L), r0 * sh - top, span, left,
                       st[blk], flat[t])
        s1 = min(strips, s0 + per_group)
        # K slices outermost: a slice of the staged windows stays in L2 while every
        # strip of the group streams its weights past it.
        for k0 in range(0, k, KC):
            kc = min(KC, k - k0)
            more = 1 if k0 else 0
            tk = taps.ctypes.data + (k0 // L) * 8
            for s in range(s0, s1):
                b = bp.ctypes.data + (s * k + k0) * NR * 4
                out = ca + (s - s0) * 2 * pad * L * 4
                if rstride == cols:  # stride 1: panels run on across rows
                    for v in range(0, (nrows - 1) * cols + ow, mr):
                        # sw (1), not a literal 1: numba would compile _panel twice
                        _panel(sw, mr, sa + v * L * 4, tk, b, kc, out + v * L * 4,
                               pad * L * 4, ba + s * NR * 4, more, 0, 0, 0, 0, 0)
                    continue
                fin = fused if k0 + kc == k else 0
                ya = y.ctypes.data + ((img * mb + 2 * s) * oh + r0) * ow * L * 4
                for r in range(nrows):  # panels of mr pixels along each output row
                    src = sa + r * sh * cols * L * 4
                    for q in range(0, ow, mr):
                        _panel(sw, mr, src + q * sw * L * 4, tk, b, kc,
                               out + (r * rstride + q) * L * 4, pad * L * 4,
                               ba + s * NR * 4, more,
                               fin if q + mr <= ow and 2 * s + 1 < mb else 0,
                               ya + (r * ow + q) * L * 4, oh * ow * L * 4, res, la)
        for s in range(s0, s1):
            # What is left in the stage: every row, or (fused) each row's ragged last
            # panel. An odd last block's strip is never fused: the micro-kernel stores
            # both halves, and the second lies past y.
            q1 = ow // mr * mr if fused and rstride != cols and 2 * s + 1 < mb else 0
            if q1 == ow:
                continue
            for half in range(2):
                c0 = (2 * s + half) * L
                if c0 >= m:
                    break
                ob = cb[(s - s0) * 2 + half]
                if blocked:
                    row = img * mb + 2 * s + half
                    if rstride == ow and q1 == 0:  # the band's rows are one run
                        emit_blocked(ob, nrows * ow, y, row, r0 * ow * L, code, prm,
                                     full0, full1, vecs, scratch[t], stream)
                        continue
                    for r in range(nrows):
                        emit_blocked(ob[r * rstride + q1:], ow - q1, y, row,
                                     ((r0 + r) * ow + q1) * L, code, prm, full0, full1, vecs,
                                     scratch[t], stream)
                    continue
                for r in range(nrows):
                    emit(ob[r * rstride:], min(L, m - c0), ow, y, img * m + c0,
                         (r0 + r) * ow, acc[t], local, code, prm, full0, full1, vecs,
                         scratch[t])


def applies(spec: LayerSpec) -> bool:
    g = conv2d(spec)
    return g is not None and g.group == 1 and g.c * g.kh * g.kw >= MIN_K


def applies_blocked(spec: LayerSpec) -> bool:
    """A convolution in the blocked layout from end to end, other than 1×1: there
    gemm_nchw16c reads the pixels in place (timed against it in the network, staged 1×1
    layers were noise-picked and cost ResNet-50 1 % at batch 1)."""
    g = conv2d(spec, blocked=True)
    return (g is not None and g.x_blocked and g.y_blocked and g.group == 1
            and g.kh * g.kw > 1 and g.c * g.kh * g.kw >= MIN_K and blocked_epilogue_ok(spec))


def panels(geo: Conv2d) -> tuple[int, bool]:
    """(rows of the micro-kernel, whether panels run on across rows). A row of 7, 14, 28
    or 56 pixels splits into whole panels of MR7; else stride 1 runs panels of MR across
    rows (only a band's last panel and the kernel's border columns are wasted), and a
    strided layer pads each row to whole panels of MR or MR7, whichever wastes fewer."""
    if geo.ow % MR7 == 0 and geo.ow % MR:
        return MR7, False
    if geo.sh == geo.sw == 1:
        return MR, True
    return (MR7 if -geo.ow % MR7 < -geo.ow % MR else MR), False


def plan(geo: Conv2d, nthreads: int) -> tuple[int, int, int, int]:
    """(band, strip groups, staged rows, staged columns)."""
    mr, across = panels(geo)
    # Panels within rows: wide enough for a row's last panel (its spill reads zeros);
    # across rows: just the windows, panels run on into the next row.
    span = geo.ow if across else -(-geo.ow // mr) * mr
    cols = (span - 1) * geo.sw + (geo.kw - 1) * geo.dw + 1
    kb = -(-geo.c // L)
    band = max(1, min(geo.oh, -(-PIXELS // geo.ow)))

    def rows_in(b: int) -> int:
        return (b - 1) * geo.sh + (geo.kh - 1) * geo.dh + 1

    while band > 1 and kb * rows_in(band) * cols * L * 4 > STAGE_BYTES:
        band -= 1
    # Even bands: 14 rows as 12 + 2 left one thread idle most of the layer (a stride-2
    # 256-channel layer at 28×28 took 0.90 ms; as 7 + 7, 0.6 ms).
    band = -(-geo.oh // -(-geo.oh // band))
    strips = -(-geo.m // (2 * L))
    tasks = geo.n * -(-geo.oh // band)
    groups = 1
    if tasks % nthreads and strips >= nthreads:
        groups = nthreads // math.gcd(tasks, nthreads)
    return band, groups, rows_in(band), cols


def _make(spec: LayerSpec, geo: Conv2d, epi: Epilogue, nthreads: int) -> RunFn:
    band, groups, rows_in, cols = plan(geo, nthreads)
    kb, mb = -(-geo.c // L), -(-geo.m // L)
    strips = -(-mb // 2)
    ntaps = geo.kh * geo.kw
    k = kb * ntaps * L
    # Across rows: virtual rows as wide as the staged ones; else rows padded to whole
    # panels.
    mr, across = panels(geo)
    rstride = cols if across else -(-geo.ow // mr) * mr
    pad = -(-band * rstride // mr) * mr
    bp = aligned_zeros((strips, k, NR))
    bias = aligned_zeros(strips * NR)
    # A spare row per block: the last panel of a stride-1 band reads up to mr - 1
    # pixels past its end.
    work = [workspace.scratch(shape) for shape in (
        (nthreads, kb, rows_in + 1, cols, L),  # stage
        (nthreads, rows_in * geo.w, L),  # flat
        (nthreads, 2 * -(-strips // groups), pad, L),  # cbuf
        (nthreads, pad * L))]  # acc
    block_bytes = (rows_in + 1) * cols * L * 4
    taps = np.array([blk * block_bytes + ((i * geo.dh) * cols + j * geo.dw) * L * 4
                     for blk in range(kb) for i in range(geo.kh) for j in range(geo.kw)],
                    np.int64)
    local = not epi.full and not epi.vec
    blocked = geo.y_blocked
    args = EpilogueArgs(epi, spec.outputs[0].shape, nthreads,
                        pad * (L if local or blocked else 1))
    zeros = np.zeros(geo.m, np.float32)
    zeros.flags.writeable = False  # a constant bias
    code, prm, vecs = epi.code, epi.prm, args.vecs
    stream = blocked and streams(spec.outputs[0].shape)
    store = FusedStore(epi, blocked and not stream)

    def pack(w: np.ndarray) -> None:
        wt = np.zeros((strips * NR, kb * L, ntaps), np.float32)
        wt[:geo.m, :geo.c] = w.reshape(geo.m, geo.c, ntaps)
        # B[(block·taps + tap)·16 + lane, out] = W[out, block·16 + lane, tap]
        b = wt.reshape(strips * NR, kb, L, ntaps).transpose(1, 3, 2, 0).reshape(k, -1)
        bp[:] = b.reshape(k, strips, NR).transpose(1, 0, 2)

    packed = Derived(pack)

    def prepare(inputs: Sequence[np.ndarray | None], outputs: Sequence[np.ndarray]) -> Thunk:
        x, w = inputs[0], inputs[1]
        assert x is not None and w is not None
        full0, full1 = args.fulls(inputs)
        stage, flat, cbuf, acc = (s.array for s in work)
        if blocked:  # taps_nchw16c: blocked in and out
            x = x.reshape(geo.n, kb, geo.h, geo.w * L)
            y = out_rows(outputs[0], geo.n * mb, geo.pixels * L)
        else:
            y = out_rows(outputs[0], geo.n * geo.m, geo.pixels)
        fused, res = store.at(y, full0)
        call = fork_call(taps_c16, nthreads, x, bp, bias, y, geo.m, geo.oh, geo.ow, geo.sh,
                         geo.sw, geo.top, geo.left, (geo.kh - 1) * geo.dh + 1, band, rstride,
                         groups, nthreads, taps, stage, flat, cbuf, acc, code, prm, full0, full1,
                         vecs, args.scratch.array, local, mr, Fixed(geo.x_blocked),
                         Fixed(blocked), stream, fused, res, store.lohi)
        call = with_bias_copy(call, bias_of(inputs, geo, zeros), bias)
        return with_registers(packed.before(w, call), args, inputs)

    return runner(prepare)


@tactic("Conv", "taps_c16", applies=applies, native_epilogue=native_epilogue, priority=12)
def bind_taps_c16(spec: LayerSpec) -> RunFn:
    return bind_conv(spec, _make)


@tactic("Conv", "taps_nchw16c", applies=applies_blocked, native_epilogue=native_epilogue,
        priority=12)
def bind_taps_nchw16c(spec: LayerSpec) -> RunFn:
    return bind_conv(spec, _make, blocked=True)
