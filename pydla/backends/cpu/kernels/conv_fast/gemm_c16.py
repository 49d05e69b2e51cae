"""1×1 convolution with pixels as the GEMM's rows: the ``gemm_nchw16c`` tactic (channel-
blocked input and output) and ``gemm_c16`` (planar).

Y (pixels × m) = X (pixels × c) · Wᵀ with X and Y blocked, (n, ⌈c/16⌉, h, w, 16)
(pydla.plan.layouts). The GEMM's rows are pixels, read in place from X — the micro-kernel
steps from one channel block of X to the next every 16 values of K — and its columns are
output channels, two blocks of 16 per micro-kernel call, stored as whole vectors. The NCHW
GEMM (gemm1x1) puts pixels on the vector lanes instead and pads a 7×7 plane's 49 pixels
to 64; here nothing is padded but the channel counts, to 16. On planar tensors
(``gemm_c16``) A is read in place as well — 16 values of K are 16 planes apart — and each
strip leaves through the transposing emit of depthwise_c16, epilogue included.

W is packed once into strips of 32 output channels (zero past m and past c). Each task
takes a block of pixels and one strip: it runs every K slice into a
staging block (two output blocks × its pixels, in L1/L2) — the first slice stores with
the bias added — then runs the epilogue into the output's two blocks. Panels are of MR
pixels, or of MR_SMALL where that wastes fewer (a 7×7 plane's 49 pixels). A ragged last panel
is copied into a zero-padded panel first, so that no read passes the end of a block.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numba import njit, prange

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
    FusedStore,
    native_epilogue,
)
from pydla.backends.cpu.kernels.conv_fast.gemm import (
    KC,
    MR,
    MR_SMALL,
    NR,
    micro_kernel_blocked,
    micro_kernel_blocked_16,
    micro_kernel_blocked_small,
    micro_kernel_blocked_small_16,
)
from pydla.backends.cpu.kernels.conv_fast.geometry import Conv2d, conv2d
from pydla.backends.cpu.kernels.conv_fast.simd import copy_bytes, pass_cost, zero_bytes
from pydla.backends.cpu.registry import tactic
from pydla.backends.cpu.steps import Fixed, chain, kernel_call
from pydla.backends.cpu.workspace import aligned_zeros

PIXELS = 144  # pixels per task: its rows of X (144 × K floats) stay in L2 across strips


@njit(inline="always", error_model="numpy")
def _ragged(x: np.ndarray, at: int, k: int, p: int, blocked: bool, tail: int, mr: int,
            rag: np.ndarray) -> None:
    """The last tail (< mr) pixels of an image's rows of X from element ``at`` (its pixel
    ``first``), zero-padded to mr: rag (k/16, mr, 16) from a blocked X — rag[b, r, :] =
    X[b, first + r, :] — or (k, mr) from a planar one — rag[kk, r] = X[kk, first + r]."""
    flat = rag.reshape(-1)
    if blocked:
        base, src = flat.ctypes.data, x.ctypes.data
        for b in range(k // L):
            for r in range(mr):
                dst = base + (b * mr + r) * L * 4
                if r < tail:
                    copy_bytes(dst, src + (at + (b * p + r) * L) * 4, L * 4)
                else:
                    zero_bytes(dst, L * 4)
    else:
        for kk in range(k):
            for r in range(mr):
                flat[kk * mr + r] = x[at + kk * p + r] if r < tail else 0


@njit(inline="always")
def _panel(mr: int, blocked: bool, one: bool, a: int, a_blk: int, a_lane: int, b: int,
           kc: int, out: int, c_half: int, bias: int, more: int, pf: int, fin: int, y: int,
           y_half: int, res: int, lohi: int) -> None:
    # Row strides are literals at each call (16 floats blocked, 1 planar): LLVM then folds
    # the row addresses into one base register (as a variable they spilled, 3× slower).
    # ``one``: an odd last block of output channels, the strip's first vector only (its
    # second would multiply zero weights: the 32->16 projection at 112x112 spent half
    # its time so). ``fin`` … ``lohi``: gemm.Final, the output's rows 16 floats apart.
    if one:
        if mr == MR_SMALL:
            if blocked:
                micro_kernel_blocked_small_16(a, a_blk, 4, L * 4, b, kc, out, L * 4, c_half,
                                              bias, more, pf, fin, y, L * 4, y_half, res, lohi)
            else:
                micro_kernel_blocked_small_16(a, a_blk, a_lane, 4, b, kc, out, L * 4, c_half,
                                              bias, more, pf, fin, y, L * 4, y_half, res, lohi)
        elif blocked:
            micro_kernel_blocked_16(a, a_blk, 4, L * 4, b, kc, out, L * 4, c_half, bias, more, pf,
                                    fin, y, L * 4, y_half, res, lohi)
        else:
            micro_kernel_blocked_16(a, a_blk, a_lane, 4, b, kc, out, L * 4, c_half, bias,
                                    more, pf, fin, y, L * 4, y_half, res, lohi)
    elif mr == MR_SMALL:
        if blocked:
            micro_kernel_blocked_small(a, a_blk, 4, L * 4, b, kc, out, L * 4, c_half, bias,
                                       more, pf, fin, y, L * 4, y_half, res, lohi)
        else:
            micro_kernel_blocked_small(a, a_blk, a_lane, 4, b, kc, out, L * 4, c_half, bias,
                                       more, pf, fin, y, L * 4, y_half, res, lohi)
    elif blocked:
        micro_kernel_blocked(a, a_blk, 4, L * 4, b, kc, out, L * 4, c_half, bias, more, pf,
                             fin, y, L * 4, y_half, res, lohi)
    else:
        micro_kernel_blocked(a, a_blk, a_lane, 4, b, kc, out, L * 4, c_half, bias, more, pf,
                             fin, y, L * 4, y_half, res, lohi)


@njit(cache=True, parallel=True, error_model="numpy")
def subsample(x: np.ndarray, xs: np.ndarray, planes: int, h: int, w: int, sh: int, sw: int,
               ow: int, nthreads: int) -> None:
    """xs = the pixels a strided 1×1 kernel reads from blocked x: planes (n·⌈c/16⌉) of
    h × w vectors of 16 into planes of oh × ow."""
    oh = xs.shape[0] // (planes * ow * L)
    rows = planes * oh
    per = -(-rows // nthreads)
    for t in prange(nthreads):
        for r in range(t * per, min(rows, (t + 1) * per)):
            plane, i = r // oh, r % oh
            src = (plane * h + i * sh) * w * L
            dst = r * ow * L
            for j in range(ow):
                xs[dst + j * L:dst + (j + 1) * L] = x[src + j * sw * L:src + (j * sw + 1) * L]


@njit(cache=True, error_model="numpy")
def gemm_c16(t: int, x: np.ndarray, n: int, p: int, c: int, x_blocked: bool, bp: np.ndarray,
             bias: np.ndarray, y: np.ndarray, m: int, y_blocked: bool, pb: int,
             nthreads: int, rag: np.ndarray, stage: np.ndarray, acc: np.ndarray,
             code: np.ndarray, prm: np.ndarray, full0: np.ndarray, full1: np.ndarray,
             vecs: np.ndarray, scratch: np.ndarray, local: bool, mr: int, xs: np.ndarray,
             h: int, w: int, sh: int, sw: int, ow: int, stream: bool,
             strip_major: bool, fused: int, res: int, lohi: np.ndarray) -> None:
    """Thread t's share (run by fork.fork_call). x flat: n images of p pixels, blocked (k/16
    blocks of p × 16) or planar (k rows of p); bp (strips, k, 32) packed weights — k =
    16·⌈c/16⌉ blocked, c planar — of which only the c input channels' rows are multiplied
    (MobileNetV2's 24 channels at 56×56 are 32 blocked: a quarter of those layers' FMAs
    multiplied zeros); bias (strips·32); y the output's rows: (n·⌈m/16⌉, p·16) blocked or
    (n·m, p) planar; pb pixels per block (a multiple of mr, the micro-kernel's rows: MR or
    MR_SMALL). A task is one strip of one pixel block; each thread takes a run of consecutive
    tasks (the strips of a block follow each other: its pixels stay in cache). Per thread:
    rag (a ragged panel, as _ragged), stage (2, pb, 16), acc (pb · 16, emit's scratch).
    ``local``: the epilogue reads no extra inputs. A strided layer (blocked X of h × w
    pixels, strides sh, sw; ow output columns) reads the pixels ``subsample`` gathered into
    xs. ``strip_major``: tasks run strip by strip (each thread reads its own strips of W,
    every pixel block), not pixel block by pixel block (each thread reads all of W).
    ``fused`` (epilogue.FIN_* flags; ``res`` the residual's offset from y in bytes,
    ``lohi`` the clamp: epilogue.FusedStore): a short epilogue that the micro-kernel's last
    K slice stores straight into y — only a ragged last panel goes through the stage."""
    strips, k = bp.shape[0], bp.shape[1]
    if sh != 1 or sw != 1:
        x = xs
    mb = -(-m // L)
    pixel_blocks = -(-p // pb)
    tasks = n * pixel_blocks * strips
    per = -(-tasks // nthreads)
    # A (and the ragged panel's copy): bytes between values kk and kk + 16, and (planar)
    # between kk and kk + 1.
    a_blk, a_lane, r_blk = p * L * 4, p * 4, mr * L * 4
    ba = bias.ctypes.data
    # With at most two strips each row of a blocked X is read once or twice: it comes from
    # memory, and the micro-kernel prefetches every row's line (gemm._micro_pass), not
    # just the first's; with more, X stays in L2 across the strips.
    pf = L * 4 if x_blocked and strips <= 2 else 0
    rg, st = rag[t], stage[t]
    ra, sa = rg.ctypes.data, st.ctypes.data
    la = lohi.ctypes.data
    staged = -1  # the pixel block whose ragged panel rag holds
    for task in range(t * per, min(tasks, (t + 1) * per)):
        if strip_major:
            block, s = task % (n * pixel_blocks), task // (n * pixel_blocks)
        else:
            block, s = task // strips, task % strips
        img = block // pixel_blocks
        q0 = block % pixel_blocks * pb
        rows = min(p, q0 + pb) - q0
        panels, tail = rows // mr, rows % mr
        first = img * k * p + (q0 + panels * mr) * (L if x_blocked else 1)
        if tail and staged != block:
            _ragged(x, first, k, p, x_blocked, tail, mr, rg)
            staged = block
        xa = x.ctypes.data + (img * k * p + q0 * (L if x_blocked else 1)) * 4
        # The output's two blocks of this strip at pixel q0 (fused: where the last slice
        # stores).
        ya = y.ctypes.data + ((img * mb + 2 * s) * p + q0) * L * 4
        for k0 in range(0, c, KC):
            kc = min(KC, c - k0)
            b = bp.ctypes.data + (s * k + k0) * NR * 4
            more = 1 if k0 else 0  # the first slice stores, with the bias
            fin = fused if k0 + kc == c else 0
            one = mb % 2 == 1 and s == strips - 1
            # One call site (the micro-kernel is inlined there): the whole panels, then a
            # ragged one from its zero-padded copy, into the stage.
            for pi in range(panels + (1 if tail else 0)):
                if pi < panels:
                    step = pi * mr * (L if x_blocked else 1) * 4
                    a, blk_bytes, lane_bytes = xa + (k0 // L) * a_blk + step, a_blk, a_lane
                    f, out = fin, ya + pi * mr * L * 4
                else:
                    a, blk_bytes, lane_bytes = ra + (k0 // L) * r_blk, r_blk, mr * 4
                    f, out = 0, 0
                _panel(mr, x_blocked, one, a, blk_bytes, lane_bytes, b, kc,
                       sa + pi * mr * L * 4, pb * L * 4, ba + s * NR * 4, more, pf,
                       f, out, p * L * 4, res, la)
        # What is left in the stage: every row, or (fused) the ragged panel's.
        r0 = panels * mr if fused else 0
        if r0 == rows:
            continue
        for half in range(2):
            blk = 2 * s + half
            if blk >= mb:
                break
            if y_blocked:
                emit_blocked(st[half, r0:], rows - r0, y, img * mb + blk, (q0 + r0) * L, code,
                             prm, full0, full1, vecs, scratch[t], stream)
            else:
                emit(st[half], min(L, m - blk * L), rows, y, img * m + blk * L, q0,
                     acc[t], local, code, prm, full0, full1, vecs, scratch[t])


def applies(spec: LayerSpec) -> bool:
    g = conv2d(spec, blocked=True)
    return (g is not None and g.x_blocked and g.y_blocked and _pointwise(g, strided=True)
            and blocked_epilogue_ok(spec))


def applies_planar(spec: LayerSpec) -> bool:
    g = conv2d(spec)
    return g is not None and _pointwise(g, strided=False)


def _pointwise(g: Conv2d, strided: bool) -> bool:
    """A 1×1 convolution without padding; strided only on blocked input (gathered first;
    planar strided layers have gemm1x1)."""
    return (g.kh == g.kw == 1 and g.group == 1 and g.top == g.left == 0
            and (g.sh == g.sw == 1 or strided)
            and (g.oh, g.ow) == ((g.h - 1) // g.sh + 1, (g.w - 1) // g.sw + 1))


def rows_for(pixels: int, small: int = MR_SMALL) -> int:
    """The micro-kernel's rows for a block of ``pixels``: ``small`` (MR_SMALL: 7 with
    AVX-512, 6 on AVX2) where its panels cost more than 2 % less than panels of 12 — the
    rows a ragged last panel wastes against how fast each shape runs (simd.pass_cost).
    With AVX-512 both run at the FMA peak and a 7×7 plane's 49 pixels (11 of 60 wasted by
    12) or 14×14 (8 of 204) take 7; on AVX2 6 rows run as fast as 12 and 7×7, 14×14 and
    smaller planes take 6."""
    def cost(mr: int) -> float:
        return -(-pixels // mr) * pass_cost(mr, 2)

    return small if cost(small) < 0.98 * cost(MR) else MR


def split(n: int, pixels: int, strips: int, nthreads: int, mr: int = MR) -> int:
    """Pixels per block: at most PIXELS, whole panels of mr, evenly sized — and smaller
    while there are fewer than eight tasks (pixel block × strip) per thread, so that the
    threads' shares differ by little (a fork-join region lasts as long as its busiest
    thread: a 7×7 layer's three strips on two threads left one idle a third of the time)."""
    panels = -(-pixels // mr)
    count = -(-pixels // PIXELS)
    while n * count * strips < 8 * nthreads and count < panels:
        count += 1
    return -(-panels // count) * mr


def strip_major(n: int, pixels: int, strips: int) -> bool:
    """Whether W outweighs X (more output channels than pixels): then each thread takes
    its own strips of W over every pixel block. Split by pixels, both threads read all of
    W, which comes from memory in a network (ResNet-50's 256→1024 at 14×14: 1 MB of W
    per 0.2 MB of X ran 0.25 ms alone, 0.31 in the network)."""
    return strips * NR > n * pixels


def _make(spec: LayerSpec, geo: Conv2d, epi: Epilogue, nthreads: int) -> RunFn:
    kb, mb = -(-geo.c // L), -(-geo.m // L)
    strips = -(-mb // 2)
    blocked = geo.x_blocked
    k = kb * L if blocked else geo.c
    p = geo.pixels
    mr = rows_for(p)
    pb = split(geo.n, p, strips, nthreads, mr)
    bp = aligned_zeros((strips, k, NR))
    bias = aligned_zeros(strips * NR)
    work = [workspace.scratch(shape) for shape in (
        (nthreads, k * MR),  # rag
        (nthreads, 2, pb, L),  # stage
        (nthreads, pb * L))]  # acc
    strided = geo.sh != 1 or geo.sw != 1
    xs = aligned_zeros(geo.n * k * p if strided else 0)
    local = not epi.full and not epi.vec
    args = EpilogueArgs(epi, spec.outputs[0].shape, nthreads,
                        pb * (L if local or geo.y_blocked else 1))
    y_shape = (geo.n * mb, p * L) if geo.y_blocked else (geo.n * geo.m, p)
    zeros = np.zeros(geo.m, np.float32)
    zeros.flags.writeable = False  # a constant bias
    code, prm, vecs = epi.code, epi.prm, args.vecs
    stream = geo.y_blocked and streams(spec.outputs[0].shape)
    store = FusedStore(epi, geo.y_blocked and not stream)

    def pack(w: np.ndarray) -> None:
        wt = np.zeros((k, strips * NR), np.float32)
        wt[:geo.c, :geo.m] = w.reshape(geo.m, geo.c).T
        bp[:] = wt.reshape(k, strips, NR).transpose(1, 0, 2)

    packed = Derived(pack)

    def prepare(inputs: Sequence[np.ndarray | None], outputs: Sequence[np.ndarray]) -> Thunk:
        x, w = inputs[0], inputs[1]
        assert x is not None and w is not None
        full0, full1 = args.fulls(inputs)
        rag, stage, acc = (s.array for s in work)
        y = out_rows(outputs[0], *y_shape)
        fused, res = store.at(y, full0)
        call = fork_call(gemm_c16, nthreads, x.reshape(-1), geo.n, p, geo.c, Fixed(blocked),
                         bp, bias, y, geo.m, Fixed(geo.y_blocked),
                         pb, nthreads,
                         rag, stage, acc, code, prm, full0, full1, vecs, args.scratch.array,
                         local, mr, xs,
                         geo.h, geo.w, geo.sh, geo.sw, geo.ow,
                         stream, strip_major(geo.n, p, strips), fused, res, store.lohi)
        if strided:
            call = chain(kernel_call(subsample, x.reshape(-1), xs, geo.n * kb, geo.h, geo.w,
                                     geo.sh, geo.sw, geo.ow, nthreads), call)
        call = with_bias_copy(call, bias_of(inputs, geo, zeros), bias)
        return with_registers(packed.before(w, call), args, inputs)

    return runner(prepare)


@tactic("Conv", "gemm_nchw16c", applies=applies, native_epilogue=native_epilogue, priority=30)
def bind_gemm_nchw16c(spec: LayerSpec) -> RunFn:
    return bind_conv(spec, _make, blocked=True)


@tactic("Conv", "gemm_c16", applies=applies_planar, native_epilogue=native_epilogue,
        priority=25)
def bind_gemm_c16(spec: LayerSpec) -> RunFn:
    return bind_conv(spec, _make)
