"""Direct convolution for few output (or input) channels per group, tactics ``direct_planes``
and ``direct_planes_nchw16c`` (either side in the channel-blocked layout):
long 1-D filters on one channel (a CQT front end's 256-tap ``conv1d`` at stride 2), a
layer with one or a few output channels (a 8→1 5×5 or 32→1 7×3 head), planar or in the
channel-blocked layout.

The GEMM tactics pad such a layer to their panels: one output channel fills one lane of
16 (``taps_c16``, blocked), a 1-row image of 172 pixels with 36 channels and K = 256 is a
tiny GEMM behind a large staging pass (``im2col``). Here the input is first split into
zero-bordered phase planes (conv_fast.phases: every tap of any stride and dilation is a
shifted unit-stride run), one call shared by every output channel; then each thread takes
runs of output positions of one output channel — whole rows while they fit ``RUN``
values, else pieces of one row — and sums the taps over them four at a time, vectorized
along the run (the run stays in L1 while all its taps pass). Work is proportional to the
real channels: a blocked input's padding lanes are never read, a blocked output's are
written as zeros.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numba import njit

from pydla.backends.base import LayerSpec, RunFn
from pydla.backends.cpu import workspace
from pydla.backends.cpu.fork import fork_call
from pydla.backends.cpu.kernels.conv_fast.binding import (
    Thunk,
    bias_of,
    bind_conv,
    runner,
    with_registers,
)
from pydla.backends.cpu.kernels.conv_fast.epilogue import (
    Epilogue,
    EpilogueArgs,
    compile_epilogue,
    native_epilogue,
    run_epilogue,
    run_epilogue_to,
)
from pydla.backends.cpu.kernels.conv_fast.geometry import BLOCK, Conv2d, conv2d
from pydla.backends.cpu.kernels.conv_fast.phases import layout, split, tap
from pydla.backends.cpu.kernels.conv_fast.run_taps import run_taps
from pydla.backends.cpu.kernels.conv_fast.simd import ACC_VECTORS, copy_bytes
from pydla.backends.cpu.registry import tactic
from pydla.backends.cpu.workspace import aligned_zeros
from pydla.errors import KernelError

RUN = 1024  # output positions summed per pass: 4 KiB of accumulators, in L1 with the taps
MAX_PLANES_BYTES = 64 << 20  # the phase planes of every input channel, kept by the layer
SPLIT_ALONE = 1 << 19  # input values split on the calling thread
FEW = 8  # output channels per group at most (or input channels per group at most 2)


@njit(cache=True, error_model="numpy")
def split_task(t: int, x: np.ndarray, planes: np.ndarray, used: np.ndarray, sh: int, sw: int,
               top: int, left: int, wq: int, nthreads: int) -> None:
    """x (n, ⌈c/b⌉, h, w, b) with b 1 (planar) or 16 (blocked); planes (n·c, sh·sw, size):
    thread t scatters its share of the n·c channel planes (borders stay zero) — of a
    blocked input, its share of the rows, every channel of a row in turn while the row is
    in cache (channel by channel, each pass read the whole input for 1/16 of its lines:
    basic-pitch's 8-channel 172×264 input took ≈ 1 ms)."""
    b = x.shape[4]
    n, h = x.shape[0], x.shape[2]
    c = planes.shape[0] // n
    tasks = n * c if b == 1 else n * h
    per = -(-tasks // nthreads)
    for task in range(t * per, min(tasks, (t + 1) * per)):
        if b == 1:
            img, ch = task // c, task % c
            split(x[img, ch, :, :, 0], planes[task], sh, sw, top, left, wq, used)
            continue
        img, r = task // h, task % h
        for ch in range(c):  # row r alone: as the plane's first row, `top` moved by r
            split(x[img, ch // b, r:r + 1, :, ch % b], planes[img * c + ch], sh, sw, top + r,
                  left, wq, used)


# Output channels summed together (their runs share each loaded input run), and vectors
# of 16 positions per call: the accumulators fill three quarters of the vector registers.
CHUNK = 4
_V4 = max(1, min(4, ACC_VECTORS // CHUNK))
_V1 = max(1, min(8, ACC_VECTORS))
_taps4, _taps4_one = run_taps(_V4, CHUNK), run_taps(1, CHUNK)
_taps1, _taps1_one = run_taps(_V1, 1), run_taps(1, 1)


@njit(cache=True)
def _sum_chunk(src: int, offs: int, w: int, taps: int, wstep: int, bias: int, dst: int,
               dst_step: int, vectors: int) -> None:
    """CHUNK channels' runs of ``vectors`` × 16 positions (run_taps; byte addresses)."""
    v = 0
    while v + _V4 <= vectors:
        _taps4(src + 64 * v, offs, w, taps, wstep, bias, dst + 64 * v, dst_step)
        v += _V4
    while v < vectors:
        _taps4_one(src + 64 * v, offs, w, taps, wstep, bias, dst + 64 * v, dst_step)
        v += 1


@njit(cache=True)
def _sum_one(src: int, offs: int, w: int, taps: int, bias: int, dst: int,
             vectors: int) -> None:
    """One channel's run of ``vectors`` × 16 positions."""
    v = 0
    while v + _V1 <= vectors:
        _taps1(src + 64 * v, offs, w, taps, 0, bias, dst + 64 * v, 0)
        v += _V1
    while v < vectors:
        _taps1_one(src + 64 * v, offs, w, taps, 0, bias, dst + 64 * v, 0)
        v += 1


@njit(cache=True, error_model="numpy")
def direct_task(t: int, pf: np.ndarray, toff: np.ndarray, wt: np.ndarray, bias: np.ndarray,
                y2: np.ndarray, y3: np.ndarray, blocked: int, c: int, m: int, group: int,
                oh: int, ow: int, wq: int, plane_len: int, rows: int, segs: int, seg: int,
                nthreads: int, grid: np.ndarray, acc: np.ndarray, res: np.ndarray,
                code: np.ndarray, prm: np.ndarray, full0: np.ndarray, full1: np.ndarray,
                vecs: np.ndarray, scratch: np.ndarray) -> None:
    """pf the phase planes (n·c planes of plane_len, then ≥ 16 floats of slack); toff the
    taps' byte offsets in a group's planes, wt (m, taps); y2 (n·m, oh·ow) planar rows
    (blocked: unused), y3 (n·⌈m/16⌉, oh·ow, b). A unit: CHUNK (or one) output channels of
    a group over `rows` whole output rows (segs 1) or a piece of `seg` columns of one row;
    grid (threads, CHUNK, run rounded up to 16)."""
    images = y3.shape[0] // (m if blocked == 0 else -(-m // 16))
    cg, mg = c // group, m // group
    chunks = mg // CHUNK + mg % CHUNK  # per group: whole chunks, then single channels
    units_plane = -(-oh // rows) if segs == 1 else oh * segs
    units = images * group * chunks * units_plane
    per = -(-units // nthreads)
    epilogue = code.shape[0] > 0
    taps = toff.shape[0]
    g_all, a_all, r_all = grid[t], acc[t], res[t]
    gstep = g_all.shape[1] * 4
    for u in range(t * per, min(units, (t + 1) * per)):
        plane, k = u // units_plane, u % units_plane
        img, rest = plane // (group * chunks), plane % (group * chunks)
        grp, q = rest // chunks, rest % chunks
        first = grp * mg + (q * CHUNK if q < mg // CHUNK else (mg // CHUNK) * CHUNK
                            + q - mg // CHUNK)
        count = CHUNK if q < mg // CHUNK else 1
        if segs == 1:
            r0, r1, j0, j1 = k * rows, min(oh, (k + 1) * rows), 0, ow
        else:
            r0, j0 = k // segs, (k % segs) * seg
            r1, j1 = r0 + 1, min(ow, (k % segs) * seg + seg)
        width = j1 - j0
        glen = (r1 - r0 - 1) * wq + width
        at = (img * c + grp * cg) * plane_len + r0 * wq + j0
        src = pf.ctypes.data + at * 4
        vectors = -(-glen // 16)
        if count == CHUNK:
            _sum_chunk(src, toff.ctypes.data, wt[first].ctypes.data, taps, taps * 4,
                       bias[first:].ctypes.data, g_all.ctypes.data, gstep, vectors)
        else:
            _sum_one(src, toff.ctypes.data, wt[first].ctypes.data, taps,
                     bias[first:].ctypes.data, g_all.ctypes.data, vectors)
        cnt = (r1 - r0) * width
        o0 = r0 * ow + j0  # whole rows or one row's piece: one run of the output
        for ch in range(count):
            mm = first + ch
            g = g_all[ch]
            yrow = img * m + mm
            if blocked == 0 and not epilogue:
                for r in range(r1 - r0):
                    copy_bytes(y2[yrow].ctypes.data + (o0 + r * ow) * 4,
                               g.ctypes.data + r * wq * 4, width * 4)
                continue
            a = a_all[:cnt]
            for r in range(r1 - r0):
                copy_bytes(a.ctypes.data + r * width * 4, g.ctypes.data + r * wq * 4,
                           width * 4)
            if blocked == 0:
                run_epilogue(a, y2, yrow, o0, code, prm, full0, full1, vecs, scratch[t])
                continue
            out = a
            if epilogue:  # unary steps only (applies): no register reads the blocked layout
                out = r_all[:cnt]
                run_epilogue_to(a, out, yrow, o0, code, prm, full0, full1, vecs, scratch[t])
            blk = y3[img * (y3.shape[0] // images) + mm // 16]
            lane = mm % 16
            for q2 in range(cnt):
                blk[o0 + q2, lane] = out[q2]
            if mm == m - 1 and m % 16:  # the last block's lanes past m: zeros, never data
                for q2 in range(cnt):
                    for ln in range(m % 16, 16):
                        blk[o0 + q2, ln] = 0.0


def _fits(geo: Conv2d) -> bool:
    wq, size = layout(geo)
    return geo.n * geo.c * geo.sh * geo.sw * size * 4 <= MAX_PLANES_BYTES


def _applies(spec: LayerSpec, blocked: bool) -> bool:
    geo = conv2d(spec, blocked=blocked)
    if geo is None or (blocked and not (geo.x_blocked or geo.y_blocked)) or not _fits(geo):
        return False
    cg, mg = geo.c // geo.group, geo.m // geo.group
    if (mg > FEW and cg > 2) or (geo.group > 1 and cg == 1):
        return False  # many channels: the GEMM tactics; depthwise: its own tactics
    if geo.y_blocked:  # the epilogue runs on planar runs: it may read no other tensor
        epi = compile_epilogue(spec)
        return epi is not None and not epi.full and not epi.vec
    return True


def applies(spec: LayerSpec) -> bool:
    return _applies(spec, blocked=False)


def applies_blocked(spec: LayerSpec) -> bool:
    return _applies(spec, blocked=True)


def taps_table(geo: Conv2d, wq: int, size: int, layer: str) -> np.ndarray:
    """Each tap's (input channel of its group, i, k) offset into the group's flat planes
    for output grid position 0; every run the kernel reads is checked to stay inside."""
    nph = geo.sh * geo.sw
    cg = geo.c // geo.group
    toff = np.empty(cg * geo.kh * geo.kw, np.int64)
    last = (geo.oh - 1) * wq + geo.ow  # grid positions a unit reads: [0, last)
    t = 0
    for ci in range(cg):
        for i in range(geo.kh):
            for k in range(geo.kw):
                phase, off = tap(i, k, geo, wq)
                if off + last > size:
                    raise KernelError(layer, "Conv", f"tap ({i}, {k}) reads past its phase "
                                      f"plane ({off} + {last} > {size})")
                toff[t] = (ci * nph + phase) * size + off
                t += 1
    return toff


def _units(geo: Conv2d, wq: int) -> tuple[int, int, int]:
    """(rows, segs, seg): whole rows per unit where a row fits RUN, else a row in segs
    pieces of seg columns."""
    if geo.ow <= RUN:
        return max(1, (RUN - geo.ow) // wq + 1), 1, geo.ow
    segs = -(-geo.ow // RUN)
    return 1, segs, -(-geo.ow // segs)


def _make(spec: LayerSpec, geo: Conv2d, epi: Epilogue, nthreads: int) -> RunFn:
    wq, size = layout(geo)
    toff = taps_table(geo, wq, size, spec.name)
    rows, segs, seg = _units(geo, wq)
    nph = geo.sh * geo.sw
    plane_len = nph * size
    # The phase planes' borders are zeroed once, here, and never written: not scratch. The
    # slack after the last plane: a run rounded up to whole vectors reads ≤ 15 floats on.
    flat = aligned_zeros(geo.n * geo.c * plane_len + 16)
    planes = flat[:geo.n * geo.c * plane_len].reshape(geo.n * geo.c, nph, size)
    used = np.ones(nph, np.bool_)
    run = max((rows - 1) * wq + geo.ow, seg)
    grid = workspace.scratch((nthreads, CHUNK, -(-run // 16) * 16))
    acc = workspace.scratch((nthreads, RUN))
    res = workspace.scratch((nthreads, RUN if geo.y_blocked else 1))
    args = EpilogueArgs(epi, spec.outputs[0].shape, nthreads, RUN)
    zeros = np.zeros(geo.m, np.float32)
    code, prm, vecs = epi.code, epi.prm, args.vecs
    xb = BLOCK if geo.x_blocked else 1
    cb = -(-geo.c // xb)
    ym = -(-geo.m // BLOCK) if geo.y_blocked else geo.m
    yb = BLOCK if geo.y_blocked else 1
    # A small input is split on the calling thread: a second fork and join per layer cost
    # more than the copy (≈ 1 ns a value) on a shared machine, where a join waits for a
    # descheduled worker.
    values = geo.n * geo.c * geo.h * geo.w
    split_tasks = geo.n * (geo.h if geo.x_blocked else geo.c)
    split_threads = 1 if values <= SPLIT_ALONE else min(nthreads, split_tasks)
    toff_bytes = toff * 4

    def prepare(inputs: Sequence[np.ndarray | None], outputs: Sequence[np.ndarray]) -> Thunk:
        x, w = inputs[0], inputs[1]
        assert x is not None and w is not None
        out = outputs[0]
        if out.dtype != np.float32 or not out.flags.c_contiguous:
            raise KernelError(spec.name, spec.op, "direct_planes writes a C-contiguous "
                              "float32 output")
        full0, full1 = args.fulls(inputs)
        scratch = args.scratch.array
        y3 = out.reshape(geo.n * ym, geo.pixels, yb)
        y2 = out.reshape(geo.n * ym, geo.pixels * yb)
        first = fork_call(split_task, split_threads,
                          x.reshape(geo.n, cb, geo.h, geo.w, xb), planes, used, geo.sh,
                          geo.sw, geo.top, geo.left, wq, split_threads)
        second = fork_call(direct_task, nthreads, flat, toff_bytes, w.reshape(geo.m, -1),
                           bias_of(inputs, geo, zeros), y2, y3, int(geo.y_blocked), geo.c,
                           geo.m, geo.group, geo.oh, geo.ow, wq, plane_len, rows, segs, seg,
                           nthreads, grid.array, acc.array, res.array, code, prm, full0,
                           full1, vecs, scratch)

        def call() -> None:
            first()
            second()

        return with_registers(call, args, inputs)

    return runner(prepare)


@tactic("Conv", "direct_planes", applies=applies, native_epilogue=native_epilogue, priority=14)
def bind_direct_planes(spec: LayerSpec) -> RunFn:
    return bind_conv(spec, _make)


@tactic("Conv", "direct_planes_nchw16c", applies=applies_blocked,
        native_epilogue=native_epilogue, priority=14)
def bind_direct_planes_nchw16c(spec: LayerSpec) -> RunFn:
    return bind_conv(spec, _make, blocked=True)
