"""Transpose as strided copies (tactic ``strided_copy``): runs of the input's last axis where
it stays last, else 16×16 tiles transposed in registers.

The permutation is first reduced: axes of size 1 dropped, input axes that stay neighbours
merged. What is left is one of two copies, planned at bind time with the start of every
run or plane precomputed (numpy), so the kernels only move data:

- the last input axis stays last — a transformer's head split, (b, s, h, d) → (b, h, s, d):
  ``rows`` runs of contiguous elements, each from its own place in the input;
- else the last output axis comes from input axis ``p`` with stride ``s_p``, and the
  input's contiguous axis lands on output axis ``q`` with stride ``s_q``: ``planes`` 2-D
  transposes (J × Q), the other axes giving each plane's two starts. Full 16×16 tiles of
  4-byte elements go through simd.transpose16 (16 vector loads, shuffles, 16 stores), the
  ragged edges element by element.

Elements are moved as unsigned integers of their size, bit for bit. onnxruntime's
transposes ran 3–4× faster than numpy's copy of a transposed view (BERT-tiny's
(1, 128, 2, 64) → (1, 2, 64, 128): 28 µs).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
from llvmlite import ir
from numba import njit, prange, types
from numba.extending import intrinsic

from pydla.backends.base import LayerSpec, RunFn
from pydla.backends.cpu import threads
from pydla.backends.cpu.kernels.conv_fast.simd import LANES, copy_bytes, transpose16
from pydla.backends.cpu.registry import tactic
from pydla.backends.cpu.steps import PreboundKernel, kernel_call
from pydla.dtypes import UINT_OF_SIZE

Thunk = Callable[[], None]

# Bytes below which a transpose stays on the calling thread. Low: inside a network the
# input was written by a parallel layer, half of it into the other core's cache, and each
# thread then copies mostly what its own core wrote (BERT-tiny's 64 KB transposes of a
# MatMul's output: 15-30 µs on one thread, 7-12 on two, in the network).
PARALLEL_MIN = 1 << 14
_I8, _I32 = ir.IntType(8), ir.IntType(32)


@intrinsic
def transpose16_bytes(typingctx, src, src_step, dst, dst_step):  # type: ignore[no-untyped-def]
    """A 16×16 tile of bytes in registers: dst[q·dst_step + j] = src[j·src_step + q].
    Four rounds of the perfect shuffle — vector i and i + 8 interleaved byte by byte into
    2i and 2i + 1 — transpose it (64 byte shuffles: punpcklbw/punpckhbw); numba's
    element loop moved ≈ 1.7 ns a byte (open_nsfw's uint8 NCHW↔NHWC Transposes)."""
    sig = types.void(types.int64, types.int64, types.int64, types.int64)

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        s, ss, d, ds = args
        v16 = ir.VectorType(_I8, 16)
        lo = ir.Constant(ir.VectorType(_I32, 16), [i // 2 + (16 if i % 2 else 0)
                                                   for i in range(16)])
        hi = ir.Constant(ir.VectorType(_I32, 16), [8 + i // 2 + (16 if i % 2 else 0)
                                                   for i in range(16)])
        rows = []
        for j in range(16):
            addr = builder.add(s, builder.mul(ss, ir.Constant(ir.IntType(64), j)))
            rows.append(builder.load(builder.inttoptr(addr, v16.as_pointer()), align=1))
        for _ in range(4):
            rows = [builder.shuffle_vector(rows[i], rows[i + 8], mask)
                    for i in range(8) for mask in (lo, hi)]
        for q in range(16):
            addr = builder.add(d, builder.mul(ds, ir.Constant(ir.IntType(64), q)))
            builder.store(rows[q], builder.inttoptr(addr, v16.as_pointer()), align=1)
        return context.get_dummy_value()

    return sig, codegen


def reduce_perm(shape: Sequence[int], perm: Sequence[int]) -> tuple[list[int], list[int]]:
    """(input shape, permutation) with size-1 axes dropped and input axes that stay
    neighbours in the output merged; the same copy as ``transpose(shape, perm)``."""
    order = [a for a in perm if shape[a] != 1]  # output order of the kept input axes
    groups: list[list[int]] = []
    for a in order:
        if groups and groups[-1][-1] + 1 == a:
            groups[-1].append(a)
        else:
            groups.append([a])
    starts = sorted(g[0] for g in groups)  # groups in input order
    by_start = {g[0]: g for g in groups}
    merged_shape = [math.prod(shape[a] for a in by_start[s]) for s in starts]
    rank = {s: i for i, s in enumerate(starts)}
    return merged_shape, [rank[g[0]] for g in groups]


def _firsts(index: np.ndarray, fixed: Sequence[int]) -> np.ndarray:
    """``index`` (element indices laid out in output order) with the output axes ``fixed``
    at 0, flattened: where each run or plane starts."""
    picks = tuple(0 if o in fixed else slice(None) for o in range(index.ndim))
    return np.ascontiguousarray(index[picks]).reshape(-1)


@njit(cache=True, nogil=True, error_model="numpy")
def _rows_range(x: np.ndarray, y: np.ndarray, starts: np.ndarray, length: int, lo: int,
                hi: int) -> None:
    size = x.itemsize
    xa, ya = x.ctypes.data, y.ctypes.data
    if length <= 4:  # runs of a few elements ((…, 309, 2) pairs): a memcpy call each cost more
        for r in range(lo, hi):
            for k in range(length):
                y[r * length + k] = x[starts[r] + k]
        return
    for r in range(lo, hi):
        copy_bytes(ya + r * length * size, xa + starts[r] * size, length * size)


@njit(parallel=True, cache=True, nogil=True, error_model="numpy")
def rows_par(x: np.ndarray, y: np.ndarray, starts: np.ndarray, length: int,
             nthreads: int) -> None:
    """y's run r (``length`` elements) = x[starts[r]:starts[r] + length]."""
    count = starts.shape[0]
    per = -(-count // nthreads)
    for t in prange(nthreads):
        _rows_range(x, y, starts, length, t * per, min(count, (t + 1) * per))


@njit(cache=True, nogil=True, error_model="numpy")
def rows_seq(x: np.ndarray, y: np.ndarray, starts: np.ndarray, length: int,
             nthreads: int) -> None:
    """``rows_par`` on the calling thread (same arguments)."""
    _rows_range(x, y, starts, length, 0, starts.shape[0])


@njit(cache=True, nogil=True, error_model="numpy")
def _tiles(x: np.ndarray, y: np.ndarray, src: int, dst: int, qn: int, sp: int, sq: int,
           j0: int, j1: int) -> None:
    """Rows j0…j1 - 1 of one plane: y[dst + q·sq + j] = x[src + j·sp + q] for q < qn; whole
    tiles of 4-byte and 1-byte elements in registers."""
    size = x.itemsize
    vector = size == 4
    xa, ya = x.ctypes.data, y.ctypes.data
    for jt in range(j0, j1, LANES):
        jw = min(LANES, j1 - jt)
        for qt in range(0, qn, LANES):
            qw = min(LANES, qn - qt)
            if vector and jw == LANES and qw == LANES:
                transpose16(xa + (src + jt * sp + qt) * size, sp * size,
                            ya + (dst + qt * sq + jt) * size, sq * size, 0)
                continue
            if size == 1 and jw == 16 and qw == 16:
                transpose16_bytes(xa + src + jt * sp + qt, sp, ya + dst + qt * sq + jt, sq)
                continue
            for q in range(qt, qt + qw):
                row = dst + q * sq
                for j in range(jt, jt + jw):
                    y[row + j] = x[src + j * sp + q]


@njit(parallel=True, cache=True, nogil=True, error_model="numpy")
def planes_par(x: np.ndarray, y: np.ndarray, srcs: np.ndarray, dsts: np.ndarray, jn: int,
               qn: int, sp: int, sq: int, nthreads: int) -> None:
    """Each plane k: y[dsts[k] + q·sq + j] = x[srcs[k] + j·sp + q], j < jn, q < qn; the
    threads share the planes' bands of 16 rows."""
    bands = -(-jn // LANES)
    tasks = srcs.shape[0] * bands
    per = -(-tasks // nthreads)
    for t in prange(nthreads):
        for task in range(t * per, min(tasks, (t + 1) * per)):
            k, band = task // bands, task % bands
            _tiles(x, y, srcs[k], dsts[k], qn, sp, sq, band * LANES,
                   min(jn, (band + 1) * LANES))


@njit(cache=True, nogil=True, error_model="numpy")
def planes_seq(x: np.ndarray, y: np.ndarray, srcs: np.ndarray, dsts: np.ndarray, jn: int,
               qn: int, sp: int, sq: int, nthreads: int) -> None:
    """``planes_par`` on the calling thread (same arguments)."""
    for k in range(srcs.shape[0]):
        _tiles(x, y, srcs[k], dsts[k], qn, sp, sq, 0, jn)


def _applies(spec: LayerSpec) -> bool:
    x, y = spec.inputs[0], spec.outputs[0]
    return (len(spec.inputs) == 1 and x is not None and x.dtype == y.dtype
            and x.dtype.np.itemsize in UINT_OF_SIZE and x.dtype.np.kind in "fiub")


def bind_strided_copy(spec: LayerSpec) -> RunFn:
    x_spec = spec.inputs[0]
    assert x_spec is not None
    perm = [int(a) for a in spec.attrs["perm"]]
    shape, order = reduce_perm(x_spec.shape, perm)
    uint = UINT_OF_SIZE[x_spec.dtype.np.itemsize]
    nthreads = threads.configure()
    total = math.prod(shape)
    parallel = nthreads > 1 and total * x_spec.dtype.np.itemsize >= PARALLEL_MIN
    d = len(shape)
    # Element indices in output order: the input's (transposed) and the output's own.
    src_index = np.arange(total, dtype=np.int64).reshape(shape).transpose(order)
    if d == 0 or order[-1] == d - 1:  # runs of the last axis (the whole tensor if d ≤ 1)
        starts = _firsts(src_index, [d - 1])
        kernel: Callable[..., None] = rows_par if parallel else rows_seq
        extra: tuple[object, ...] = (starts, shape[-1] if d else 1, nthreads)
    else:
        p, q = order[-1], order.index(d - 1)
        sp = math.prod(shape[p + 1:])
        sq = math.prod(shape[order[o]] for o in range(q + 1, d))
        srcs = _firsts(src_index, [q, d - 1])
        dsts = _firsts(np.arange(total, dtype=np.int64).reshape(src_index.shape), [q, d - 1])
        kernel = planes_par if parallel else planes_seq
        extra = (srcs, dsts, shape[p], shape[d - 1], sp, sq, nthreads)

    def prebind(ins: Sequence[np.ndarray | None], outs: Sequence[np.ndarray]) -> Thunk:
        x = ins[0]
        assert x is not None
        src = np.ascontiguousarray(x).reshape(-1).view(uint)
        dst = outs[0].reshape(-1).view(uint)
        return kernel_call(kernel, src, dst, *extra)

    return PreboundKernel(prebind)


tactic("Transpose", "strided_copy", applies=_applies, priority=10)(bind_strided_copy)
