"""int8 2-D convolution on the vector paths: an interleaved, padded, phase-split copy of
the input, then register-blocked tiles of output channels × pixels (dot.py).

The input copy (``interleave_task``) holds, per image, group and quad of KG channels, the
zero-point-padded image split into stride phases — phase (a, b) is padded[a::sh, b::sw],
an Hq × Wq plane — with the quad's KG bytes side by side per pixel. Output pixel (oy, ox)
is then flat position q = oy·Wq + ox of every plane, and tap (i, j) reads phase
(i·dh % sh, j·dw % sw) at q + (i·dh // sh)·Wq + (j·dw // sw): for any stride and dilation,
one vector of L consecutive q is one contiguous load per tap, no im2col. Positions with
ox ≥ OW are computed and dropped (Wq - OW columns per row: 2 of 58 for a 3×3 on 56×56).
The copy is KG/C of an im2col's size; each plane has slack after it so that a tile's last
vector stays in bounds.
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

_MK_VNNI = micro_kernel(VNNI.name, VNNI.rows, VNNI.cols, True)
_MK_AVX2 = micro_kernel(AVX2.name, AVX2.rows, AVX2.cols, True)
PATH_IDS = {VNNI.name: 0, AVX2.name: 1}
# The paths' shapes as plain ints: numba reads module-level ints as constants.
_R0, _VC0, _KG0 = VNNI.rows, VNNI.vec_cols, VNNI.kg
_R1, _VC1, _KG1 = AVX2.rows, AVX2.vec_cols, AVX2.kg


@njit(cache=True, error_model="numpy", boundscheck=False)
def interleave_task(t: int, nthreads: int, x: np.ndarray, xi: np.ndarray, kg: int, flip: int,
                    zp: int, group: int, cg: int, quads: int, sh: int, sw: int, pt: int,
                    pl: int, hq: int, wq: int, plane: int,
                    used: np.ndarray) -> None:  # pragma: no cover
    """Thread t's share of the planes of xi (see the module docstring); phases no tap
    reads (``used[a·sw + b]`` 0: three of four for a 1×1 kernel at stride 2) are skipped."""
    batch, _, height, width = x.shape
    units = batch * group * quads * sh * sw
    fill = np.uint8(zp)
    f = np.uint8(flip)
    for u in range(t * units // nthreads, (t + 1) * units // nthreads):
        rest = u
        b = rest % sw
        rest //= sw
        a = rest % sh
        rest //= sh
        if not used[a * sw + b]:
            continue
        cq = rest % quads
        rest //= quads
        g = rest % group
        img = rest // group
        present = min(kg, cg - cq * kg)
        c0 = g * cg + cq * kg
        x_lo = max(0, (pl - b + sw - 1) // sw)
        x_hi = min(wq, max(x_lo, (width + pl - b + sw - 1) // sw))
        base = u * plane * kg
        for y in range(hq):
            iy = a + sh * y - pt
            row = base + y * wq * kg
            if iy < 0 or iy >= height:
                for i in range(wq * kg):
                    xi[row + i] = fill
                continue
            for i in range(x_lo * kg):
                xi[row + i] = fill
            for i in range(x_hi * kg, wq * kg):
                xi[row + i] = fill
            ix0 = b - pl
            lo = x_lo
            if present == kg and sw == 1:
                # whole quads on a stride-1 row: 16 pixels a vector, the rest below
                step = x.strides[1]
                src = x.ctypes.data + img * x.strides[0] + c0 * step + iy * x.strides[2] + ix0
                while lo + 16 <= x_hi:
                    if kg == 4:
                        interleave16(4, xi.ctypes.data + row + 4 * lo, src + lo, step, flip)
                    else:
                        interleave16(2, xi.ctypes.data + row + 2 * lo, src + lo, step, flip)
                    lo += 16
            if present == 4:
                s0, s1 = x[img, c0, iy], x[img, c0 + 1, iy]
                s2, s3 = x[img, c0 + 2, iy], x[img, c0 + 3, iy]
                for xx in range(lo, x_hi):
                    ix = ix0 + sw * xx
                    d = row + 4 * xx
                    xi[d] = s0[ix] ^ f
                    xi[d + 1] = s1[ix] ^ f
                    xi[d + 2] = s2[ix] ^ f
                    xi[d + 3] = s3[ix] ^ f
            elif present == 2 and kg == 2:
                s0, s1 = x[img, c0, iy], x[img, c0 + 1, iy]
                for xx in range(lo, x_hi):
                    ix = ix0 + sw * xx
                    d = row + 2 * xx
                    xi[d] = s0[ix] ^ f
                    xi[d + 1] = s1[ix] ^ f
            else:  # the group's last, partial quad: the missing channels' weights are 0
                for j in range(kg):
                    if j < present:
                        src = x[img, c0 + j, iy]
                        for xx in range(x_lo, x_hi):
                            xi[row + kg * xx + j] = src[ix0 + sw * xx] ^ f
                    else:
                        for xx in range(x_lo, x_hi):
                            xi[row + kg * xx + j] = fill


@njit(cache=True, error_model="numpy", boundscheck=False)
def conv_task(t: int, nthreads: int, path_id: int, xi: np.ndarray, w: np.ndarray,
              offsets: np.ndarray, corr: np.ndarray, scale: np.ndarray, out: np.ndarray,
              out_kind: int, zp: np.float32, lo: np.float32, hi: np.float32, res_kind: int,
              res: np.ndarray, r_zp: np.float32, r_scale: np.float32, dq: np.float32,
              scratch: np.ndarray,
              group: int, per: int, quads: int, taps: int, quad_bytes: int, wq: int, ow: int,
              oh: int, qtiles: int, nsplit: int) -> None:  # pragma: no cover
    """Thread t's share of the output tiles: (image, group, pixel tile, channel chunk)."""
    rows_r = _R0 if path_id == 0 else _R1
    vc = _VC0 if path_id == 0 else _VC1
    kg = _KG0 if path_id == 0 else _KG1
    batch = out.shape[0]
    row_blocks = w.shape[1] // rows_r
    b_row = w.shape[2] * w.itemsize
    acc = scratch[t]
    items = batch * group * qtiles * nsplit
    q_end = oh * wq
    for item in range(t * items // nthreads, (t + 1) * items // nthreads):
        s = item % nsplit
        rest = item // nsplit
        qt = rest % qtiles
        rest //= qtiles
        g = rest % group
        img = rest // group
        q0 = qt * vc
        v = xi.ctypes.data + ((img * group + g) * quads * quad_bytes) + q0 * kg
        for rb in range(s * row_blocks // nsplit, (s + 1) * row_blocks // nsplit):
            b = w.ctypes.data + (g * w.shape[1] + rb * rows_r) * b_row
            if path_id == 0:
                _MK_VNNI(quads, taps, v, quad_bytes, offsets.ctypes.data, b, b_row,
                         acc.ctypes.data)
            else:
                _MK_AVX2(quads, taps, v, quad_bytes, offsets.ctypes.data, b, b_row,
                         acc.ctypes.data)
            for r in range(rows_r):
                nl = rb * rows_r + r
                if nl >= per:
                    break
                n = g * per + nl
                plane = (img * out.shape[1] + n) * out.shape[2]
                if wq == ow:  # no dropped columns (1×1, no padding): one span
                    s1 = min(q0 + vc, q_end)
                    for c in range(q0, s1, LANES):
                        requant(out_kind, res_kind, acc.ctypes.data + 4 * (r * vc + c - q0),
                                corr.ctypes.data + 4 * n, scale.ctypes.data + 4 * n, 0,
                                out.ctypes.data + (plane + c) * out.itemsize,
                                min(LANES, s1 - c), zp, lo, hi,
                                res.ctypes.data + (plane + c) * res.itemsize, r_zp, r_scale,
                                dq)
                    continue
                oy = q0 // wq
                while oy < oh and oy * wq < q0 + vc:
                    s0 = max(q0, oy * wq)
                    s1 = min(q0 + vc, oy * wq + ow, q_end)
                    d = plane + oy * ow - oy * wq  # output index of flat position 0 of row oy
                    for c in range(s0, s1, LANES):
                        requant(out_kind, res_kind, acc.ctypes.data + 4 * (r * vc + c - q0),
                                corr.ctypes.data + 4 * n, scale.ctypes.data + 4 * n, 0,
                                out.ctypes.data + (d + c) * out.itemsize, min(LANES, s1 - c),
                                zp, lo, hi, res.ctypes.data + (d + c) * res.itemsize, r_zp,
                                r_scale, dq)
                    oy += 1


def bind(x: np.ndarray, wdata: np.ndarray, path_name: str, group: int, n: int, cg: int,
         kernel: tuple[int, int], strides: Sequence[int], pads: Sequence[int],
         dilations: Sequence[int], flip: int, a_zp: int, corr: np.ndarray, scale: np.ndarray,
         out: np.ndarray, kinds: tuple[int, int], q: tuple[float, float, float],
         residual: np.ndarray | None, r_q: tuple[float, float, float]) -> Callable[[], object]:
    """The two fork calls of one convolution, bound to these buffers; corr and scale hold
    LANES entries of slack (requant loads a vector where it spreads one)."""
    path = PATHS[path_name]
    kh, kw = kernel
    (sh, sw), (dh, dw) = strides, dilations
    pt, pl, pb, pr = pads
    batch, _, height, width = x.shape
    oh, ow = out.shape[2:]
    hq = -(-(height + pt + pb) // sh)
    wq = -(-(width + pl + pr) // sw)
    quads = -(-cg // path.kg)
    pix = []
    for i in range(kh):
        for j in range(kw):
            py, px = i * dh, j * dw
            phase = (py % sh) * sw + px % sw
            pix.append((phase, (py // sh) * wq + px // sw))
    qtiles = -(-(oh * wq) // path.vec_cols)
    reach = qtiles * path.vec_cols + max(p for _, p in pix)
    plane = max(hq * wq, reach)
    offsets = np.array([(ph * plane + p) * path.kg for ph, p in pix], np.int64)
    used = np.zeros(sh * sw, np.uint8)
    for ph, _ in pix:
        used[ph] = 1
    quad_bytes = sh * sw * plane * path.kg
    xi = aligned_zeros(batch * group * quads * quad_bytes + 64, np.uint8)
    nthreads = threads.configure()
    per = n // group
    units = batch * group * qtiles
    # Few pixel tiles (a 7×7 map): split the output channels too, or a thread would idle.
    nsplit = 1 if units >= 4 * nthreads else max(1, min(nthreads, int(wdata.shape[1]) // path.rows))
    scratch = aligned_zeros((nthreads, path.rows * path.vec_cols), np.int32)
    out3 = out.reshape(batch, n, oh * ow)
    res3 = residual.reshape(batch, n, oh * ow) if residual is not None else out3
    x8 = x.view(np.uint8)
    planes = batch * group * quads * sh * sw
    n_prep = min(nthreads, planes)
    prepare = fork_call(interleave_task, n_prep, n_prep, x8, xi, path.kg, flip,
                        a_zp, group, cg, quads, sh, sw, pt, pl, hq, wq, plane, used)
    compute = fork_call(conv_task, nthreads, nthreads, Fixed(PATH_IDS[path_name]), xi,
                           wdata, offsets, corr, scale, out3, Fixed(kinds[0]), np.float32(q[0]),
                           np.float32(q[1]), np.float32(q[2]), Fixed(kinds[1]), res3,
                           np.float32(r_q[0]), np.float32(r_q[1]), np.float32(r_q[2]), scratch,
                           group, per, quads,
                           kh * kw, quad_bytes, wq, ow, oh, qtiles, nsplit)
    return bound((prepare, compute), (xi, offsets, used, scratch, out3, res3, corr, scale))
