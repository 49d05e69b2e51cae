"""1×1 convolution on a plane of a few pixels as dot products: the ``gemv`` tactic.

Squeeze-excitation blocks run 1×1 convolutions on pooled vectors (1×1 planes): a GEMV of
a few hundred by a few hundred. Every GEMM-shaped kernel pads such a layer to whole
panels or stages planes of one pixel; here each output is a vectorised dot product of a
weight row (read in place) and the input column, the rows split over the threads only
when the weights are large enough to pay for the fork (fast_matmul.GEMV_PARALLEL_MIN),
and the layer's epilogue runs on each image's outputs at once when it reads no other
tensor (an activation: the common case), else channel by channel. ``gemv_nchw16c``: the
squeeze-excitation gate written into blocks of 16 channels (pydla.plan.layouts).
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
    out_rows,
    runner,
    with_bias_copy,
    with_registers,
)
from pydla.backends.cpu.kernels.conv_fast.epilogue import (
    Epilogue,
    EpilogueArgs,
    compile_epilogue,
    native_epilogue,
    run_epilogue,
)
from pydla.backends.cpu.kernels.conv_fast.geometry import BLOCK as L
from pydla.backends.cpu.kernels.conv_fast.geometry import Conv2d, conv2d
from pydla.backends.cpu.kernels.conv_fast.simd import copy_bytes
from pydla.backends.cpu.kernels.fast_math import FASTMATH_REDUCE
from pydla.backends.cpu.kernels.fast_matmul import GEMV_PARALLEL_MIN
from pydla.backends.cpu.registry import tactic
from pydla.backends.cpu.workspace import aligned_zeros

MAX_PIXELS = 4


@njit(inline="always", error_model="numpy", fastmath=FASTMATH_REDUCE)
def _rows(x: np.ndarray, w: np.ndarray, bias: np.ndarray, acc: np.ndarray, img: int,
          r0: int, r1: int) -> None:
    """acc[img, r, q] = bias[r] + Σ_i w[r, i] · x[img, i, q] for r0 ≤ r < r1."""
    c, p = x.shape[1], x.shape[2]
    for r in range(r0, r1):
        row = w[r]
        for q in range(p):
            s = np.float32(0)
            for i in range(c):
                s += row[i] * x[img, i, q]
            acc[img, r, q] = s + bias[r]


@njit(inline="always", error_model="numpy")
def _finish(acc: np.ndarray, y: np.ndarray, img: int, r0: int, r1: int, local: bool,
            code: np.ndarray, prm: np.ndarray, full0: np.ndarray, full1: np.ndarray,
            vecs: np.ndarray, scratch: np.ndarray) -> None:
    """Rows r0…r1 of image img from acc into y (n·m, p) through the epilogue."""
    m, p = acc.shape[1], acc.shape[2]
    if code.shape[0] == 0:
        for r in range(r0, r1):
            copy_bytes(y[img * m + r].ctypes.data, acc[img, r].ctypes.data, p * 4)
    elif local:  # no other tensor: the whole run at once
        flat = y.reshape(-1)
        run_epilogue(acc[img].reshape(-1)[r0 * p:r1 * p], flat.reshape(1, -1), 0,
                     (img * m + r0) * p, code, prm, full0, full1, vecs, scratch)
    else:
        for r in range(r0, r1):
            run_epilogue(acc[img, r], y, img * m + r, 0, code, prm, full0, full1, vecs,
                         scratch)


@njit(cache=True, error_model="numpy", fastmath=FASTMATH_REDUCE)
def gemv(t: int, x: np.ndarray, w: np.ndarray, bias: np.ndarray, acc: np.ndarray,
         y: np.ndarray, nthreads: int, local: bool, code: np.ndarray, prm: np.ndarray,
         full0: np.ndarray, full1: np.ndarray, vecs: np.ndarray, scratch: np.ndarray) -> None:
    """x (n, c, p), w (m, c), bias (m), acc (n, m, p) scratch, y (n·m, p): thread t's
    share of the output channels (fork.fork_call; t = 0 of 1, all of them)."""
    n, m = x.shape[0], w.shape[0]
    per = -(-m // nthreads)
    r0, r1 = t * per, min(m, (t + 1) * per)
    for img in range(n):
        _rows(x, w, bias, acc, img, r0, r1)
        _finish(acc, y, img, r0, r1, local, code, prm, full0, full1, vecs, scratch[t])


def _pointwise(g: Conv2d | None) -> bool:
    return (g is not None and g.kh == g.kw == 1 and g.group == 1 and g.sh == g.sw == 1
            and g.top == g.left == 0 and (g.oh, g.ow) == (g.h, g.w))


def applies(spec: LayerSpec) -> bool:
    g = conv2d(spec)
    return _pointwise(g) and g is not None and g.pixels <= MAX_PIXELS


def applies_blocked(spec: LayerSpec) -> bool:
    """Planar in, blocked out, one pixel (a squeeze-excitation gate feeding a blocked
    scale): the blocked output is then the planar one with the channels padded to whole
    blocks. The epilogue may not read other tensors."""
    g = conv2d(spec, blocked=True)
    epi = compile_epilogue(spec)
    return (_pointwise(g) and g is not None and not g.x_blocked and g.y_blocked
            and g.pixels == 1 and epi is not None and not epi.full and not epi.vec)


def _make(spec: LayerSpec, geo: Conv2d, epi: Epilogue, nthreads: int) -> RunFn:
    # A blocked output of one pixel is (n, ⌈m/16⌉·16) in planar order: computed with
    # zero rows of weights and bias past m, so that every lane is written.
    m = -(-geo.m // L) * L if geo.y_blocked else geo.m
    parallel = nthreads > 1 and m * geo.c >= GEMV_PARALLEL_MIN
    threads_used = nthreads if parallel else 1
    work = workspace.scratch((geo.n, m, geo.pixels))
    local = not epi.full and not epi.vec
    args = EpilogueArgs(epi, spec.outputs[0].shape, threads_used,
                        m * geo.pixels if local else geo.pixels)
    wp = aligned_zeros((m, geo.c))
    bp = aligned_zeros(m)
    zeros = np.zeros(geo.m, np.float32)
    zeros.flags.writeable = False  # a constant bias
    code, prm, vecs = epi.code, epi.prm, args.vecs

    def pack(w: np.ndarray) -> None:
        wp[:geo.m] = w.reshape(geo.m, geo.c)

    packed = Derived(pack)

    def prepare(inputs: Sequence[np.ndarray | None], outputs: Sequence[np.ndarray]) -> Thunk:
        x, w = inputs[0], inputs[1]
        assert x is not None and w is not None
        full0, full1 = args.fulls(inputs)
        scratch = args.scratch.array
        call = fork_call(gemv, threads_used, x.reshape(geo.n, geo.c, geo.pixels), wp, bp,
                            work.array, out_rows(outputs[0], geo.n * m, geo.pixels),
                            threads_used, local, code, prm, full0, full1, vecs, scratch)
        call = with_bias_copy(call, bias_of(inputs, geo, zeros), bp)
        return with_registers(packed.before(w, call), args, inputs)

    return runner(prepare)


@tactic("Conv", "gemv", applies=applies, native_epilogue=native_epilogue, priority=35)
def bind_gemv(spec: LayerSpec) -> RunFn:
    return bind_conv(spec, _make)


@tactic("Conv", "gemv_nchw16c", applies=applies_blocked, native_epilogue=native_epilogue,
        priority=35)
def bind_gemv_nchw16c(spec: LayerSpec) -> RunFn:
    return bind_conv(spec, _make, blocked=True)
