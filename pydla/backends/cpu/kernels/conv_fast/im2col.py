"""Any 2-D convolution (strides, dilations, padding, groups) as an implicit GEMM.

The columns of im2col are never built: each input plane is first split into zero-bordered
phase planes (conv_fast.phases), where every kernel tap is a constant shift of the output
grid, so row (channel, tap) of the column matrix is a contiguous run of a phase plane. The
GEMM's micro-kernel reads those runs in place through a table of row offsets
(pydla.backends.cpu.kernels.conv_fast.gemm.gemm_gather), multiplying them by the group's
filters (packed once) into a staging block that stays in L2, and copies the block's valid
positions to the output with bias and epilogue. Blocks are split by output channels too
when an image has too few of them to keep every thread busy.
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
    pack_a,
    packed_a_size,
)
from pydla.backends.cpu.kernels.conv_fast.geometry import Conv2d, conv2d
from pydla.backends.cpu.kernels.conv_fast.phases import layout, split, tap
from pydla.backends.cpu.kernels.conv_fast.simd import add_scalar
from pydla.backends.cpu.registry import tactic
from pydla.backends.cpu.steps import chain, kernel_call
from pydla.backends.cpu.workspace import aligned_zeros

COLUMN_BYTES = 1 << 19  # the columns one chunk of strips reads (kept within L2)
STAGED_FLOATS = 1 << 16  # one thread's staged block of the product (256 KiB)


@njit(cache=True, parallel=True, error_model="numpy")
def split_planes(x: np.ndarray, planes: np.ndarray, used: np.ndarray, sh: int, sw: int,
                 top: int, left: int, wq: int, nthreads: int) -> None:
    """planes[img, ch] = the phase planes of x[img, ch] (only those whose used flag is set:
    a 1×1 stride-2 kernel reads one phase of four)."""
    n, c = x.shape[0], x.shape[1]
    tasks = n * c
    per = -(-tasks // nthreads)
    for t in prange(nthreads):
        for task in range(t * per, min(tasks, (t + 1) * per)):
            split(x[task // c, task % c], planes[task // c, task % c], sh, sw, top, left, wq,
                  used)


@njit(cache=True, error_model="numpy")
def implicit_gemm(t: int, planes: np.ndarray, offsets: np.ndarray, ap: np.ndarray,
                  bias: np.ndarray, y: np.ndarray, group: int, oh: int, ow: int, wq: int,
                  chunk: int, mblock: int, nthreads: int, edge: np.ndarray,
                  acc: np.ndarray, code: np.ndarray, prm: np.ndarray, full0: np.ndarray,
                  full1: np.ndarray, vecs: np.ndarray, scratch: np.ndarray) -> None:
    """planes (n, c, phases, size) with NR floats of readable memory after them, offsets
    (k) the byte offsets of the column rows within a group's planes, ap the packed filters
    of every group, y (n·m, oh·ow).

    The work is a list of units — (image, group, block of mblock output channels, strip
    of NR grid positions) — dealt out to the threads in equal contiguous shares; a thread
    runs up to ``chunk`` consecutive strips at a time, reading the columns in place
    (gemm_gather). Per thread: edge (MR·NR) and acc (whole panels × chunk strips) staging
    the product of a sub-block of output channels."""
    n, c = planes.shape[0], planes.shape[1]
    group_stride = c // group * planes.shape[2] * planes.shape[3]
    m, k = bias.shape[0], offsets.shape[0]
    base0 = planes.ctypes.data
    mg = m // group
    per_group = ap.shape[0] // group
    grid = oh * wq
    strips, mb = -(-grid // NR), -(-mg // mblock)
    units = n * group * mb * strips
    stride = chunk * NR  # staging row length
    msub = acc.shape[1] // stride  # staged output channels (whole panels)
    epilogue = code.shape[0] > 0
    u, end = t * units // nthreads, (t + 1) * units // nthreads
    while u < end:
        s0 = u % strips
        rest = u // strips
        mi, g, img = rest % mb, rest // mb % group, rest // mb // group
        s1 = min(strips, s0 + chunk, s0 + end - u)
        u += s1 - s0
        g0, g1 = s0 * NR, min(grid, s1 * NR)
        m0, m1 = mi * mblock, min(mg, (mi + 1) * mblock)
        columns = base0 + ((img * group + g) * group_stride + g0) * 4
        blk = acc[t]
        for ms in range(m0, m1, msub):  # channel sub-blocks: the staging stays in L2
            me = min(m1, ms + msub)
            # Whole panels and strips (the staging block has room, the filters are
            # zero-padded, the columns readable past the grid): no ragged edges.
            gemm_gather(-(-(me - ms) // MR) * MR, (s1 - s0) * NR, k, ap[g * per_group:],
                        mg, ms // MR, offsets, columns, blk, 0, stride, edge[t])
            # The grid rows this chunk touches, valid columns only.
            for r in range(g0 // wq, min(oh, (g1 - 1) // wq + 1)):
                q0, q1 = max(g0, r * wq) - r * wq, min(g1, r * wq + ow) - r * wq
                if q0 >= q1:
                    continue
                for ch in range(ms, me):
                    row = blk[(ch - ms) * stride + r * wq + q0 - g0:
                              (ch - ms) * stride + r * wq + q1 - g0]
                    out_row = (img * group + g) * mg + ch
                    b = bias[g * mg + ch]
                    if epilogue:
                        add_scalar(row, b)
                        run_epilogue(row, y, out_row, r * ow + q0, code, prm, full0,
                                     full1, vecs, scratch[t])
                    else:
                        dst = y[out_row, r * ow + q0:r * ow + q1]
                        for q in range(q1 - q0):
                            dst[q] = row[q] + b


@njit(cache=True)
def pack_filters(w: np.ndarray, group: int, ap: np.ndarray) -> None:
    """W (m, k) of each group into MR-row panels, group after group."""
    m, k = w.shape
    mg = m // group
    per_group = ap.shape[0] // group
    flat = w.reshape(-1)
    for g in range(group):
        pack_a(flat[g * mg * k:], k, mg, k, ap[g * per_group:])


def blocks(geo: Conv2d, grid: int, nthreads: int) -> tuple[int, int]:
    """(strips per chunk, output channels per block). Normally chunks whose columns
    that fit in L2 and no channel blocks. With too few strips to share out evenly (deep
    layers: few pixels, many channels), channel blocks (whole MR panels) instead, and a
    chunk is every strip: the filters, not the columns, are then what must be read once."""
    k = geo.c // geo.group * geo.kh * geo.kw
    mg = geo.m // geo.group
    strips = -(-grid // NR)
    units = geo.n * geo.group * strips
    if units >= 4 * nthreads:
        return max(1, COLUMN_BYTES // (4 * k * NR)), MR * -(-mg // MR)
    mb = min(-(-mg // MR), -(-4 * nthreads // units))
    per_block = -(-mg // mb)
    return strips, MR * -(-per_block // MR)


def applies(spec: LayerSpec) -> bool:
    return conv2d(spec) is not None


def _make(spec: LayerSpec, geo: Conv2d, epi: Epilogue, nthreads: int) -> RunFn:
    cg, mg = geo.c // geo.group, geo.m // geo.group
    k = cg * geo.kh * geo.kw
    wq, size = layout(geo)
    phases = geo.sh * geo.sw
    # Row (ci, i, j) of a group's column matrix starts at this offset in its planes.
    offsets = np.array([(ci * phases * size + ph * size + off) * 4
                        for ci in range(cg) for i in range(geo.kh) for j in range(geo.kw)
                        for ph, off in [tap(i, j, geo, wq)]], np.int64)
    used = np.zeros(phases, np.bool_)
    for i in range(geo.kh):
        for j in range(geo.kw):
            used[tap(i, j, geo, wq)[0]] = True
    grid = geo.oh * wq
    chunk, mblock = blocks(geo, grid, nthreads)
    # NR floats of slack: the last strip reads its columns up to a whole strip.
    count = geo.n * geo.c * phases * size
    # The phase planes' borders are zeroed once, here, and never written: not scratch.
    planes = aligned_zeros(count + NR)[:count].reshape(geo.n, geo.c, phases, size)
    ap = aligned_zeros(geo.group * packed_a_size(mg, k))
    msub = min(mblock, max(MR, STAGED_FLOATS // (chunk * NR) // MR * MR))
    work = [workspace.scratch(shape) for shape in (
        (nthreads, MR * NR),  # edge
        (nthreads, msub * chunk * NR))]  # acc
    args = EpilogueArgs(epi, spec.outputs[0].shape, nthreads, chunk * NR)
    zeros = np.zeros(geo.m, np.float32)
    filters = Derived(lambda w: pack_filters(w.reshape(geo.m, k), geo.group, ap))
    code, prm, vecs = epi.code, epi.prm, args.vecs

    def prepare(inputs: Sequence[np.ndarray | None], outputs: Sequence[np.ndarray]) -> Thunk:
        x, w = inputs[0], inputs[1]
        assert x is not None and w is not None
        full0, full1 = args.fulls(inputs)
        scratch = args.scratch.array
        edge, acc = (s.array for s in work)
        split_call = kernel_call(split_planes, x, planes, used, geo.sh, geo.sw, geo.top, geo.left,
                                 wq, nthreads)
        gemm_call = fork_call(implicit_gemm, nthreads, planes, offsets, ap,
                              bias_of(inputs, geo, zeros),
                              out_rows(outputs[0], geo.n * geo.m, geo.pixels), geo.group,
                              geo.oh, geo.ow, wq, chunk, mblock, nthreads, edge, acc, code,
                              prm, full0, full1, vecs, scratch)
        return filters.before(w, with_registers(chain(split_call, gemm_call), args, inputs))

    return runner(prepare)


@tactic("Conv", "im2col", applies=applies, native_epilogue=native_epilogue, priority=10)
def bind_im2col(spec: LayerSpec) -> RunFn:
    return bind_conv(spec, _make)
