"""ConvTranspose whose kernel equals its stride (the learned 2× upsampling of segmentation
and detection necks): the ``gemm_scatter`` tactic.

With kernel = stride, no padding and no dilation, every output pixel receives exactly one
tap of one input pixel, so the layer is a GEMM and a shuffle: per band of input rows,
Z (m·kh·kw × pixels) = Wᵀ · X (the packed GEMM, weights packed once) into a block that
stays in L2, then output row (ch, i·s + a) is assembled from the rows (ch, a, ·) of Z,
with bias and the layer's epilogue. Z is never written to memory whole.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numba import njit

from pydla.backends.base import LayerSpec, RunFn
from pydla.backends.cpu import threads, workspace
from pydla.backends.cpu.fork import fork_call
from pydla.backends.cpu.kernels.conv_fast.binding import (
    Derived,
    Thunk,
    generic_epilogue,
    out_rows,
    runner,
    with_registers,
)
from pydla.backends.cpu.kernels.conv_fast.epilogue import (
    EpilogueArgs,
    compile_epilogue,
    native_epilogue,
    run_epilogue,
)
from pydla.backends.cpu.kernels.conv_fast.gemm import MR, NR, gemm_packed, pack_b, packed_a_size
from pydla.backends.cpu.kernels.conv_fast.gemm1x1 import pack_weights
from pydla.backends.cpu.kernels.conv_fast.geometry import FLOAT_TYPES, own_inputs
from pydla.backends.cpu.kernels.conv_fast.simd import copy_bytes
from pydla.backends.cpu.registry import tactic
from pydla.backends.cpu.workspace import aligned_zeros
from pydla.errors import KernelError


@dataclass(frozen=True)
class Upsample:
    """X (n, c, h, w) ⋆ᵀ W (c, m, kh, kw), stride (kh, kw) -> Y (n, m, h·kh, w·kw)."""

    n: int
    c: int
    h: int
    w: int
    m: int
    kh: int
    kw: int
    has_bias: bool


def upsample(spec: LayerSpec) -> Upsample | None:
    if spec.op != "ConvTranspose" or not spec.outputs or own_inputs(spec) not in (2, 3):
        return None
    x, w, y = spec.inputs[0], spec.inputs[1], spec.outputs[0]
    if x is None or w is None or len(x.shape) != 4 or len(w.shape) != 4:
        return None
    present = [s for s in spec.inputs if s is not None] + list(spec.outputs)
    if any(s.dtype not in FLOAT_TYPES for s in present):
        return None
    a = spec.attrs
    n, c, h, wd = x.shape
    cw, m, kh, kw = w.shape
    strides = tuple(int(v) for v in a.get("strides") or (1, 1))
    dilations = tuple(int(v) for v in a.get("dilations") or (1, 1))
    if (int(a.get("group", 1)) != 1 or cw != c or strides != (kh, kw) or dilations != (1, 1)
            or tuple(y.shape) != (n, m, h * kh, wd * kw)):
        return None  # the output shape pins padding and output_padding to zero
    if own_inputs(spec) == 3:
        b = spec.inputs[2]
        if b is None or tuple(b.shape) != (m,):
            return None
    return Upsample(n, c, h, wd, m, kh, kw, own_inputs(spec) == 3)


@njit(cache=True, error_model="numpy")
def upsample_gemm(t: int, x: np.ndarray, ap: np.ndarray, bias: np.ndarray, y: np.ndarray,
                  m: int, kh: int, kw: int, band: int, nthreads: int, bp: np.ndarray,
                  edge: np.ndarray, acc: np.ndarray, stage: np.ndarray, code: np.ndarray,
                  prm: np.ndarray, full0: np.ndarray, full1: np.ndarray, vecs: np.ndarray,
                  scratch: np.ndarray) -> None:
    """x (n, c, h, w), ap the packed (m·kh·kw × c) weights, y (n·m, h·kh · w·kw). A task is
    a band of input rows of one image: its product Z (m·kh·kw × band·w) goes to the
    thread's acc, and output row (ch, i·kh + a) is assembled from Z's rows (ch, a, ·)."""
    n, c, h, w = x.shape
    mz = m * kh * kw
    ow = w * kw
    bands = -(-h // band)
    tasks = n * bands
    per = -(-tasks // nthreads)
    epilogue = code.shape[0] > 0
    z, row = acc[t], stage[t]
    for task in range(t * per, min(tasks, (t + 1) * per)):
        img, i0 = task // bands, task % bands * band
        i1 = min(h, i0 + band)
        cols = (i1 - i0) * w
        pack_b(x[img].reshape(-1)[i0 * w:], h * w, c, cols, bp[t])
        gemm_packed(mz, cols, c, ap, mz, 0, bp[t], z, 0, cols, edge[t])
        for ch in range(m):
            plane = img * m + ch
            bv = bias[ch]
            for i in range(i0, i1):
                for a in range(kh):
                    for b in range(kw):
                        src = z[((ch * kh + a) * kw + b) * cols + (i - i0) * w:]
                        for j in range(w):
                            row[j * kw + b] = src[j] + bv
                    oy = i * kh + a
                    if epilogue:
                        run_epilogue(row, y, plane, oy * ow, code, prm, full0, full1, vecs,
                                     scratch[t])
                    else:
                        copy_bytes(y[plane].ctypes.data + oy * ow * 4, row.ctypes.data, ow * 4)


STAGED_FLOATS = 1 << 16  # one thread's product block (256 KiB): stays in L2


def applies(spec: LayerSpec) -> bool:
    return upsample(spec) is not None


@tactic("ConvTranspose", "gemm_scatter", applies=applies, native_epilogue=native_epilogue,
        priority=30)
def bind_gemm_scatter(spec: LayerSpec) -> RunFn:
    geo = upsample(spec)
    if geo is None:
        raise KernelError(spec.name, spec.op, "not a 2-D ConvTranspose with kernel = stride")
    epi = compile_epilogue(spec)
    if epi is None:  # extra inputs broadcast in a way the kernels do not read
        return generic_epilogue(spec, bind_gemm_scatter)
    nthreads = threads.configure()
    taps = geo.kh * geo.kw
    mz = geo.m * taps  # the GEMM's rows
    # Input rows per task: the product block within STAGED_FLOATS, and work for every thread.
    band = max(1, min(STAGED_FLOATS // (mz * geo.w), -(-geo.n * geo.h // (2 * nthreads))))
    band = min(band, geo.h)
    cols = band * geo.w
    ap = aligned_zeros(packed_a_size(mz, geo.c))
    ow = geo.w * geo.kw
    work = [workspace.scratch(shape) for shape in (
        (nthreads, -(-cols // NR) * NR * geo.c),  # bp
        (nthreads, MR * NR),  # edge
        (nthreads, mz * cols),  # acc
        (nthreads, ow))]  # stage
    args = EpilogueArgs(epi, spec.outputs[0].shape, nthreads, ow)
    zeros = np.zeros(geo.m, np.float32)
    # W (c, m·kh·kw) transposed: rows of the product are (channel, tap).
    weights = Derived(lambda w: pack_weights(np.ascontiguousarray(w.reshape(geo.c, mz).T), ap))

    def prepare(inputs: Sequence[np.ndarray | None], outputs: Sequence[np.ndarray]) -> Thunk:
        x, w = inputs[0], inputs[1]
        assert x is not None and w is not None
        b = inputs[2] if geo.has_bias else None
        full0, full1 = args.fulls(inputs)
        call = fork_call(upsample_gemm, nthreads, x, ap, zeros if b is None else b.reshape(-1),
                         out_rows(outputs[0], geo.n * geo.m, geo.h * geo.w * taps), geo.m,
                         geo.kh, geo.kw, band, nthreads, *(s.array for s in work), epi.code,
                         epi.prm, full0, full1, args.vecs, args.scratch.array)
        return weights.before(w, with_registers(call, args, inputs))

    return runner(prepare)
