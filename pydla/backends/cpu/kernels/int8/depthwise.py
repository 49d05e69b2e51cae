"""int8 depthwise convolution (one input channel per output channel), stride 1 or 2 along
the rows (any stride down the columns) with undilated rows of taps: the horizontal taps are
the dot product's KG bytes.

conv.py interleaves KG *channels* per pixel; a depthwise layer has one, and would waste
KG-1 of every KG products on zero weights (and, with R rows of output channels per tile,
R-1 of every R rows: a strided depthwise layer there ran 10-20× slower than here). Here
each channel's zero-point-padded plane is copied as windows — byte j of window p is
padded[sw·p + j] — so one vpdpbusd takes 4 taps of a kernel row (3×3: 3 instructions per
16 pixels, not 9), one vpmaddwd 2 on the AVX2 path. Output pixel ox reads window ox, and
KG-group g of a wide kernel window ox + g·KG/sw (KG is a multiple of sw). Rows are split
into sh phases as conv.py does — phase a holds padded rows a, a + sh, … — so that kernel
row i (offset i·dh rows) is phase i·dh % sh at row oy + i·dh // sh: for every stride the
tile's pixels are consecutive windows of each tap. The window copy is interleave16 with a
row step of one byte (sw 1), or whole 16/32-bit words of the row (sw 2).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
from numba import njit

from pydla.backends.cpu import threads
from pydla.backends.cpu.fork import fork_call
from pydla.backends.cpu.kernels.int8.dot import AVX2, PATHS, VNNI, interleave16, micro_kernel
from pydla.backends.cpu.kernels.int8.requant import LANES, requant
from pydla.backends.cpu.kernels.int8.thunk import bound
from pydla.backends.cpu.steps import Fixed
from pydla.backends.cpu.workspace import aligned_zeros

_MK_VNNI = micro_kernel(VNNI.name, 1, VNNI.cols, True)
_MK_AVX2 = micro_kernel(AVX2.name, 1, AVX2.cols, True)
PATH_IDS = {VNNI.name: 0, AVX2.name: 1}
_VC0, _VC1 = VNNI.vec_cols, AVX2.vec_cols


def applies(group: int, n: int, channels: int, strides: Sequence[int],
            dilations: Sequence[int]) -> bool:
    return group == channels == n and strides[1] in (1, 2) and dilations[1] == 1


def pack(w: np.ndarray, path_name: str) -> np.ndarray:
    """(C, 1, kh, kw) int8 → (C, kh·groups·KG): each kernel row's taps in KG-groups, the
    last group padded with zero weights; int16 on the AVX2 path."""
    path = PATHS[path_name]
    c, _, kh, kw = w.shape
    groups = -(-kw // path.kg)
    out = np.zeros((c, kh, groups * path.kg), np.int16)
    out[:, :, :kw] = w[:, 0]
    dtype = np.int8 if path.weight_bytes == 1 else np.int16
    return np.ascontiguousarray(out.reshape(c, -1)).astype(dtype)


@njit(cache=True, error_model="numpy", boundscheck=False)
def window_task(t: int, nthreads: int, x: np.ndarray, xi: np.ndarray, row: np.ndarray,
                kg: int, flip: int, zp: int, pt: int, pl: int, sh: int, sw: int, hq: int,
                wq: int, plane: int) -> None:  # pragma: no cover
    """Thread t's channels: xi[((a·plane + y)·wq + p)·KG + j] = padded[a + sh·y, sw·p + j]
    (see the module docstring); ``row`` is per-thread scratch for one padded row plus
    slack."""
    batch, channels, height, width = x.shape
    units = batch * channels
    fill = np.uint8(zp)
    f = np.uint8(flip)
    buf = row[t]
    buf[:] = fill  # the padding columns; data rows overwrite only the middle
    mid = buf[pl:pl + width]  # slices indexed from 0: LLVM knows no index wraps, vectorizes
    words = buf.view(np.uint16)
    lo16, hi16 = words[:wq], words[1:wq + 1]
    xi32 = xi.view(np.uint32)
    xi16 = xi.view(np.uint16)
    for u in range(t * units // nthreads, (t + 1) * units // nthreads):
        img = u // channels
        c = u % channels
        padded = True  # whether mid holds the fill now
        for yy in range(sh * hq):
            a = yy // hq
            y = a + sh * (yy % hq)
            iy = y - pt
            if 0 <= iy < height:
                src = x[img, c, iy]
                for i in range(width):
                    mid[i] = src[i] ^ f
                padded = False
            elif not padded:
                mid[:] = fill
                padded = True
            at = (u * sh * plane + a * plane + (yy % hq) * wq) * kg
            if sw == 2:
                # window p: the 16-bit words p (and p + 1 for KG 4) of the row
                if kg == 4:
                    dst32 = xi32[at // 4:at // 4 + wq]
                    for p in range(wq):
                        dst32[p] = np.uint32(lo16[p]) | (np.uint32(hi16[p]) << 16)
                else:
                    dst16 = xi16[at // 2:at // 2 + wq]
                    for p in range(wq):
                        dst16[p] = lo16[p]
                continue
            dst = xi.ctypes.data + at
            # 16 pixels at a time; the last block overlaps the one before (same bytes)
            p = 0
            while p < wq:
                start = min(p, wq - 16) if wq >= 16 else 0
                if kg == 4:
                    interleave16(4, dst + 4 * start, buf.ctypes.data + start, 1, 0)
                else:
                    interleave16(2, dst + 2 * start, buf.ctypes.data + start, 1, 0)
                p += 16


@njit(cache=True, error_model="numpy", boundscheck=False)
def depthwise_task(t: int, nthreads: int, path_id: int, xi: np.ndarray, w: np.ndarray,
                   offsets: np.ndarray, corr: np.ndarray, scale: np.ndarray, out: np.ndarray,
                   out_kind: int, zp: np.float32, lo: np.float32, hi: np.float32,
                   res_kind: int, res: np.ndarray, r_zp: np.float32, r_scale: np.float32,
                   dq: np.float32,
                   scratch: np.ndarray, plane_bytes: int, wq: int, ow: int, oh: int,
                   qtiles: int) -> None:  # pragma: no cover
    vc = _VC0 if path_id == 0 else _VC1
    kg = 4 if path_id == 0 else 2
    batch, channels = out.shape[0], out.shape[1]
    taps = offsets.shape[0]
    b_row = w.shape[1] * w.itemsize
    acc = scratch[t]
    items = batch * channels * qtiles
    q_end = oh * wq
    for item in range(t * items // nthreads, (t + 1) * items // nthreads):
        qt = item % qtiles
        u = item // qtiles
        n = u % channels
        q0 = qt * vc
        v = xi.ctypes.data + u * plane_bytes + q0 * kg
        b = w.ctypes.data + n * b_row
        if path_id == 0:
            _MK_VNNI(1, taps, v, 0, offsets.ctypes.data, b, b_row, acc.ctypes.data)
        else:
            _MK_AVX2(1, taps, v, 0, offsets.ctypes.data, b, b_row, acc.ctypes.data)
        plane = u * out.shape[2]
        oy = q0 // wq
        while oy < oh and oy * wq < q0 + vc:
            s0 = max(q0, oy * wq)
            s1 = min(q0 + vc, oy * wq + ow, q_end)
            d = plane + oy * ow - oy * wq
            for c in range(s0, s1, LANES):
                requant(out_kind, res_kind, acc.ctypes.data + 4 * (c - q0),
                        corr.ctypes.data + 4 * n, scale.ctypes.data + 4 * n, 0,
                        out.ctypes.data + (d + c) * out.itemsize, min(LANES, s1 - c), zp, lo,
                        hi, res.ctypes.data + (d + c) * res.itemsize, r_zp, r_scale, dq)
            oy += 1


def bind(x: np.ndarray, w_original: np.ndarray, path_name: str, kernel: tuple[int, int],
         strides: Sequence[int], pads: Sequence[int], dilations: Sequence[int], flip: int,
         a_zp: int,
         corr: np.ndarray, scale: np.ndarray, out: np.ndarray, kinds: tuple[int, int],
         q: tuple[float, float, float], residual: np.ndarray | None,
         r_q: tuple[float, float, float]) -> Callable[[], object]:
    """The window copy and the dot products of one depthwise layer (applies() holds)."""
    path = PATHS[path_name]
    kh, kw = kernel
    batch, channels, height, width = x.shape
    oh, ow = out.shape[2:]
    pt, pl, pb, pr = pads
    sh, sw = int(strides[0]), int(strides[1])
    groups = -(-kw // path.kg)
    hp, wp = height + pt + pb, width + pl + pr
    hq, wq = -(-hp // sh), -(-wp // sw)
    qtiles = -(-(oh * wq) // path.vec_cols)
    # (phase, window offset within the phase) of each (kernel row, KG-group)
    taps = [((i * dilations[0]) % sh, (i * dilations[0]) // sh * wq + g * path.kg // sw)
            for i in range(kh) for g in range(groups)]
    plane = max(hq * wq, qtiles * path.vec_cols + max(p for _, p in taps))
    offsets = np.array([(a * plane + p) * path.kg for a, p in taps], np.int64)
    # whole 32-bit words (the window copy views it, and the row, as 16/32-bit words)
    xi = aligned_zeros(-(-(batch * channels * sh * plane * path.kg) // 4) * 4 + 64, np.uint8)
    wdata = pack(w_original.reshape(channels, 1, kh, kw), path_name)
    nthreads = threads.configure()
    # one padded row, the last window's KG bytes and interleave16's 16-byte reads after it
    row = aligned_zeros((nthreads, -(-(sw * wq + 2 * path.kg + 32) // 4) * 4), np.uint8)
    scratch = aligned_zeros((nthreads, path.vec_cols), np.int32)
    out3 = out.reshape(batch, channels, oh * ow)
    res3 = residual.reshape(batch, channels, oh * ow) if residual is not None else out3
    n_prep = min(nthreads, batch * channels)
    prepare = fork_call(window_task, n_prep, n_prep, x.view(np.uint8), xi, row, path.kg,
                        flip, a_zp, pt, pl, sh, sw, hq, wq, plane)
    compute = fork_call(depthwise_task, nthreads, nthreads, Fixed(PATH_IDS[path_name]), xi,
                           wdata, offsets, corr, scale, out3, Fixed(kinds[0]),
                           np.float32(q[0]), np.float32(q[1]), np.float32(q[2]),
                           Fixed(kinds[1]), res3, np.float32(r_q[0]), np.float32(r_q[1]),
                           np.float32(r_q[2]),
                           scratch, sh * plane * path.kg, wq, ow, oh, qtiles)
    return bound((prepare, compute), (xi, offsets, wdata, row, scratch, out3, res3, corr,
                                      scale))
