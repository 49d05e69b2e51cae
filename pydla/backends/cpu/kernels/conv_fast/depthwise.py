"""Depthwise convolution (group = channels = output channels), any kernel, stride, dilation
and padding: a direct numba loop per (image, channel) plane.

Stride 1 with the output the input's size (the usual case) reads the plane in place: on
rows where every tap is inside, output position p reads input p + a constant per tap, so
the whole interior is one long vectorized pass; border columns and rows are redone with
their valid taps only. Anything else first copies the plane into zero-bordered phase
planes (conv_fast.phases), where every tap is again one long unit-stride pass over the
output grid. A 3×3 kernel runs its nine taps in one pass; the plane then gets its bias
and epilogue.
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
from pydla.backends.cpu.kernels.conv_fast.geometry import Conv2d, conv2d
from pydla.backends.cpu.kernels.conv_fast.phases import layout, split
from pydla.backends.cpu.kernels.conv_fast.simd import copy_bytes, fill
from pydla.backends.cpu.registry import tactic
from pydla.backends.cpu.workspace import aligned_zeros


@njit(inline="always")
def _phase(planes: np.ndarray, i: int, k: int, sh: int, sw: int, dh: int, dw: int,
           wq: int) -> np.ndarray:
    """Tap (i, k)'s inputs for grid positions 0, 1, … (a view)."""
    a, b = i * dh, k * dw
    return planes[(a % sh) * sw + b % sw, (a // sh) * wq + b // sw:]


@njit(inline="always", error_model="numpy")
def _taps9(g: np.ndarray, planes: np.ndarray, wt: np.ndarray, sh: int, sw: int, dh: int,
           dw: int, wq: int, b: np.float32) -> None:
    """g[p] = b + Σ of the nine 3×3 taps, in one pass."""
    a0 = _phase(planes, 0, 0, sh, sw, dh, dw, wq)
    a1 = _phase(planes, 0, 1, sh, sw, dh, dw, wq)
    a2 = _phase(planes, 0, 2, sh, sw, dh, dw, wq)
    b0 = _phase(planes, 1, 0, sh, sw, dh, dw, wq)
    b1 = _phase(planes, 1, 1, sh, sw, dh, dw, wq)
    b2 = _phase(planes, 1, 2, sh, sw, dh, dw, wq)
    c0 = _phase(planes, 2, 0, sh, sw, dh, dw, wq)
    c1 = _phase(planes, 2, 1, sh, sw, dh, dw, wq)
    c2 = _phase(planes, 2, 2, sh, sw, dh, dw, wq)
    w00, w01, w02 = wt[0, 0], wt[0, 1], wt[0, 2]
    w10, w11, w12 = wt[1, 0], wt[1, 1], wt[1, 2]
    w20, w21, w22 = wt[2, 0], wt[2, 1], wt[2, 2]
    for p in range(g.shape[0]):
        g[p] = (b + w00 * a0[p] + w01 * a1[p] + w02 * a2[p] + w10 * b0[p] + w11 * b1[p]
                + w12 * b2[p] + w20 * c0[p] + w21 * c1[p] + w22 * c2[p])


@njit(inline="always", error_model="numpy")
def _tap(g: np.ndarray, src: np.ndarray, wv: np.float32) -> None:
    for p in range(g.shape[0]):
        g[p] += wv * src[p]


@njit(inline="always", error_model="numpy")
def _column(x: np.ndarray, wt: np.ndarray, b: np.float32, out: np.ndarray, q: int, r0: int,
            r1: int, top: int, left: int, dh: int, dw: int) -> None:
    """Output column q for rows r0:r1 (every tap row inside the image), only the taps whose
    column is inside: the border columns that the flat pass gets wrong."""
    h, w = x.shape
    kh, kw = wt.shape
    j0 = max(0, -(-(left - q) // dw)) if q < left else 0
    j1 = min(kw, (w - 1 - q + left) // dw + 1)
    for r in range(r0, r1):
        acc = b
        for i in range(kh):
            row = x[r - top + i * dh]
            for j in range(j0, j1):
                acc += wt[i, j] * row[q - left + j * dw]
        out[r * w + q] = acc


@njit(inline="always", error_model="numpy")
def _edge_row(x: np.ndarray, wt: np.ndarray, b: np.float32, out: np.ndarray, r: int,
              top: int, left: int, dh: int, dw: int) -> None:
    """Output row r (some tap rows outside the image), tap by tap over the columns where
    that tap is inside."""
    h, w = x.shape
    kh, kw = wt.shape
    o = out[r * w:(r + 1) * w]
    fill(o, b)
    for i in range(kh):
        ih = r - top + i * dh
        if ih < 0 or ih >= h:
            continue
        for j in range(kw):
            off = j * dw - left
            lo, hi = max(0, -off), min(w, w - off)
            if lo < hi:
                dst, src, wv = o[lo:hi], x[ih, lo + off:hi + off], wt[i, j]
                for q in range(hi - lo):
                    dst[q] += wv * src[q]


@njit(inline="always", error_model="numpy")
def _same(x: np.ndarray, wt: np.ndarray, b: np.float32, out: np.ndarray, top: int, left: int,
          dh: int, dw: int) -> None:
    """A stride-1 plane whose output is the input's size, read in place: on the interior
    rows, output position p reads the flat input at p + a constant per tap, one long
    vectorized pass (border columns come out wrong and are redone); the rows near the top
    and bottom go tap by tap."""
    h, w = x.shape
    kh, kw = wt.shape
    right, bottom = (kw - 1) * dw - left, (kh - 1) * dh - top
    r0, r1 = top, max(top, h - bottom)
    xf = x.reshape(-1)
    pa, pb = r0 * w + left, r1 * w - right
    if pa < pb:
        o = out[pa:pb]
        first = (r0 - top) * w  # input index of tap (0, 0) at pa, before the column shift
        if kh == 3 and kw == 3:
            a0, a1, a2 = xf[first:], xf[first + dw:], xf[first + 2 * dw:]
            s1 = first + dh * w
            b0, b1, b2 = xf[s1:], xf[s1 + dw:], xf[s1 + 2 * dw:]
            s2 = first + 2 * dh * w
            c0, c1, c2 = xf[s2:], xf[s2 + dw:], xf[s2 + 2 * dw:]
            w00, w01, w02 = wt[0, 0], wt[0, 1], wt[0, 2]
            w10, w11, w12 = wt[1, 0], wt[1, 1], wt[1, 2]
            w20, w21, w22 = wt[2, 0], wt[2, 1], wt[2, 2]
            for p in range(pb - pa):
                o[p] = (b + w00 * a0[p] + w01 * a1[p] + w02 * a2[p] + w10 * b0[p]
                        + w11 * b1[p] + w12 * b2[p] + w20 * c0[p] + w21 * c1[p]
                        + w22 * c2[p])
        else:
            fill(o, b)
            for i in range(kh):
                for j in range(kw):
                    _tap(o, xf[first + i * dh * w + j * dw:], wt[i, j])
    for q in range(min(left, w)):
        _column(x, wt, b, out, q, r0, r1, top, left, dh, dw)
    for q in range(max(0, w - right), w):
        _column(x, wt, b, out, q, r0, r1, top, left, dh, dw)
    for r in range(min(r0, h)):
        _edge_row(x, wt, b, out, r, top, left, dh, dw)
    for r in range(r1, h):
        _edge_row(x, wt, b, out, r, top, left, dh, dw)


# fastmath "contract" only: a·b + c as one fused multiply-add (one rounding, not two).
@njit(cache=True, error_model="numpy", fastmath={"contract"})
def depthwise(t: int, x: np.ndarray, wt: np.ndarray, bias: np.ndarray, y: np.ndarray,
              sh: int, sw: int, dh: int, dw: int, top: int, left: int, oh: int, ow: int,
              nthreads: int, planes: np.ndarray, used: np.ndarray, grid: np.ndarray,
              acc: np.ndarray, code: np.ndarray, prm: np.ndarray, full0: np.ndarray,
              full1: np.ndarray, vecs: np.ndarray, scratch: np.ndarray) -> None:
    """x (n, c, h, w), wt (c, kh, kw), y (n·c, oh·ow). Per thread: planes (sh·sw, size),
    grid (oh·wq) and acc (oh·ow) staging the epilogue's input."""
    n, c = x.shape[0], x.shape[1]
    kh, kw = wt.shape[1], wt.shape[2]
    wq = grid.shape[1] // oh
    tasks = n * c
    per = -(-tasks // nthreads)
    epilogue = code.shape[0] > 0
    same = sh == sw == 1 and oh == x.shape[2] and ow == x.shape[3]
    ph, g = planes[t], grid[t]
    for task in range(t * per, min(tasks, (t + 1) * per)):
        img, ch = task // c, task % c
        if same:
            dst = acc[t] if epilogue else y[task]
            _same(x[img, ch], wt[ch], bias[ch], dst, top, left, dh, dw)
            if epilogue:
                run_epilogue(dst, y, task, 0, code, prm, full0, full1, vecs, scratch[t])
            continue
        split(x[img, ch], ph, sh, sw, top, left, wq, used)
        b = bias[ch]
        if kh == 3 and kw == 3:
            _taps9(g, ph, wt[ch], sh, sw, dh, dw, wq, b)
        else:
            fill(g, b)
            for i in range(kh):
                for k in range(kw):
                    _tap(g, _phase(ph, i, k, sh, sw, dh, dw, wq), wt[ch, i, k])
        dst = acc[t] if epilogue else y[task]
        for r in range(oh):
            copy_bytes(dst.ctypes.data + r * ow * 4, g.ctypes.data + r * wq * 4, ow * 4)
        if epilogue:
            run_epilogue(dst, y, task, 0, code, prm, full0, full1, vecs, scratch[t])


def applies(spec: LayerSpec) -> bool:
    g = conv2d(spec)
    return g is not None and g.group == g.c == g.m


def _make(spec: LayerSpec, geo: Conv2d, epi: Epilogue, nthreads: int) -> RunFn:
    p = geo.pixels
    wq, size = layout(geo)
    # The phase planes' borders are zeroed once, here, and never written: not scratch.
    planes = aligned_zeros((nthreads, geo.sh * geo.sw, size))
    used = np.ones(geo.sh * geo.sw, np.bool_)
    work = [workspace.scratch(shape) for shape in (
        (nthreads, geo.oh * wq),  # grid
        (nthreads, p))]  # acc
    args = EpilogueArgs(epi, spec.outputs[0].shape, nthreads, p)
    zeros = np.zeros(geo.m, np.float32)
    code, prm, vecs = epi.code, epi.prm, args.vecs

    def prepare(inputs: Sequence[np.ndarray | None], outputs: Sequence[np.ndarray]) -> Thunk:
        x, w = inputs[0], inputs[1]
        assert x is not None and w is not None
        full0, full1 = args.fulls(inputs)
        scratch = args.scratch.array
        grid, acc = (s.array for s in work)
        call = fork_call(depthwise, nthreads, x, w.reshape(geo.m, geo.kh, geo.kw),
                         bias_of(inputs, geo, zeros), out_rows(outputs[0], geo.n * geo.m, p),
                         geo.sh, geo.sw, geo.dh, geo.dw, geo.top, geo.left, geo.oh, geo.ow,
                         nthreads, planes, used, grid, acc, code, prm, full0, full1, vecs,
                         scratch)
        return with_registers(call, args, inputs)

    return runner(prepare)


@tactic("Conv", "depthwise", applies=applies, native_epilogue=native_epilogue, priority=30)
def bind_depthwise(spec: LayerSpec) -> RunFn:
    return bind_conv(spec, _make)
