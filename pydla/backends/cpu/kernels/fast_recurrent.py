"""What the fused recurrent tactics (fast_lstm, fast_gru) share.

- ``input_gates``: the input projections of every step and direction as one GEMM,
  X (T·B × I) · Wᵀ (I × gates), on the conv kernels' micro-kernel over Wᵀ packed once at
  load (``InputProjection`` owns its operands).
- ``recurrent_product``: one step's h · Rᵀ for a batch of B rows — fast_gemv's loop over a
  prepared Rᵀ for a few rows, the micro-kernel over Rᵀ packed once (h staged into a whole
  panel) up to AXPY_BATCH, ``sgemm`` beyond; ``padded_product`` the same for gate blocks
  of whole vectors, its few rows by ``row_product`` (sums held in vector registers).
- ``applies``: the attributes and inputs every fused tactic needs; ``constant_weights``:
  whether the weights can be derived once at load.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

from pydla.backends.base import LayerSpec
from pydla.backends.cpu.fork import fork_call
from pydla.backends.cpu.kernels.conv_fast.blas import AVAILABLE, sgemm
from pydla.backends.cpu.kernels.conv_fast.gemm import MR, NR, gemm_rows, pack_b, packed_b_size
from pydla.backends.cpu.kernels.conv_fast.simd import LANES, copy_bytes, counted_loop, splat
from pydla.backends.cpu.kernels.fast_gemv import axpy_rows
from pydla.backends.cpu.kernels.fast_math import FASTMATH_REDUCE, float32_compute
from pydla.backends.cpu.workspace import aligned_zeros

Thunk = Callable[[], None]

# Up to this batch the recurrent product is fast_gemv's loop or the micro-kernel over a
# packed Rᵀ (sgemm would pack Rᵀ at every step); the loop below PANEL_BATCH, where most
# of a panel's rows would be padding. CRNN's batch 8: the loop re-read each row of C per
# four rows of Rᵀ and ran the LSTM 1.4-1.7× onnxruntime's time.
AXPY_BATCH = 16
PANEL_BATCH = 4
# From this many multiply-adds the input product forks (where the caller lets it): on a
# quiet core pair a fork pays from ≈ 1 M. Best of 400 runs here, one thread vs two:
# 200 × 50 × 96 (0.96 M) 20.5 vs 17.7 µs; 200 × 180 × 96 (3.5 M) 64 vs 39 µs;
# 100 × 128 × 384 (4.9 M) 96.5 vs 54.1 µs.
FORK_MIN_MACS = 1 << 20
_ONE, _ZERO = np.float32(1), np.float32(0)
LENGTHS = 4  # the input number of sequence_lens


def panel_batch(batch: int) -> bool:
    """Whether the recurrent product of this batch runs the micro-kernel (packed Rᵀ)."""
    return PANEL_BATCH <= batch <= AXPY_BATCH


@njit(inline="always", cache=True, error_model="numpy", fastmath=FASTMATH_REDUCE)
def recurrent_product(batch: int, k: int, src: np.ndarray, src_at: int, lds: int,
                      rt: np.ndarray, rt_at: int, ldr: int, width: int, rp: np.ndarray,
                      staged: np.ndarray, edge: np.ndarray, out: np.ndarray, out_at: int,
                      ldo: int) -> None:
    """out[b, :width] = src[b, :k] · Rᵀ[:k, :width] for b < batch (flat float32 arrays,
    ``*_at`` element offsets, ``ld*`` row strides). rt: Rᵀ (k × width, rows ldr apart);
    rp: the same columns packed (pack_b), read from PANEL_BATCH to AXPY_BATCH rows, with
    ``staged`` (the rows padded to whole panels of MR) and ``edge`` (MR·NR) as scratch."""
    if batch < PANEL_BATCH:
        axpy_rows(rt, rt_at, ldr, src, src_at, lds, out, out_at, ldo, batch, 0, width, k,
                  _ONE)
    elif batch <= AXPY_BATCH:
        if lds == k:
            copy_bytes(staged.ctypes.data, src.ctypes.data + src_at * 4, batch * k * 4)
        else:
            for b in range(batch):
                copy_bytes(staged.ctypes.data + b * k * 4,
                           src.ctypes.data + (src_at + b * lds) * 4, k * 4)
        gemm_rows(batch, width, k, staged.ctypes.data, k, rp, out, out_at, ldo, edge)
    else:
        sgemm(0, 0, batch, width, k, _ONE, src.ctypes.data + 4 * src_at, lds,
              rt.ctypes.data + 4 * rt_at, ldr, _ZERO, out.ctypes.data + 4 * out_at, ldo)


_F32 = ir.FloatType()
_VEC = ir.VectorType(_F32, LANES)
_I64 = ir.IntType(64)
# Accumulator vectors of one pass of row_product: with B's vectors and a's splat they fit
# AVX-512's 32 registers (AVX2 splits each into two of its 16).
_PASS_VECTORS = 8


def _at(builder: ir.IRBuilder, base: ir.Value, offset: ir.Value | int, ty: ir.Type) -> ir.Value:
    off = offset if isinstance(offset, ir.Value) else ir.Constant(_I64, offset)
    return builder.inttoptr(builder.add(base, off), ty.as_pointer())


def _row_pass(builder: ir.IRBuilder, vectors: int, a_: ir.Value, b_: ir.Value,
              ldb_: ir.Value, k_: ir.Value, c_: ir.Value) -> None:
    """c[:16·vectors] = Σ_i<k a[i]·B[i, :16·vectors], the sums in registers."""
    fma = cgutils.get_or_insert_function(
        builder.module, ir.FunctionType(_VEC, [_VEC, _VEC, _VEC]), "llvm.fmuladd.v16f32")

    def step(i: ir.Value, accs: list[ir.Value]) -> list[ir.Value]:
        four = ir.Constant(_I64, 4)
        av = splat(builder, builder.load(_at(builder, a_, builder.mul(i, four), _F32), align=4))
        row = builder.add(b_, builder.mul(i, builder.mul(ldb_, four)))
        return [builder.call(fma, [av, builder.load(_at(builder, row, 4 * LANES * v, _VEC),
                                                    align=4), acc])
                for v, acc in enumerate(accs)]

    zero = ir.Constant(_VEC, [0.0] * LANES)
    accs = counted_loop(builder, ir.Constant(_I64, 0), k_, [zero] * vectors, step)
    for v, acc in enumerate(accs):
        builder.store(acc, _at(builder, c_, 4 * LANES * v, _VEC), align=4)


@intrinsic
def row_product(typingctx, a, b, ldb, k, n, c):  # type: ignore[no-untyped-def]
    """c[:n] = a[:k] · B (k × n, rows ldb floats apart) for n a multiple of 16; a, b, c are
    int64 addresses. fast_gemv's axpy_rows keeps C in memory and leaves the columns past
    its unrolled width to scalar code: a GRU's step of 25 × 96 took 123-320 ns there and
    64-68 ns here, every column's sum in a register (this shared machine, loaded; from
    64 × 192 up, where the loads of B bound both, the two ran alike)."""
    sig = types.void(types.int64, types.int64, types.int64, types.int64, types.int64,
                     types.int64)

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        a_, b_, ldb_, k_, n_, c_ = args
        block = 4 * LANES * _PASS_VECTORS  # bytes of a whole pass's columns
        vectors = builder.udiv(n_, ir.Constant(_I64, LANES))
        whole = builder.udiv(vectors, ir.Constant(_I64, _PASS_VECTORS))

        def full(p: ir.Value, accs: list[ir.Value]) -> list[ir.Value]:
            at = builder.mul(p, ir.Constant(_I64, block))
            _row_pass(builder, _PASS_VECTORS, a_, builder.add(b_, at), ldb_, k_,
                      builder.add(c_, at))
            return []

        counted_loop(builder, ir.Constant(_I64, 0), whole, [], full)
        at = builder.mul(whole, ir.Constant(_I64, block))
        rest = builder.urem(vectors, ir.Constant(_I64, _PASS_VECTORS))
        fn = builder.function
        done = fn.append_basic_block("row_done")
        switch = builder.switch(rest, done)
        for count in range(1, _PASS_VECTORS):
            case = fn.append_basic_block(f"row_rest{count}")
            switch.add_case(ir.Constant(_I64, count), case)
            builder.position_at_end(case)
            _row_pass(builder, count, a_, builder.add(b_, at), ldb_, k_, builder.add(c_, at))
            builder.branch(done)
        builder.position_at_end(done)
        return context.get_dummy_value()

    return sig, codegen


@njit(inline="always", cache=True, error_model="numpy", fastmath=FASTMATH_REDUCE)
def padded_product(batch: int, k: int, src: np.ndarray, src_at: int, lds: int,
                   rt: np.ndarray, rt_at: int, ldr: int, width: int, rp: np.ndarray,
                   staged: np.ndarray, edge: np.ndarray, out: np.ndarray, out_at: int,
                   ldo: int) -> None:
    """recurrent_product for a width of whole vectors: row_product below PANEL_BATCH."""
    if batch < PANEL_BATCH:
        for b in range(batch):
            row_product(src.ctypes.data + 4 * (src_at + b * lds), rt.ctypes.data + 4 * rt_at,
                        ldr, k, width, out.ctypes.data + 4 * (out_at + b * ldo))
    else:
        recurrent_product(batch, k, src, src_at, lds, rt, rt_at, ldr, width, rp, staged, edge,
                          out, out_at, ldo)


@njit(cache=True, nogil=True, error_model="numpy", fastmath=FASTMATH_REDUCE)
def input_gates(t: int, xp: np.ndarray, wp: np.ndarray, edge: np.ndarray, g: np.ndarray,
                live: np.ndarray, k: int, n: int, nthreads: int) -> None:
    """Thread t's part of G (m × n) = X (m × k) · Wᵀ (fork.fork_call), m = live[0] the
    rows needed this run (InputProjection.load). xp: X in rows
    padded to whole panels of MR; wp: Wᵀ packed (pack_b); edge (threads, MR·NR) the
    micro-kernel's scratch for ragged blocks. The threads split G's columns where there
    are strips for each (each streams its own part of W), else its rows: madmom's GRUs
    have 3 strips, which two threads split 2:1."""
    m = live[0]
    strips = -(-n // NR)
    if strips >= 2 * nthreads or nthreads == 1:
        per = -(-strips // nthreads)
        s0, s1 = t * per, min(strips, (t + 1) * per)
        if s0 < s1:
            gemm_rows(m, min(n, s1 * NR) - s0 * NR, k, xp.ctypes.data, k, wp[s0 * k * NR:],
                      g, s0 * NR, n, edge[t])
        return
    panels = -(-m // MR)
    per = -(-panels // nthreads)
    r0, r1 = t * per * MR, min(m, (t + 1) * per * MR)
    if r0 < r1:
        gemm_rows(r1 - r0, n, k, xp.ctypes.data + 4 * r0 * k, k, wp, g, r0 * n, n, edge[t])


def forks(macs: int) -> bool:
    """Whether an input product of this many multiply-adds pays for a fork."""
    return macs >= FORK_MIN_MACS


class InputProjection:
    """G (rows × gates) = X · Wᵀ for every step and direction at once: X's rows padded to
    whole panels (the micro-kernel reads them), Wᵀ packed by ``pack``."""

    def __init__(self, rows: int, size: int, gates: int, nthreads: int) -> None:
        self.rows, self.size, self.gates = rows, size, gates
        self.threads = nthreads if forks(rows * size * gates) else 1
        self.g = aligned_zeros((rows, gates))
        self.xp = aligned_zeros((-(-rows // MR) * MR, size))
        self.wp = aligned_zeros(packed_b_size(size, gates))
        self.edge = np.zeros((nthreads, MR * NR), np.float32)
        self.live = np.array([rows], np.int64)  # the rows of this run (load)

    def pack(self, w: np.ndarray) -> None:
        """Take W (directions, gates per direction, size) for the next runs."""
        wt = np.ascontiguousarray(w.reshape(self.gates, self.size).T)
        pack_b(wt.reshape(-1), self.gates, self.size, self.gates, self.wp)

    def thunk(self) -> Thunk:
        """The product into ``g``, on the pool where it pays (FORK_MIN_MACS)."""
        return fork_call(input_gates, self.threads, self.xp, self.wp, self.edge,
                            self.g.reshape(-1), self.live, self.size, self.gates,
                            self.threads)

    def load(self, x: np.ndarray, rows: int | None = None) -> None:
        """X is read where it lies at every run; only its first ``rows`` rows (the steps
        that sequence lengths leave, step-major) where given."""
        rows = self.rows if rows is None else rows
        self.live[0] = rows
        np.copyto(self.xp[:rows], x.reshape(self.rows, self.size)[:rows])


def applies(spec: LayerSpec, defaults: Sequence[str], layouts: Sequence[int],
            absent: Sequence[int]) -> bool:
    """Whether a fused tactic runs this layer: float32 compute, the default activations, no
    clip, a layout in ``layouts``, none of the inputs numbered in ``absent``. Sequence
    lengths (input LENGTHS) are integers."""
    a = spec.attrs
    dirs = 2 if a["direction"] == "bidirectional" else 1
    present = [i for i, s in enumerate(spec.inputs) if s is not None]
    x = spec.inputs[0]
    return (AVAILABLE and x is not None and int(a["layout"]) in layouts and a["clip"] is None
            and list(a["activations"]) == list(defaults) * dirs
            and not any(i in present for i in absent)
            and float32_compute(*(spec.inputs[i] for i in present if i != LENGTHS),
                                *spec.outputs)
            and math.prod(x.shape) > 0)


def constant_weights(*weights: np.ndarray | None) -> bool:
    """Weights are read-only views of the loadable (Program.weight): what is derived from
    them is derived once, at load. Writable ones are runtime tensors, derived at every run."""
    return not any(w is not None and w.flags.writeable for w in weights)
