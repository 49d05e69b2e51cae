"""3×3 stride-1 convolution by Winograd's minimal filtering, F(4×4, 3×3) and F(2×2, 3×3).

Y = Aᵀ [ (G g Gᵀ) ⊙ (Bᵀ d B) ] A per m×m output tile (m = 4 or 2, tiles of a = m+2 input
pixels): S = a² products that become S GEMMs over all tiles and channels.

Work is cut into chunks of tile rows — and, where the batch's tiles make a single chunk,
into runs of output channels (``groups``: each thread then streams only its part of U) —
and each numba thread takes its tasks through every step with no barrier in between, so a
chunk's data stays in that core's cache:

1. its input rows are copied channel-last and zero padded (16×16 blocks transposed in
   registers): a tile's pixels are then vectors of 16 channels, and Bᵀ d B is vector code
   (pydla.backends.cpu.kernels.conv_fast.simd) with no waste at any image size;
2. V_s (tiles × C) · U_s (C × M) for the S products (conv_fast.gemm, U packed once);
3. the output transform Aᵀ M A, again over channel vectors, into a channel-last band;
4. the band goes back to NCHW 16 channels at a time, plus bias, through the epilogue.

U = G g Gᵀ is computed in float64 once, and kept while the same read-only weight array
(the loadable's) comes back. F(4×4) needs 4× fewer multiplications than direct convolution
but rounds more (≈ 1e-5 relative error on typical layers); F(2×2) is nearly exact.
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
from pydla.backends.cpu.kernels.conv_fast.depthwise_c16 import emit_blocked, streams
from pydla.backends.cpu.kernels.conv_fast.epilogue import (
    Epilogue,
    EpilogueArgs,
    native_epilogue,
    run_epilogue,
)
from pydla.backends.cpu.kernels.conv_fast.gemm import (
    MR,
    NR,
    gemm_rows,
    pack_b,
    packed_b_size,
)
from pydla.backends.cpu.kernels.conv_fast.geometry import Conv2d, conv2d
from pydla.backends.cpu.kernels.conv_fast.simd import LANES, linear_map, transpose16, zero_bytes
from pydla.backends.cpu.registry import tactic
from pydla.backends.cpu.steps import Fixed
from pydla.backends.cpu.workspace import aligned_zeros

# Tiles per chunk: enough rows for efficient GEMMs, few enough for the chunk to stay in L2.
CHUNK_TILES = 96
# Up to this many tiles per thread the threads split U's output channels (``groups``).
SPLIT_TILES = 16

# Filter transforms G (a × 3), applied in float64.
_G4 = np.array([[1 / 4, 0, 0], [-1 / 6, -1 / 6, -1 / 6], [-1 / 6, 1 / 6, -1 / 6],
                [1 / 24, 1 / 12, 1 / 6], [1 / 24, -1 / 12, 1 / 6], [0, 0, 1]])
_G2 = np.array([[1, 0, 0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0, 0, 1]])


# -- the transforms as 16-channel vector maps (Bᵀ: a × a, Aᵀ: m × a) -------------------

_BT6 = linear_map([[4, 0, -5, 0, 1, 0], [0, -4, -4, 1, 1, 0], [0, 4, -4, -1, 1, 0],
                   [0, -2, -1, 2, 1, 0], [0, 2, -1, -2, 1, 0], [0, 4, 0, -5, 0, 1]])
_AT6 = linear_map([[1, 1, 1, 1, 1, 0], [0, 1, -1, 2, -2, 0], [0, 1, 1, 4, 4, 0],
                   [0, 1, -1, 8, -8, 1]])
_BT4 = linear_map([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]])
_AT4 = linear_map([[1, 1, 1, 0], [0, 1, -1, -1]])
_VB = 4 * LANES  # bytes in one vector


# -- step 1: channel-last input band -----------------------------------------------------

@njit(inline="always", error_model="numpy")
def _transposed_row(x: np.ndarray, band: np.ndarray, r: int, ih: int, lo: int, hi: int,
                    left: int) -> None:
    """band[r, lo:hi, :c] from planar x (c, h, w) row ih: 16×16 blocks (channels ×
    columns) transposed in registers, the ragged edges element by element."""
    c, h, w = x.shape
    width, cv = band.shape[1], band.shape[2]
    blocks, cols = c // LANES * LANES, (hi - lo) // LANES * LANES
    dst = band[r]
    if c < cv:  # lanes past the last channel (scratch holds other layers' data)
        for col in range(lo, hi):  # loops: numba's 2-D slice fill stays scalar
            for ch in range(c, cv):
                dst[col, ch] = 0
    for cb in range(0, blocks, LANES):
        for col in range(0, cols, LANES):
            transpose16(x.ctypes.data + ((cb * h + ih) * w + col) * 4, h * w * 4,
                        band.ctypes.data + ((r * width + lo + col) * cv + cb) * 4, cv * 4, 0)
    for ch in range(c):
        src = x[ch, ih]
        first = cols if ch < blocks else 0
        for col in range(lo + first, hi):
            dst[col, ch] = src[col - left]


@njit(inline="always", error_model="numpy")
def _copied_row(x: np.ndarray, band: np.ndarray, r: int, ih: int, lo: int, hi: int,
                left: int) -> None:
    """band[r, lo:hi, :] from blocked x (⌈c/16⌉, h, w·16) row ih, already channel-last: 16
    channels a column, in element loops over flat views (a slice copy per 16 floats cost
    more than the planar kernel's transposes)."""
    blocks, h, w = x.shape[0], x.shape[1], x.shape[2] // LANES
    width, cv = band.shape[1], band.shape[2]
    xf, bf = x.reshape(-1), band.reshape(-1)
    for cb in range(blocks):
        src = (cb * h + ih) * w * LANES - left * LANES
        out = r * width * cv + cb * LANES
        for col in range(lo, hi):
            for j in range(LANES):
                bf[np.uint64(out + col * cv + j)] = xf[np.uint64(src + col * LANES + j)]


@njit(error_model="numpy")
def _load_band(x: np.ndarray, band: np.ndarray, ih0: int, rows: int, left: int,
               blocked: bool) -> None:
    """band[r, col, ch] = x at channel ch, row ih0 + r, column col - left, zero outside the
    image; x (c, h, w), or (⌈c/16⌉, h, w·16) when ``blocked``."""
    h = x.shape[1]
    w = x.shape[2] // LANES if blocked else x.shape[2]
    width, cv = band.shape[1], band.shape[2]
    lo, hi = left, min(width, left + w)
    for r in range(rows):
        ih = ih0 + r
        dst = band.ctypes.data + r * width * cv * 4
        if ih < 0 or ih >= h:
            zero_bytes(dst, width * cv * 4)
            continue
        zero_bytes(dst, lo * cv * 4)
        zero_bytes(dst + hi * cv * 4, (width - hi) * cv * 4)
        if blocked:
            _copied_row(x, band, r, ih, lo, hi, left)
        else:
            _transposed_row(x, band, r, ih, lo, hi, left)


# -- steps 2 and 3: transforms over 16-channel vectors ----------------------------------

@njit
def _input_tiles(band: np.ndarray, v: np.ndarray, plane: int, tmp: np.ndarray, m: int,
                 tile_rows: int, tw: int) -> None:
    """Product matrix a·i + j (at v[(a·i + j)·plane:], tiles × channels of band) gets
    (Bᵀ d B)[i, j] of each tile, tiles row-major over the chunk."""
    a = m + 2
    blocks = band.shape[2] // LANES
    row = band.shape[1] * band.shape[2] * 4  # bytes between input rows
    plane *= 4  # bytes between product matrices
    b0, v0, t0 = band.ctypes.data, v.ctypes.data, tmp.ctypes.data
    for ty in range(tile_rows):
        for tx in range(tw):
            k = ty * tw + tx
            for cb in range(blocks):
                src = b0 + ((m * ty * band.shape[1] + m * tx) * band.shape[2] + cb * LANES) * 4
                dst = v0 + (k * band.shape[2] + cb * LANES) * 4
                # Down each column of the tile into tmp[i, j], then across each row of tmp.
                for j in range(a):
                    if m == 4:
                        _BT6(src + j * band.shape[2] * 4, row, t0 + j * _VB, a * _VB)
                    else:
                        _BT4(src + j * band.shape[2] * 4, row, t0 + j * _VB, a * _VB)
                for i in range(a):
                    if m == 4:
                        _BT6(t0 + i * a * _VB, _VB, dst + a * i * plane, plane)
                    else:
                        _BT4(t0 + i * a * _VB, _VB, dst + a * i * plane, plane)


@njit
def _output_tiles(p: np.ndarray, plane: int, band: np.ndarray, tmp: np.ndarray, m: int,
                  tile_rows: int, tw: int, cb0: int, cb1: int) -> None:
    """band[m·ty + i, m·tx + j, :] = (Aᵀ M A)[i, j] of tile (ty, tx) from the products
    (matrix s at p[s·plane:], tiles × channels of band), channel blocks cb0:cb1."""
    a = m + 2
    row = band.shape[1] * band.shape[2] * 4
    plane *= 4
    p0, b0, t0 = p.ctypes.data, band.ctypes.data, tmp.ctypes.data
    for ty in range(tile_rows):
        for tx in range(tw):
            k = ty * tw + tx
            for cb in range(cb0, cb1):
                src = p0 + (k * band.shape[2] + cb * LANES) * 4
                dst = b0 + ((m * ty * band.shape[1] + m * tx) * band.shape[2] + cb * LANES) * 4
                # Across each row of the product tile into tmp[i, j], then down each column.
                for i in range(a):
                    if m == 4:
                        _AT6(src + a * i * plane, plane, t0 + i * m * _VB, _VB)
                    else:
                        _AT4(src + a * i * plane, plane, t0 + i * m * _VB, _VB)
                for j in range(m):
                    if m == 4:
                        _AT6(t0 + j * _VB, m * _VB, dst + j * band.shape[2] * 4, row)
                    else:
                        _AT4(t0 + j * _VB, m * _VB, dst + j * band.shape[2] * 4, row)


# -- the whole convolution ---------------------------------------------------------------

@njit(cache=True, error_model="numpy")
def winograd_conv(t: int, x: np.ndarray, up: np.ndarray, bias: np.ndarray, y: np.ndarray, m: int,
                  top: int, left: int, oh: int, ow: int, th: int, tw: int, chunk_rows: int,
                  nthreads: int, band: np.ndarray, v: np.ndarray, prod: np.ndarray,
                  out: np.ndarray, tmp: np.ndarray, edge: np.ndarray, acc: np.ndarray,
                  code: np.ndarray, prm: np.ndarray, full0: np.ndarray, full1: np.ndarray,
                  vecs: np.ndarray, scratch: np.ndarray, groups: int, c: int, mo: int,
                  x_blocked: bool, y_blocked: bool, stream: bool) -> None:
    """x (n, c, h, w), or (n, ⌈c/16⌉, h, w·16) when ``x_blocked``; up (S, packed c × M)
    the transformed filters; bias (≥ M: zeros past M); y (n·M, oh·ow), or (n·⌈M/16⌉,
    oh·ow·16) when ``y_blocked``. A task is a chunk of tile rows and one of ``groups``
    runs of output channels (whole
    strips of NR; each thread's tasks share a run, so it streams only that part of U). Per
    thread, channels padded to whole vectors (cv, mv): band (m·rows + 2, m·tw + 2, cv),
    v (S·plane) and prod (S·plane) the product matrices (tiles × cv, tiles × mv), out
    (m·rows, m·tw, mv), tmp (a·a·16), edge (MR·NR) and acc (16, m·rows·ow) staging 16
    output channels for the epilogue."""
    n = x.shape[0]
    s_count = up.shape[0]
    cv, mv = band.shape[3], out.shape[3]
    plane_v, plane_p = v.shape[1] // s_count, prod.shape[1] // s_count
    per_image = -(-th // chunk_rows)
    chunks = n * per_image
    strips = -(-mo // NR)
    run = -(-strips // groups)  # strips per group
    tasks = chunks * groups
    per = -(-tasks // nthreads)
    for task in range(t * per, min(tasks, (t + 1) * per)):
        s0 = task // chunks * run
        s1 = min(strips, s0 + run)
        if s0 >= s1:
            continue
        img = task % chunks // per_image
        ty0 = task % chunks % per_image * chunk_rows
        rows = min(chunk_rows, th - ty0)
        tiles = rows * tw
        _load_band(x[img], band[t], m * ty0 - top, m * rows + 2, left, x_blocked)
        _input_tiles(band[t], v[t], plane_v, tmp[t], m, rows, tw)
        # Whole panels and strips: the planes have room and U is zero-padded, so no
        # ragged edges to patch up.
        for s in range(s_count):
            gemm_rows(-(-tiles // MR) * MR, (s1 - s0) * NR, c,
                      v[t].ctypes.data + s * plane_v * 4, cv, up[s][s0 * c * NR:], prod[t],
                      s * plane_p + s0 * NR, mv, edge[t])
        _output_tiles(prod[t], plane_p, out[t], tmp[t], m, rows, tw, s0 * NR // LANES,
                      min(mv // LANES, s1 * NR // LANES))
        if y_blocked:
            _write_blocked(out[t], bias, y, img, -(-mo // LANES), m * ty0,
                           min(oh, m * (ty0 + rows)), ow, s0 * NR, min(mo, s1 * NR),
                           acc[t], code, prm, full0, full1, vecs, scratch[t], stream)
        else:
            _write_out(out[t], bias, y, img, mo, m * ty0, min(oh, m * (ty0 + rows)), ow,
                       s0 * NR, min(mo, s1 * NR), acc[t], code, prm, full0, full1, vecs,
                       scratch[t])


@njit(error_model="numpy")
def _write_blocked(out: np.ndarray, bias: np.ndarray, y: np.ndarray, img: int, mb: int,
                   r0: int, r1: int, ow: int, lo: int, hi: int, acc: np.ndarray,
                   code: np.ndarray, prm: np.ndarray, full0: np.ndarray, full1: np.ndarray,
                   vecs: np.ndarray, scratch: np.ndarray, stream: bool) -> None:
    """Output rows r0:r1, channel blocks of lo:hi (lo a multiple of 16) of image img from
    the channel-last band out (rows, cols, ≥ 16·⌈M/16⌉), plus bias, into the blocked y
    (images·mb, pixels·16): each block's run of 16 channels a pixel is contiguous in the
    band, gathered into acc and stored through the epilogue (depthwise_c16.emit_blocked).
    Lanes past M hold what zero filters and bias give."""
    size = (r1 - r0) * ow
    st, of = acc.reshape(-1), out.reshape(-1)
    cols, mv = out.shape[1], out.shape[2]
    for cb in range(lo, hi, LANES):
        for r in range(r1 - r0):
            for col in range(ow):
                at = (r * ow + col) * LANES
                src = (r * cols + col) * mv + cb
                for j in range(LANES):
                    st[np.uint64(at + j)] = of[np.uint64(src + j)] + bias[np.uint64(cb + j)]
        emit_blocked(st, size, y, img * mb + cb // LANES, r0 * ow * LANES, code, prm, full0,
                     full1, vecs, scratch, stream)


@njit(error_model="numpy")
def _write_out(out: np.ndarray, bias: np.ndarray, y: np.ndarray, img: int, mo: int, r0: int,
               r1: int, ow: int, lo: int, hi: int, acc: np.ndarray, code: np.ndarray,
               prm: np.ndarray, full0: np.ndarray, full1: np.ndarray, vecs: np.ndarray,
               scratch: np.ndarray) -> None:
    """Output rows r0:r1, channels lo:hi (lo a multiple of 16) of image img from the
    channel-last band out (rows, cols, ≥ M), plus bias, in NCHW — through the epilogue (16
    channels staged in acc at a time) if any."""
    mv = out.shape[2]
    p = y.shape[1]
    size = (r1 - r0) * ow
    epilogue = code.shape[0] > 0
    blocks, cols = min(hi, mo // LANES * LANES), ow // LANES * LANES
    for cb in range(lo, blocks, LANES):
        for r in range(r1 - r0):
            for col in range(0, cols, LANES):
                src = out.ctypes.data + ((r * out.shape[1] + col) * mv + cb) * 4
                if epilogue:
                    transpose16(src, mv * 4, acc.ctypes.data + (r * ow + col) * 4,
                                acc.shape[1] * 4, bias.ctypes.data + cb * 4)
                else:
                    transpose16(src, mv * 4,
                                y.ctypes.data + ((img * mo + cb) * p + (r0 + r) * ow + col) * 4,
                                p * 4, bias.ctypes.data + cb * 4)
            for j in range(LANES):  # the columns past the last whole block
                dst = acc[j] if epilogue else y[img * mo + cb + j, r0 * ow:]
                for col in range(cols, ow):
                    dst[r * ow + col] = out[r, col, cb + j] + bias[cb + j]
        if epilogue:
            for j in range(LANES):
                run_epilogue(acc[j, :size], y, img * mo + cb + j, r0 * ow, code, prm, full0,
                             full1, vecs, scratch)
    for ch in range(max(lo, blocks), hi):  # the channels past the last whole block
        dst = acc[0, :size] if epilogue else y[img * mo + ch, r0 * ow:r1 * ow]
        b = bias[ch]
        for r in range(r1 - r0):
            src = out[r]
            for col in range(ow):
                dst[r * ow + col] = src[col, ch] + b
        if epilogue:
            run_epilogue(dst, y, img * mo + ch, r0 * ow, code, prm, full0, full1, vecs, scratch)


def filter_transform(w: np.ndarray, g: np.ndarray, up: np.ndarray) -> None:
    """up[i·a + j] = the packed (c × M) matrix of (G w[o, c] Gᵀ)[i, j], computed in float64
    and rounded once."""
    a = g.shape[0]
    mo, c = w.shape[:2]
    g2 = np.einsum("ik,jl->ijkl", g, g).reshape(a * a, 9)
    u = g2 @ w.reshape(mo * c, 9).astype(np.float64).T
    ut = np.ascontiguousarray(u.reshape(a * a, mo, c).transpose(0, 2, 1), np.float32)
    pack_filters(ut, up)


@njit(cache=True)
def pack_filters(ut: np.ndarray, up: np.ndarray) -> None:
    s_count, c, mo = ut.shape
    for s in range(s_count):
        pack_b(ut[s].reshape(-1), mo, c, mo, up[s])


# -- tactic ------------------------------------------------------------------------------

def _winograd_shape(g: Conv2d | None) -> bool:
    """A one-group 3×3 convolution at stride 1 without dilation."""
    return (g is not None and g.kh == g.kw == 3 and g.sh == g.sw == 1
            and g.dh == g.dw == 1 and g.group == 1)


def applies(spec: LayerSpec) -> bool:
    return _winograd_shape(conv2d(spec))


def applies_blocked(spec: LayerSpec) -> bool:
    """The same, channel-blocked in and out."""
    g = conv2d(spec, blocked=True)
    return (g is not None and _winograd_shape(g) and g.x_blocked and g.y_blocked
            and blocked_epilogue_ok(spec))


def chunk_rows(th: int, tw: int, images: int, nthreads: int) -> int:
    """Tile rows per chunk: at most about CHUNK_TILES tiles, in even chunks whose number
    (over all images) is a multiple of the threads where the rows allow — a fork-join
    region lasts as long as its busiest thread (7 tile rows as 6 + 1 took 6/7 of the
    time of one thread, as 4 + 3 it takes 4/7)."""
    count = -(-th // max(1, -(-CHUNK_TILES // tw)))
    while (images * count) % nthreads and count < th:
        count += 1
    return -(-th // count)


def groups(n: int, th: int, tw: int, m_out: int, nthreads: int) -> int:
    """Runs of output channels to split the threads over (else 1: chunks of tiles).

    With few tiles per thread (batch 1 on small planes), splitting the tiles leaves every
    thread streaming all of U — S·C·M floats, 9.4 MB for a 512-channel F(2×2) layer — for
    tiles/threads rows of GEMM each, about tiles / (2·threads) FLOPs a byte: bound by U's
    bandwidth. Each thread then reads its own part of U instead and transforms the whole
    input (repeated on each thread). Measured in CRNN at batch 1: 256→512 F(4×4) at 4×32
    (8 tiles) 1.15 → 0.74 ms, 512→512 F(2×2) at 4×32 (32 tiles) 1.80 → 1.34 ms; but with
    49–64 tiles the repeated input transform cost more than it saved (ResNet-50's F(2×2)
    at 14×14 0.51 → 0.56 ms)."""
    if (nthreads > 1 and n * th * tw <= SPLIT_TILES * nthreads
            and -(-m_out // NR) >= 2 * nthreads):
        return nthreads
    return 1


def vectors(channels: int) -> int:
    """Channels rounded up to whole vectors (the padding stays zero, or is never read)."""
    return -(-channels // LANES) * LANES


def plane(tiles: int, channels: int) -> int:
    """Floats per product matrix: whole MR panels of tiles (the GEMM reads them), and an
    odd number of cache lines, so that the S matrices a tile transform reads or writes at
    once fall into different cache sets (4 KiB-aligned matrices made the transforms 7×
    slower at 64 channels and 80 tiles)."""
    lines = -(-tiles // MR) * MR * channels // LANES
    return LANES * (lines + 1 - lines % 2)


def _maker(m: int):  # type: ignore[no-untyped-def]
    gmat = _G4 if m == 4 else _G2
    s = (m + 2) ** 2

    def make(spec: LayerSpec, geo: Conv2d, epi: Epilogue, nthreads: int) -> RunFn:
        th, tw = -(-geo.oh // m), -(-geo.ow // m)
        split = groups(geo.n, th, tw, geo.m, nthreads)
        # Splitting by channels: each image one chunk (the tiles fit one).
        rows = th if split > 1 else chunk_rows(th, tw, geo.n, nthreads)
        up = aligned_zeros((s, packed_b_size(geo.c, geo.m)))
        cv, mv = vectors(geo.c), -(-geo.m // NR) * NR
        work = [workspace.scratch(shape) for shape in (
            (nthreads, m * rows + 2, m * tw + 2, cv),  # band
            (nthreads, s * plane(rows * tw, cv)),  # v
            (nthreads, s * plane(rows * tw, mv)),  # prod
            (nthreads, m * rows, m * tw, mv),  # out
            (nthreads, s * LANES),  # tmp
            (nthreads, MR * NR),  # edge
            (nthreads, LANES, m * rows * geo.ow))]  # acc
        blocked, mb = geo.y_blocked, -(-geo.m // LANES)
        args = EpilogueArgs(epi, spec.outputs[0].shape, nthreads,
                            m * rows * geo.ow * (LANES if blocked else 1))
        zeros = np.zeros(geo.m, np.float32)
        zeros.flags.writeable = False  # a constant bias
        padded = aligned_zeros(mb * LANES)  # a blocked output's bias, whole blocks
        filters = Derived(lambda w: filter_transform(w, gmat, up))

        def prepare(inputs: Sequence[np.ndarray | None],
                    outputs: Sequence[np.ndarray]) -> Thunk:
            x, w = inputs[0], inputs[1]
            assert x is not None and w is not None
            full0, full1 = args.fulls(inputs)
            bias = bias_of(inputs, geo, zeros)
            if blocked:  # the _nchw16c tactics: blocked in and out
                x = x.reshape(geo.n, vectors(geo.c) // LANES, geo.h, geo.w * LANES)
                y = out_rows(outputs[0], geo.n * mb, geo.pixels * LANES)
            else:
                y = out_rows(outputs[0], geo.n * geo.m, geo.pixels)
            call = fork_call(winograd_conv, nthreads, x, up, padded if blocked else bias, y, m,
                             geo.top, geo.left, geo.oh, geo.ow, th, tw, rows, nthreads,
                             *(a.array for a in work), epi.code, epi.prm, full0, full1,
                             args.vecs, args.scratch.array, split, geo.c, geo.m,
                             Fixed(blocked), Fixed(blocked),
                             blocked and streams(spec.outputs[0].shape))
            if blocked:
                call = with_bias_copy(call, bias, padded)
            return filters.before(w, with_registers(call, args, inputs))

        return runner(prepare)

    return make


_make4, _make2 = _maker(4), _maker(2)


@tactic("Conv", "winograd4", applies=applies, native_epilogue=native_epilogue, priority=20)
def bind_winograd4(spec: LayerSpec) -> RunFn:
    return bind_conv(spec, _make4)


@tactic("Conv", "winograd2", applies=applies, native_epilogue=native_epilogue, priority=15)
def bind_winograd2(spec: LayerSpec) -> RunFn:
    return bind_conv(spec, _make2)


@tactic("Conv", "winograd4_nchw16c", applies=applies_blocked, native_epilogue=native_epilogue,
        priority=20)
def bind_winograd4_nchw16c(spec: LayerSpec) -> RunFn:
    return bind_conv(spec, _make4, blocked=True)


@tactic("Conv", "winograd2_nchw16c", applies=applies_blocked, native_epilogue=native_epilogue,
        priority=15)
def bind_winograd2_nchw16c(spec: LayerSpec) -> RunFn:
    return bind_conv(spec, _make2, blocked=True)
