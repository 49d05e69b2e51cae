"""1×1 convolution as GEMM: Y[n] (m × oh·ow) = W (m × c) · X[n] (c × the sampled pixels).

Any stride (a strided layer first gathers the pixels it samples), no padding, one group.

W is packed into micro-kernel panels once (pydla.backends.cpu.kernels.conv_fast.gemm).
The output is cut into blocks of pixels (columns) — and of output channels when an image
has too few pixels to keep every thread busy; each numba thread runs the GEMM on its
block's pixels of X read in place (only a ragged last strip of 32 is packed) straight into
the output (or, with an epilogue, into a staging block that stays in L2) and adds bias and
epilogue to each finished row.
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
    out_rows,
    runner,
    with_registers,
)
from pydla.backends.cpu.kernels.conv_fast.epilogue import (
    Epilogue,
    EpilogueArgs,
    native_epilogue,
    run_epilogue,
)
from pydla.backends.cpu.kernels.conv_fast.gemm import (
    MR,
    NR,
    gemm_gather,
    gemm_packed,
    pack_a,
    pack_b,
    packed_a_size,
)
from pydla.backends.cpu.kernels.conv_fast.geometry import Conv2d, conv2d
from pydla.backends.cpu.kernels.conv_fast.simd import add_scalar, copy_bytes
from pydla.backends.cpu.registry import tactic
from pydla.backends.cpu.steps import chain, kernel_call
from pydla.backends.cpu.workspace import aligned_zeros

PACKED_B_FLOATS = 1 << 18  # one thread's packed block of X (1 MiB)
STAGED_FLOATS = 1 << 16  # one thread's staged block of Y (256 KiB), when staged


def _up(value: int, step: int) -> int:
    return -(-value // step) * step


def blocks(m: int, p: int, k: int, images: int, nthreads: int,
           epilogue: bool) -> tuple[int, int]:
    """(rows, columns) of a task's output block. Pixels are split into even blocks of whole
    NR strips — as many as the threads need, more if a packed block would leave L2 — and
    output channels (even blocks of whole MR panels) when the pixels alone cannot keep
    every thread busy, or a staged block (with an epilogue) would leave L2. The number of
    tasks is made a multiple of the threads where the channels allow: a fork-join region
    lasts as long as its busiest thread."""
    strips = -(-p // NR)
    per_image = -(-nthreads // images)  # column blocks per image that give each thread one
    col_count = -(-strips // max(1, PACKED_B_FLOATS // k // NR))
    if strips >= 4 * per_image:  # else a strip more or less is too uneven: split rows
        col_count = -(-max(col_count, per_image) // per_image) * per_image
    cols = min(p, NR * -(-strips // col_count))
    col_count = -(-p // cols)
    panels = -(-m // MR)
    row_count = -(-m // max(MR, STAGED_FLOATS // cols)) if epilogue else 1
    row_count = max(row_count, -(-nthreads // (images * col_count)))
    while (images * col_count * row_count) % nthreads and row_count < panels:
        row_count += 1
    row_count = min(row_count, panels)
    return MR * -(-panels // row_count), cols


@njit(cache=True, parallel=True, error_model="numpy")
def subsample(x: np.ndarray, xs: np.ndarray, sh: int, sw: int, nthreads: int) -> None:
    """xs[img, ch, r, q] = x[img, ch, r·sh, q·sw]: the pixels a strided 1×1 kernel reads."""
    n, c, oh, ow = xs.shape
    tasks = n * c
    per = -(-tasks // nthreads)
    for t in prange(nthreads):
        for task in range(t * per, min(tasks, (t + 1) * per)):
            src, dst = x[task // c, task % c], xs[task // c, task % c]
            for r in range(oh):
                row, out = src[r * sh], dst[r]
                for q in range(ow):
                    out[q] = row[q * sw]


@njit(cache=True, error_model="numpy")
def gemm1x1(t: int, x: np.ndarray, ap: np.ndarray, bias: np.ndarray, y: np.ndarray, sh: int,
            sw: int, xs: np.ndarray, rows: int, cols: int, nthreads: int, offs: np.ndarray,
            bp: np.ndarray, edge: np.ndarray, acc: np.ndarray, code: np.ndarray, prm: np.ndarray,
            full0: np.ndarray, full1: np.ndarray, vecs: np.ndarray,
            scratch: np.ndarray) -> None:
    """x (n, c, h, w), ap the packed weights, y (n·m, p) with p = oh·ow output pixels. A
    strided layer reads the pixels ``subsample`` gathered into xs (n, c, oh, ow); the whole
    strips of a block read those rows in place (gemm_gather; offs: the channels' byte
    offsets) and only a ragged last strip is packed. Per thread: bp (packed pixels), edge
    (MR·NR) and acc (rows·cols) staging a block for the epilogue."""
    if sh != 1 or sw != 1:
        x = xs
    n, c = x.shape[0], x.shape[1]
    m, p = y.shape[0] // n, y.shape[1]
    yf = y.reshape(-1)
    rb, cb = -(-m // rows), -(-p // cols)
    tasks = n * cb * rb
    per = -(-tasks // nthreads)
    epilogue = code.shape[0] > 0
    # Through the staging block: with an epilogue, or when the rows end in a ragged panel
    # (the GEMM then computes whole panels instead of patching up edges one by one).
    staged = epilogue or m % MR != 0
    packed = -1  # consecutive tasks share a column block: pack it once
    for task in range(t * per, min(tasks, (t + 1) * per)):
        ri = task % rb
        block = task // rb
        img, c0 = block // cb, block % cb * cols
        r0, c1 = ri * rows, min(p, block % cb * cols + cols)
        r1 = min(m, r0 + rows)
        # Whole strips read in place, a ragged last one packed.
        full = (c1 - c0) // NR * NR
        if packed != block:
            if c1 - c0 > full:
                pack_b(x[img].reshape(-1)[c0 + full:], p, c, c1 - c0 - full, bp[t])
            packed = block
        columns = x.ctypes.data + (img * c * p + c0) * 4
        if not staged:
            at = (img * m + r0) * p + c0
            if full:
                gemm_gather(r1 - r0, full, c, ap, m, r0 // MR, offs, columns, yf, at, p,
                            edge[t])
            if c1 - c0 > full:
                gemm_packed(r1 - r0, c1 - c0 - full, c, ap, m, r0 // MR, bp[t], yf,
                            at + full, p, edge[t])
            for r in range(r0, r1):
                add_scalar(y[img * m + r, c0:c1], bias[r])
        else:
            blk = acc[t]
            # Whole panels: the staging block has room and the packed weights are
            # zero-padded, so a ragged last panel needs no patching up.
            whole = -(-(r1 - r0) // MR) * MR
            if full:
                gemm_gather(whole, full, c, ap, m, r0 // MR, offs, columns, blk, 0, cols,
                            edge[t])
            if c1 - c0 > full:
                gemm_packed(whole, c1 - c0 - full, c, ap, m, r0 // MR, bp[t], blk, full,
                            cols, edge[t])
            for r in range(r0, r1):
                row = blk[(r - r0) * cols:(r - r0) * cols + c1 - c0]
                add_scalar(row, bias[r])
                if epilogue:
                    run_epilogue(row, y, img * m + r, c0, code, prm, full0, full1, vecs,
                                 scratch[t])
                else:
                    copy_bytes(y[img * m + r].ctypes.data + c0 * 4, row.ctypes.data,
                               (c1 - c0) * 4)


@njit(cache=True)
def pack_weights(w: np.ndarray, ap: np.ndarray) -> None:
    """W (m, c) into MR-row panels."""
    m, c = w.shape
    pack_a(w.reshape(-1), c, m, c, ap)


def applies(spec: LayerSpec) -> bool:
    g = conv2d(spec)
    return (g is not None and g.kh == g.kw == 1 and g.group == 1 and g.top == g.left == 0
            and (g.oh - 1) * g.sh < g.h and (g.ow - 1) * g.sw < g.w)


def _make(spec: LayerSpec, geo: Conv2d, epi: Epilogue, nthreads: int) -> RunFn:
    m, c, p = geo.m, geo.c, geo.pixels
    staged = epi.steps > 0 or m % MR != 0  # as in the kernel
    rows, cols = blocks(m, p, c, geo.n, nthreads, staged)
    ap = aligned_zeros(packed_a_size(m, c))
    work = [workspace.scratch(shape) for shape in (
        (nthreads, _up(cols, NR) * c),  # bp: packed strips of X
        (nthreads, MR * NR),  # edge
        (nthreads, rows * cols if staged else 1))]  # acc
    args = EpilogueArgs(epi, spec.outputs[0].shape, nthreads, cols)
    zeros = np.zeros(m, np.float32)
    offs = np.arange(c, dtype=np.int64) * (p * 4)  # the channels' rows, in bytes
    strided = geo.sh != 1 or geo.sw != 1
    gathered = workspace.scratch((geo.n, c, geo.oh, geo.ow) if strided else (1, 1, 1, 1))
    weights = Derived(lambda w: pack_weights(w.reshape(m, c), ap))
    code, prm, vecs = epi.code, epi.prm, args.vecs

    def prepare(inputs: Sequence[np.ndarray | None], outputs: Sequence[np.ndarray]) -> Thunk:
        x, w = inputs[0], inputs[1]
        assert x is not None and w is not None
        full0, full1 = args.fulls(inputs)
        scratch = args.scratch.array
        bp, edge, acc = (s.array for s in work)
        xs = gathered.array
        call = fork_call(gemm1x1, nthreads, x, ap, bias_of(inputs, geo, zeros),
                         out_rows(outputs[0], geo.n * m, p), geo.sh, geo.sw, xs, rows, cols,
                         nthreads, offs, bp, edge, acc, code, prm, full0, full1, vecs, scratch)
        if strided:
            call = chain(kernel_call(subsample, x, xs, geo.sh, geo.sw, nthreads), call)
        return weights.before(w, with_registers(call, args, inputs))

    return runner(prepare)


@tactic("Conv", "gemm1x1", applies=applies, native_epilogue=native_epilogue, priority=30)
def bind_gemm1x1(spec: LayerSpec) -> RunFn:
    return bind_conv(spec, _make)
