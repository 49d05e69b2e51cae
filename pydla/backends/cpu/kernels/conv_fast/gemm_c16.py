"""1×1 convolution in the channel-blocked layout: the ``gemm_nchw16c`` tactic.

Y (pixels × m) = X (pixels × c) · Wᵀ with X and Y blocked, (n, ⌈c/16⌉, h, w, 16)
(pydla.plan.layouts). The GEMM's rows are pixels, read in place from X — the micro-kernel
steps from one channel block of X to the next every 16 values of K — and its columns are
output channels, two blocks of 16 per micro-kernel call, stored as whole vectors. The NCHW
GEMM (gemm1x1) puts pixels on the vector lanes instead and pads a 7×7 plane's 49 pixels
to 64; here nothing is padded but the channel counts, to 16.

W is packed once into strips of 32 output channels (zero past m and past c). Each task
takes a block of pixels and one strip: it runs every K slice into a
staging block (two output blocks × its pixels, in L1/L2) — the first slice stores with
the bias added — then runs the epilogue into the output's two blocks. A ragged last panel
of pixels (fewer than MR) is copied into a zero-padded panel first, so that no read passes
the end of a block.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial

import numpy as np
from numba import njit, prange

from pydla.backends.base import LayerSpec, RunFn
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
from pydla.backends.cpu.kernels.conv_fast.depthwise_c16 import L, emit_blocked
from pydla.backends.cpu.kernels.conv_fast.epilogue import Epilogue, EpilogueArgs, native_epilogue
from pydla.backends.cpu.kernels.conv_fast.gemm import KC, MR, NR, micro_kernel_blocked
from pydla.backends.cpu.kernels.conv_fast.geometry import Conv2d, conv2d
from pydla.backends.cpu.registry import tactic

PIXELS = 144  # pixels per task: its rows of X (144 × KC floats) stay in L2 across strips


@njit(inline="always", error_model="numpy")
def _ragged(x: np.ndarray, img: int, first: int, tail: int, rag: np.ndarray) -> None:
    """rag[kb, r, :] = x[img, kb, pixel first + r, :] for r < tail, zero after."""
    p = x.shape[2] * x.shape[3]
    for kb in range(x.shape[1]):
        src = x[img, kb].reshape(p * L)
        for r in range(MR):
            dst = rag[kb, r]
            if r < tail:
                dst[:] = src[(first + r) * L:(first + r + 1) * L]
            else:
                dst[:] = 0


@njit(cache=True, parallel=True, error_model="numpy")
def gemm_c16(x: np.ndarray, bp: np.ndarray, bias: np.ndarray, y: np.ndarray, pb: int,
             nthreads: int, rag: np.ndarray, stage: np.ndarray, code: np.ndarray,
             prm: np.ndarray, full0: np.ndarray, full1: np.ndarray, vecs: np.ndarray,
             scratch: np.ndarray) -> None:
    """x (n, kb, h, w, 16); bp (strips, 16·kb, 32) packed weights; bias (strips·32);
    y (n·mb, h·w·16) the blocked output's rows; pb pixels per block (a multiple of MR).
    A task is one strip of one pixel block; each thread takes a run of consecutive tasks
    (the strips of a block follow each other: its pixels stay in cache). Per thread:
    rag (kb, MR, 16), stage (2, pb, 16)."""
    n, kb = x.shape[0], x.shape[1]
    p = x.shape[2] * x.shape[3]
    k = kb * L
    mb = y.shape[0] // n
    strips = bp.shape[0]
    pixel_blocks = -(-p // pb)
    tasks = n * pixel_blocks * strips
    per = -(-tasks // nthreads)
    a_blk = p * L * 4  # bytes between channel blocks of X
    ba = bias.ctypes.data
    for t in prange(nthreads):
        rg, st = rag[t], stage[t]
        ra, sa = rg.ctypes.data, st.ctypes.data
        staged = -1  # the pixel block whose ragged panel rag holds
        for task in range(t * per, min(tasks, (t + 1) * per)):
            block = task // strips
            img, s = block // pixel_blocks, task % strips
            q0 = block % pixel_blocks * pb
            rows = min(p, q0 + pb) - q0
            panels, tail = rows // MR, rows % MR
            if tail and staged != block:
                _ragged(x, img, q0 + panels * MR, tail, rg)
                staged = block
            xa = x.ctypes.data + img * kb * a_blk
            for k0 in range(0, k, KC):
                kc = min(KC, k - k0)
                b = bp.ctypes.data + (s * k + k0) * NR * 4
                more = 1 if k0 else 0  # the first slice stores, with the bias
                for pi in range(panels):
                    micro_kernel_blocked(xa + (k0 // L) * a_blk + (q0 + pi * MR) * L * 4,
                                         a_blk, L * 4, b, kc, sa + pi * MR * L * 4, L * 4,
                                         pb * L * 4, ba + s * NR * 4, more)
                if tail:
                    micro_kernel_blocked(ra + (k0 // L) * MR * L * 4, MR * L * 4, L * 4,
                                         b, kc, sa + panels * MR * L * 4, L * 4,
                                         pb * L * 4, ba + s * NR * 4, more)
            for half in range(2):
                blk = 2 * s + half
                if blk >= mb:
                    break
                emit_blocked(st[half], rows, y, img * mb + blk, q0 * L, code, prm, full0,
                             full1, vecs, scratch[t])


def applies(spec: LayerSpec) -> bool:
    g = conv2d(spec, blocked=True)
    return (g is not None and g.x_blocked and g.y_blocked and g.kh == g.kw == 1
            and g.group == 1 and g.sh == g.sw == 1 and g.top == g.left == 0
            and (g.oh, g.ow) == (g.h, g.w) and blocked_epilogue_ok(spec))


def split(n: int, pixels: int, strips: int, nthreads: int) -> int:
    """Pixels per block: at most PIXELS, whole MR panels, evenly sized — and smaller
    while there are fewer than four tasks (pixel block × strip) per thread, so that the
    threads' shares differ by little (a fork-join region lasts as long as its busiest
    thread: a 7×7 layer's three strips on two threads left one idle a third of the time)."""
    panels = -(-pixels // MR)
    count = -(-pixels // PIXELS)
    while n * count * strips < 4 * nthreads and count < panels:
        count += 1
    return -(-panels // count) * MR


def _make(spec: LayerSpec, geo: Conv2d, epi: Epilogue, nthreads: int) -> RunFn:
    kb, mb = -(-geo.c // L), -(-geo.m // L)
    strips = -(-mb // 2)
    k = kb * L
    pb = split(geo.n, geo.pixels, strips, nthreads)
    bp = np.zeros((strips, k, NR), np.float32)
    bias = np.zeros(strips * NR, np.float32)
    rag = np.zeros((nthreads, kb, MR, L), np.float32)
    stage = np.zeros((nthreads, 2, pb, L), np.float32)
    args = EpilogueArgs(epi, spec.outputs[0].shape, nthreads, pb * L)
    zeros = np.zeros(geo.m, np.float32)
    zeros.flags.writeable = False  # a constant bias
    code, prm, vecs, scratch = epi.code, epi.prm, args.vecs, args.scratch

    def pack(w: np.ndarray) -> None:
        wt = np.zeros((k, strips * NR), np.float32)
        wt[:geo.c, :geo.m] = w.reshape(geo.m, geo.c).T
        bp[:] = wt.reshape(k, strips, NR).transpose(1, 0, 2)

    packed = Derived(pack)

    def prepare(inputs: Sequence[np.ndarray | None], outputs: Sequence[np.ndarray]) -> Thunk:
        x, w = inputs[0], inputs[1]
        assert x is not None and w is not None
        full0, full1 = args.fulls(inputs)
        call = partial(gemm_c16, x, bp, bias, out_rows(outputs[0], geo.n * mb, geo.pixels * L),
                       pb, nthreads, rag, stage, code, prm, full0, full1, vecs,
                       scratch)
        call = with_bias_copy(call, bias_of(inputs, geo, zeros), bias)
        return with_registers(packed.before(w, call), args, inputs)

    return runner(prepare)


@tactic("Conv", "gemm_nchw16c", applies=applies, native_epilogue=native_epilogue, priority=30)
def bind_gemm_nchw16c(spec: LayerSpec) -> RunFn:
    return bind_conv(spec, _make, blocked=True)
