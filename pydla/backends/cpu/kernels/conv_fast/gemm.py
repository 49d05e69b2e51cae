"""Single-threaded float32 GEMM for the convolution kernels: packed panels and a 12×32
register-blocked micro-kernel written as LLVM vector code.

Why not BLAS: numpy's OpenBLAS picks its kernels from ``OPENBLAS_CORETYPE``, which some of
this project's machines set to Haswell (AVX2) on AVX-512 cores that run twice as fast —
onnxruntime's own kernels do — and BLAS cannot read channel-blocked operands in place. The
micro-kernel keeps a 12×32 block of C in 24 vector registers while it walks K, one
broadcast of A and two loads of B per 12×32 FMAs; LLVM lowers its <16 x float> operations
to whatever the CPU has. Where the CPU has fewer registers than the block needs (AVX2:
simd.ACC_VECTORS), the block runs as several loops over K, each within the registers.

Blocking follows Goto: K in slices of KC (a B strip of KC × 32 stays in L1), M in blocks of
MC (an A block of MC × KB stays in L2, reused by every strip of B, whose KB/KC slices add
to the same block of C in turn). Operands are packed
into panels first: A (m × k) into MR-row panels ``[panel][k][MR]``, B (k × n) into NR-column
panels ``[panel][k][NR]``, zero-padded, so that every micro-kernel call reads contiguous
memory. Constant operands (weights) are packed once by their callers.

Addresses and strides are int64 bytes throughout, like simd.py; callers keep the buffers
alive and in bounds (``packed_a_size``, ``packed_b_size``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

from pydla.backends.cpu.kernels.conv_fast.epilogue import (
    EXP_HI,
    EXP_LO,
    EXP_P,
    FIN_CLAMP,
    FIN_HSWISH,
    FIN_OUT,
    FIN_RES,
    FIN_RES_AFTER,
    FIN_SILU,
    LN2_HI,
    LN2_LO,
    LOG2E,
)
from pydla.backends.cpu.kernels.conv_fast.simd import counted_loop, register_passes, splat

MR, NR = 12, 32  # the micro-kernel's block of C: 12 rows × 2 vectors of 16
# The pixels-as-rows kernels' second row count: planes 7, 14, 28 or 56 pixels wide (and
# 7×7 = 49 pixels) split into whole panels of 7 — of 12 a 7-pixel row wastes 5, 49
# pixels 11. Both shapes run at the FMA peak from L1 with AVX-512 (≈ 245 GFLOP/s a core
# measured); on AVX2 a 7-row block runs below it (simd.pass_cost).
MR7 = 7
# The 1×1 kernel's (gemm_c16) second row count: 7 where a 7-row block runs as one pass
# (AVX-512), else 6 — on AVX2 7 rows run as passes of 4 and 3 rows, the second short of
# FMA chains, while 6 rows run as full passes: a 7×7 plane's 49 pixels in 9 panels of 6
# ran 10-20 % faster than in 7 of 7, and 14×14 planes 3-6 % faster than in panels of 12
# (loop nests on one Zen 3 core).
MR_SMALL = MR7 if len(register_passes(MR7, 2)) == 1 else 6
# K slice (a B strip of KC × 32) and M block (an A block of MC × KC). A block that runs
# as one pass (AVX-512) reads its B strip once per call: 256 (32 KiB). One that runs as
# several passes (AVX2) reads it once per pass: 128, so that the strip (16 KiB) stays in
# L1 with A's panel across them (1×1 and strided 3×3 layers ran 10-20 % faster on a Zen 3
# core).
KC = 256 if len(register_passes(MR, 2)) == 1 else 128
MC = 144
KB = 512  # values of K whose slices add to a block of C in turn (gemm): MC × KB in L2
_LANES = 16
# Steps of K written out per loop iteration (_micro_pass; divides 16): 4 ran as fast as 8
# and 16 on a Zen 3 core (1×1 layers) and compiles in half the time of 16.
UNROLL = 4
PREFETCH_BYTES = 2048  # how far ahead of the micro-kernel's reads of A to prefetch
# ... or of B's, when the weights are B: 32 steps of K, for in a network they come from DRAM
# (512->512 3×3 at 7×7 ran 8-10 % faster than 8 steps ahead on a Zen 3).
PREFETCH_B_BYTES = 4096
_F32 = ir.FloatType()
_VEC = ir.VectorType(_F32, _LANES)
_I64 = ir.IntType(64)


def _ptr(builder: ir.IRBuilder, base: ir.Value, offset: ir.Value | int,
         ty: ir.Type) -> ir.Value:
    off = offset if isinstance(offset, ir.Value) else ir.Constant(_I64, offset)
    return builder.inttoptr(builder.add(base, off), ty.as_pointer())


def _micro_codegen(builder: ir.IRBuilder, a_: ir.Value, a_off_at: Callable[[ir.Value], ir.Value],
                   a_sr_: ir.Value, b_row_at: Callable[[ir.Value], ir.Value], k_: ir.Value,
                   c_: ir.Value, ldc_: ir.Value, acc_flag: ir.Value,
                   c_half: ir.Value | None = None, bias_: ir.Value | None = None,
                   prefetch_b: bool = False, mr: int = MR, nv: int = 2,
                   a_lane: ir.Value | None = None, a_pf: ir.Value | None = None,
                   final: Final | None = None) -> None:
    """The micro-kernel's body, ``mr`` rows: A's row r at step i is at a_ + r·a_sr_ +
    ``a_off_at(i)``, ``b_row_at(i)`` is the address of B's row i (32 floats); C's row r is
    two vectors at c_ + r·ldc_ and ``c_half`` bytes further (64: contiguous). ``bias_``:
    the address of 32 floats added to every row when C is stored rather than accumulated.
    ``nv`` 1: only B's and C's first vector (a last strip of 16 output channels).
    ``a_pf``: see _micro_pass. ``final``: where the call's flags ask for it, the block
    leaves through a short epilogue into the layer's output instead (Final).

    Where the block's accumulators outgrow the vector registers (simd.ACC_VECTORS: AVX2)
    it runs as several passes over K, one vector of columns and a group of rows each; A
    and B are then read once per pass, from L1."""
    # One base address per row of A, outside the loops.
    a_rows = [builder.add(a_, builder.mul(ir.Constant(_I64, r), a_sr_)) for r in range(mr)]
    bounds = _clamp_bounds(builder, final) if final is not None else None
    for index, (rows, cols) in enumerate(register_passes(mr, nv)):
        # Streamed B: the first pass prefetches every column's lines, the others find them
        # in L1. Else A is prefetched, by every pass.
        fetch_b = list(range(nv)) if prefetch_b and index == 0 else []
        _micro_pass(builder, a_rows[rows.start:rows.stop], rows.start, a_off_at, b_row_at, k_,
                    c_, ldc_, acc_flag, c_half, bias_, not prefetch_b, fetch_b, cols, a_lane,
                    a_pf, final, bounds)
    if final is not None:
        _final_epilogue(builder, final, mr, nv)


def _micro_pass(builder: ir.IRBuilder, a_rows: list[ir.Value], r0: int,
                a_off_at: Callable[[ir.Value], ir.Value],
                b_row_at: Callable[[ir.Value], ir.Value], k_: ir.Value, c_: ir.Value,
                ldc_: ir.Value, acc_flag: ir.Value, c_half: ir.Value | None,
                bias_: ir.Value | None, fetch_a: bool, fetch_b: list[int], cols: list[int],
                a_lane: ir.Value | None = None, a_pf: ir.Value | None = None,
                final: Final | None = None,
                bounds: tuple[ir.Value, ir.Value] | None = None) -> None:
    """One pass over K: rows r0 … r0 + len(a_rows) - 1 of C, its column vectors ``cols``;
    it prefetches A's lines (``fetch_a``) or B's of the column vectors ``fetch_b``.

    ``a_lane``: the bytes between A's values of consecutive steps within a run of 16 —
    then K runs in blocks of UNROLL steps written out (and a loop over the steps left),
    A's offset computed once per block and a constant from step to step. One step of the
    plain loop spent more instructions on A's offset than on its loads (a 7-row block on
    AVX2 issued 51 instructions per 16 FMAs, above what a Zen 3 core retires per cycle).

    ``a_pf`` (with ``a_lane``): bytes between the lines of A to prefetch. Each block of
    steps then prefetches two lines, a_pf apart, the next block the next two: a run of 16
    steps covers 8 — with a blocked A (a_pf 64) every row of the pass, not just its first.
    Where A streams from memory once (a 1×1 layer with few output channels at batch 8)
    the hardware prefetcher did not keep up with a row per line: MobileNetV2's 32->16
    projection at 112×112, batch 8, ran 3.5 -> 1.9 ms. 0: both prefetches hit the first
    row's line."""
    nc = len(cols)
    prefetch = cgutils.get_or_insert_function(builder.module, ir.FunctionType(
        ir.VoidType(), [ir.IntType(8).as_pointer(), ir.IntType(32), ir.IntType(32),
                        ir.IntType(32)]), "llvm.prefetch.p0i8")
    fma = cgutils.get_or_insert_function(builder.module, ir.FunctionType(
        _VEC, [_VEC, _VEC, _VEC]), "llvm.fma.v16f32")

    def prefetch_at(address: ir.Value) -> None:
        builder.call(prefetch, [builder.inttoptr(address, ir.IntType(8).as_pointer()),
                                ir.Constant(ir.IntType(32), 0), ir.Constant(ir.IntType(32), 3),
                                ir.Constant(ir.IntType(32), 1)])

    def step(i: ir.Value, accs: list[ir.Value], new_lines: bool,
             a_off: ir.Value | None = None, lines: list[ir.Value] | None = None
             ) -> list[ir.Value]:
        b_row = b_row_at(i)
        bs = [builder.load(_ptr(builder, b_row, 4 * _LANES * h, _VEC), align=4) for h in cols]
        if a_off is None:
            a_off = a_off_at(i)
        # Prefetch A ahead: packed weights stream from memory once per call (inside a
        # network they are not cached), and the hardware prefetcher alone left the FMAs
        # waiting. When B is what streams (weights on the columns: micro_kernel_taps),
        # its lines are prefetched instead.
        for h in fetch_b:
            prefetch_at(builder.add(b_row, ir.Constant(_I64, PREFETCH_B_BYTES + 64 * h)))
        if fetch_a and new_lines:  # A: once per block of steps, which share its lines
            ahead = builder.add(builder.add(a_rows[0], a_off), ir.Constant(_I64, PREFETCH_BYTES))
            for line in lines or [ir.Constant(_I64, 0)]:
                prefetch_at(builder.add(ahead, line))
        new = []
        for row in a_rows:
            sv = splat(builder, builder.load(_ptr(builder, row, a_off, _F32), align=4))
            for j in range(nc):
                new.append(builder.call(fma, [sv, bs[j], accs[len(new)]]))
        return new

    zero = ir.Constant(_VEC, [0.0] * _LANES)
    accs: list[ir.Value] = [zero] * (nc * len(a_rows))
    if a_lane is not None:
        shift = ir.Constant(_I64, UNROLL.bit_length() - 1)
        blocks = builder.ashr(k_, shift)
        accs = counted_loop(builder, ir.Constant(_I64, 0), blocks, accs, lambda j, acc: (
            _block(builder, j, acc, step, a_off_at, a_lane, a_pf)))
        start = builder.shl(blocks, shift)
    else:
        start = ir.Constant(_I64, 0)
    accs = counted_loop(builder, start, k_, accs, lambda i, acc: step(i, acc, True))

    add = builder.icmp_signed("!=", acc_flag, ir.Constant(_I64, 0))
    biases = None
    if bias_ is not None:
        biases = [builder.load(_ptr(builder, bias_, 4 * _LANES * h, _VEC), align=4)
                  for h in cols]
    if final is not None and bounds is not None:
        _final_store(builder, final, accs, r0, len(a_rows), cols, c_, ldc_, c_half, add, biases,
                     bounds)
        return

    def stores(accumulate: bool) -> None:
        for r in range(len(a_rows)):
            row = builder.add(c_, builder.mul(ir.Constant(_I64, r0 + r), ldc_))
            for j, h in enumerate(cols):
                ptr = _ptr(builder, row,
                           (c_half or ir.Constant(_I64, 4 * _LANES)) if h else 0, _VEC)
                value = accs[nc * r + j]
                if accumulate:
                    value = builder.fadd(builder.load(ptr, align=4), value)
                elif biases is not None:
                    value = builder.fadd(value, biases[j])
                builder.store(value, ptr, align=4)

    _per_pass(builder, add, stores)


def _per_pass(builder: ir.IRBuilder, add: ir.Value, stores: Callable[[bool], None]) -> None:
    """``stores(True)`` where the call accumulates into C, else ``stores(False)``: one
    branch per pass, the stores themselves straight-line code (_final_store)."""
    with builder.if_else(add) as (then, otherwise):
        with then:
            stores(True)
        with otherwise:
            stores(False)


@dataclass
class Final:
    """A blocked call's epilogue arguments (IR values): flags, the output's address, row
    and half strides (bytes), the residual's offset from the output (bytes) and the
    address of the clamp's two floats. With FIN_OUT in the flags the block leaves into the
    output — C + the block where accumulating, else the block + bias — and through the
    rest of the epilogue there (_final_epilogue); C is not written."""

    flags: ir.Value
    out: ir.Value
    out_ldc: ir.Value
    out_half: ir.Value
    res: ir.Value
    lohi: ir.Value


def _clamp_bounds(builder: ir.IRBuilder, final: Final) -> tuple[ir.Value, ir.Value]:
    """The clamp _final_store applies as it stores: [lo, hi] where the call stores into the
    output with FIN_CLAMP, else [-inf, inf] (the selects then keep every value, NaN and
    -0 included). Read once per call, before the passes."""
    on = ir.Constant(_I64, FIN_OUT | FIN_CLAMP)
    clamps = builder.icmp_signed("==", builder.and_(final.flags, on), on)
    entry = builder.block
    with builder.if_then(clamps):
        lo = splat(builder, builder.load(_ptr(builder, final.lohi, 0, _F32), align=4))
        hi = splat(builder, builder.load(_ptr(builder, final.lohi, 4, _F32), align=4))
        loaded = builder.block
    bounds = []
    for value, default in ((lo, -np.inf), (hi, np.inf)):
        phi = builder.phi(_VEC)
        phi.add_incoming(value, loaded)
        phi.add_incoming(_const(default), entry)
        bounds.append(phi)
    return bounds[0], bounds[1]


def _final_store(builder: ir.IRBuilder, final: Final, accs: list[ir.Value], r0: int, rows: int,
                 cols: list[int], c_: ir.Value, ldc_: ir.Value, c_half: ir.Value | None,
                 add: ir.Value, biases: list[ir.Value] | None,
                 bounds: tuple[ir.Value, ir.Value]) -> None:
    """The pass's block of C — C + the block where accumulating, else the block + bias —
    stored into C as _micro_pass does, or (FIN_OUT) into the output, + the residual
    (FIN_RES), clamped to ``bounds`` (_clamp_bounds: Relu/Clip's compare and select, NaN
    kept); _final_epilogue then applies any other activation. One branch per pass, on
    accumulating: the residual and the destination are selects, so that the stores are
    straight-line code. With a branch at each vector, 1×1 layers that store after every
    64 or 128 steps of K ran 11-25 % slower (a 12-row block's loop nest on one Zen 3 core,
    old and new kernels alternating). C is read without FIN_RES too (the select drops
    it), so it must be readable memory: the callers' stage always is."""
    flags = final.flags
    to_out = builder.icmp_signed("!=", builder.and_(flags, ir.Constant(_I64, FIN_OUT)),
                                 ir.Constant(_I64, 0))
    with_res = builder.icmp_signed("!=", builder.and_(flags, ir.Constant(_I64, FIN_RES)),
                                   ir.Constant(_I64, 0))
    lo, hi = bounds
    nc = len(cols)
    half = c_half or ir.Constant(_I64, 4 * _LANES)

    def stores(accumulate: bool) -> None:
        for r in range(rows):
            row = builder.add(c_, builder.mul(ir.Constant(_I64, r0 + r), ldc_))
            orow = builder.add(final.out, builder.mul(ir.Constant(_I64, r0 + r),
                                                      final.out_ldc))
            for j, h in enumerate(cols):
                at = builder.add(row, half) if h else row
                out_at = builder.add(orow, final.out_half) if h else orow
                value = accs[nc * r + j]
                if accumulate:
                    v = builder.fadd(builder.load(_ptr(builder, at, 0, _VEC), align=4), value)
                else:
                    v = value if biases is None else builder.fadd(value, biases[j])
                # The residual before the store: it may be the output itself (in place).
                # Without FIN_RES the load reads C, and its sum is not kept.
                res_at = builder.select(with_res, builder.add(out_at, final.res), at)
                summed = builder.fadd(v, builder.load(_ptr(builder, res_at, 0, _VEC), align=4))
                v = builder.select(with_res, summed, v)
                v = builder.select(builder.fcmp_ordered("<", v, lo), lo, v)
                v = builder.select(builder.fcmp_ordered(">", v, hi), hi, v)
                builder.store(v, _ptr(builder, builder.select(to_out, out_at, at), 0, _VEC),
                              align=4)

    _per_pass(builder, add, stores)


def _when(builder: ir.IRBuilder, flags: ir.Value, bit: int, v: ir.Value,
          then: Callable[[ir.Value], ir.Value]) -> ir.Value:
    """``then(v)`` where the flag ``bit`` is set, else v."""
    on = builder.icmp_signed("!=", builder.and_(flags, ir.Constant(_I64, bit)),
                             ir.Constant(_I64, 0))
    entry = builder.block
    with builder.if_then(on):
        done = then(v)
        done_at = builder.block
    out = builder.phi(_VEC)
    out.add_incoming(done, done_at)
    out.add_incoming(v, entry)
    return out


def _const(value: float) -> ir.Constant:
    return ir.Constant(_VEC, [float(np.float32(value))] * _LANES)


def _select_above(builder: ir.IRBuilder, bound: ir.Value, v: ir.Value) -> ir.Value:
    """numba's max(v, bound): bound where bound > v, else v (NaN kept)."""
    return builder.select(builder.fcmp_ordered(">", bound, v), bound, v)


def _select_below(builder: ir.IRBuilder, bound: ir.Value, v: ir.Value) -> ir.Value:
    """numba's min(v, bound)."""
    return builder.select(builder.fcmp_ordered("<", bound, v), bound, v)


def _exp(builder: ir.IRBuilder, x: ir.Value) -> ir.Value:
    """epilogue.exp32 on a vector, operation for operation."""
    floor = cgutils.get_or_insert_function(builder.module, ir.FunctionType(_VEC, [_VEC]),
                                           "llvm.floor.v16f32")
    x = _select_below(builder, _const(EXP_HI), _select_above(builder, _const(EXP_LO), x))
    n = builder.call(floor, [builder.fadd(builder.fmul(x, _const(LOG2E)), _const(0.5))])
    r = builder.fsub(x, builder.fmul(n, _const(LN2_HI)))
    r = builder.fsub(r, builder.fmul(n, _const(LN2_LO)))
    p = _const(EXP_P[0])
    for coef in EXP_P[1:]:
        p = builder.fadd(builder.fmul(p, r), _const(coef))
    p = builder.fadd(builder.fadd(builder.fmul(p, builder.fmul(r, r)), r), _const(1.0))
    bits = builder.fptosi(builder.fmul(builder.fadd(n, _const(127.0)), _const(1 << 23)),
                          ir.VectorType(ir.IntType(32), _LANES))
    return builder.fmul(p, builder.bitcast(bits, _VEC))


def _final_epilogue(builder: ir.IRBuilder, final: Final, mr: int, nv: int) -> None:
    """After every pass stored the block into the output (FIN_OUT, with the residual
    FIN_RES added and the clamp applied: _final_store), the rest of the fused epilogue on
    its mr × nv vectors, as the interpreter's steps compute it: HardSwish (FIN_HSWISH) or
    x·sigmoid(x) (FIN_SILU, exp32 operation for operation); + the residual
    (FIN_RES_AFTER). One loop over the block's rows rather than the code at each of its
    24 stores, which added 14 s to ResNet-50's first build; the vectors come back from
    L1."""
    flags = final.flags
    work = FIN_HSWISH | FIN_SILU | FIN_RES_AFTER
    busy = builder.icmp_signed("!=", builder.and_(flags, ir.Constant(_I64, work)),
                               ir.Constant(_I64, 0))
    out = builder.icmp_signed("!=", builder.and_(flags, ir.Constant(_I64, FIN_OUT)),
                              ir.Constant(_I64, 0))

    def hardswish(x: ir.Value) -> ir.Value:
        h = builder.fadd(builder.fmul(x, _const(1 / 6)), _const(0.5))
        h = builder.select(builder.fcmp_ordered("<", h, _const(0.0)), _const(0.0), h)
        h = builder.select(builder.fcmp_ordered(">", h, _const(1.0)), _const(1.0), h)
        return builder.fmul(h, x)

    def silu(x: ir.Value) -> ir.Value:
        e = _exp(builder, builder.fneg(x))
        return builder.fmul(x, builder.fdiv(_const(1.0), builder.fadd(_const(1.0), e)))

    def row(r: ir.Value, accs: list[ir.Value]) -> list[ir.Value]:
        orow = builder.add(final.out, builder.mul(r, final.out_ldc))
        for h in range(nv):
            at = builder.add(orow, final.out_half) if h else orow
            ptr = _ptr(builder, at, 0, _VEC)
            res = _ptr(builder, at, final.res, _VEC)

            def plus_residual(x: ir.Value, res: ir.Value = res) -> ir.Value:
                return builder.fadd(x, builder.load(res, align=4))

            v = builder.load(ptr, align=4)
            v = _when(builder, flags, FIN_HSWISH, v, hardswish)
            v = _when(builder, flags, FIN_SILU, v, silu)
            v = _when(builder, flags, FIN_RES_AFTER, v, plus_residual)
            builder.store(v, ptr, align=4)
        return accs

    with builder.if_then(builder.and_(out, busy)):
        counted_loop(builder, ir.Constant(_I64, 0), ir.Constant(_I64, mr), [], row)


def _block(builder: ir.IRBuilder, j: ir.Value, accs: list[ir.Value],
           step: Callable[..., list[ir.Value]], a_off_at: Callable[[ir.Value], ir.Value],
           a_lane: ir.Value, a_pf: ir.Value | None = None) -> list[ir.Value]:
    """Steps UNROLL·j … UNROLL·j + UNROLL - 1 (within one run of 16: UNROLL divides 16):
    A's offset computed at the first, the others a_lane bytes apart; A is prefetched once
    per block (its steps read the same lines), two lines on from the last block's where
    ``a_pf`` is given (_micro_pass)."""
    base = builder.shl(j, ir.Constant(_I64, UNROLL.bit_length() - 1))
    first = a_off_at(base)
    lines = None  # bytes past the first row's line that the block prefetches
    if a_pf is not None:
        which = builder.and_(j, ir.Constant(_I64, _LANES // UNROLL - 1))
        spread = builder.mul(which, builder.shl(a_pf, ir.Constant(_I64, 1)))
        lines = [spread, builder.add(spread, a_pf)]
    for lane in range(UNROLL):
        i = builder.or_(base, ir.Constant(_I64, lane)) if lane else base
        off = builder.add(first, builder.mul(a_lane, ir.Constant(_I64, lane))) if lane else first
        accs = step(i, accs, lane == 0, off, lines)
    return accs


@intrinsic
def micro_kernel(typingctx, a, a_sk, a_sr, b, k, c, ldc, accumulate):  # type: ignore[no-untyped-def]
    """C[0:12, 0:32] (=|+=) A · B panel over k ≥ 1 steps. A[r, kk] is at a + kk·a_sk +
    r·a_sr (packed: MR·4 and 4; row-major: 4 and lda·4), the B panel is packed, C rows are
    ldc bytes apart; ``accumulate`` nonzero adds to C. Addresses and strides in bytes."""
    sig = types.void(*([types.int64] * 8))

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        a_, a_sk_, a_sr_, b_, k_, c_, ldc_, acc_flag = args
        _micro_codegen(builder, a_, lambda i: builder.mul(i, a_sk_), a_sr_,
                       lambda i: builder.add(b_, builder.mul(i, ir.Constant(_I64, NR * 4))),
                       k_, c_, ldc_, acc_flag, a_lane=a_sk_)
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def micro_kernel_rows(typingctx, a, a_sk, a_sr, offs, b, k, c, ldc, accumulate):  # type: ignore[no-untyped-def]
    """``micro_kernel`` with B unpacked: its row kk is the 32 floats at b + offs[kk] (offs
    the address of k int64 byte offsets) — an implicit GEMM reading its columns in place."""
    sig = types.void(*([types.int64] * 9))

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        a_, a_sk_, a_sr_, offs_, b_, k_, c_, ldc_, acc_flag = args

        def row_at(i: ir.Value) -> ir.Value:
            at = builder.add(offs_, builder.mul(i, ir.Constant(_I64, 8)))
            return builder.add(b_, builder.load(builder.inttoptr(at, _I64.as_pointer())))

        _micro_codegen(builder, a_, lambda i: builder.mul(i, a_sk_), a_sr_, row_at, k_, c_,
                       ldc_, acc_flag)
        return context.get_dummy_value()

    return sig, codegen


def _blocked(mr: int, nv: int = 2):  # type: ignore[no-untyped-def]
    @intrinsic
    def kernel(typingctx, a, a_blk, a_lane, a_sr, b, k, c, ldc, c_half, bias,  # type: ignore[no-untyped-def]
               accumulate, a_pf, fin, out, out_ldc, out_half, res, lohi):
        sig = types.void(*([types.int64] * 18))

        def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
            (a_, a_blk_, a_lane_, a_sr_, b_, k_, c_, ldc_, c_half_, bias_, acc_flag, a_pf_,
             *rest) = args

            def a_off(i: ir.Value) -> ir.Value:
                blk = builder.mul(builder.ashr(i, ir.Constant(_I64, 4)), a_blk_)
                lane = builder.mul(builder.and_(i, ir.Constant(_I64, _LANES - 1)), a_lane_)
                return builder.add(blk, lane)

            _micro_codegen(builder, a_, a_off, a_sr_,
                           lambda i: builder.add(b_, builder.mul(i, ir.Constant(_I64, NR * 4))),
                           k_, c_, ldc_, acc_flag, c_half_, bias_, mr=mr, nv=nv,
                           a_lane=a_lane_, a_pf=a_pf_, final=Final(*rest))
            return context.get_dummy_value()

        return sig, codegen

    return kernel


# micro_kernel_blocked(a, a_blk, a_lane, a_sr, b, k, c, ldc, c_half, bias, accumulate, a_pf,
#                      fin, out, out_ldc, out_half, res, lohi):
# ``micro_kernel`` with output pixels as A's rows and output channels as C's columns:
# A[r, kk] at a + (kk // 16)·a_blk + (kk % 16)·a_lane + r·a_sr — a blocked tensor's
# pixels (a_lane 4: 16 channels side by side) or a planar one's (a_blk = 16·a_lane, the
# plane) — and C's row r two vectors of 16 channels, at c + r·ldc and c + r·ldc + c_half
# (two blocks of a blocked output), plus the 32 floats at ``bias`` when stored
# (``accumulate`` 0); ``a_pf`` the bytes between the lines of A it prefetches (_micro_pass:
# 64 where a blocked A streams from memory, else 0). B is packed as for micro_kernel. The
# _small variants: MR_SMALL rows; the _16 variants: C's first vector only (an odd last
# block of 16 output channels). ``fin`` and the five after it: the epilogue into the
# output (FIN_OUT, Final); 0 and anything: C as above.
micro_kernel_blocked = _blocked(MR)
micro_kernel_blocked_small = _blocked(MR_SMALL)
micro_kernel_blocked_16 = _blocked(MR, 1)
micro_kernel_blocked_small_16 = _blocked(MR_SMALL, 1)


def _taps(mr: int):  # type: ignore[no-untyped-def]
    @intrinsic
    def kernel(typingctx, a, a_sr, taps, b, k, c, ldc, c_half, bias, accumulate,  # type: ignore[no-untyped-def]
               fin, out, out_ldc, out_half, res, lohi):
        sig = types.void(*([types.int64] * 16))

        def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
            a_, a_sr_, taps_, b_, k_, c_, ldc_, c_half_, bias_, acc_flag, *rest = args

            def a_off(i: ir.Value) -> ir.Value:
                at = builder.add(taps_, builder.mul(builder.ashr(i, ir.Constant(_I64, 4)),
                                                    ir.Constant(_I64, 8)))
                tap = builder.load(builder.inttoptr(at, _I64.as_pointer()))
                lane = builder.mul(builder.and_(i, ir.Constant(_I64, _LANES - 1)),
                                   ir.Constant(_I64, 4))
                return builder.add(tap, lane)

            _micro_codegen(builder, a_, a_off, a_sr_,
                           lambda i: builder.add(b_, builder.mul(i, ir.Constant(_I64, NR * 4))),
                           k_, c_, ldc_, acc_flag, c_half_, bias_, prefetch_b=True, mr=mr,
                           a_lane=ir.Constant(_I64, 4), final=Final(*rest))
            return context.get_dummy_value()

        return sig, codegen

    return kernel


# micro_kernel_taps(a, a_sr, taps, b, k, c, ldc, c_half, bias, accumulate, fin, out, out_ldc,
#                   out_half, res, lohi):
# ``micro_kernel_blocked`` for a convolution read in place from a channel-blocked,
# zero-bordered input: row r's window starts at a + r·a_sr (the output pixels along an
# output row; pass a_sr as a literal — a variable one spills the row addresses), and
# ``taps`` is the address of k/16 int64 byte offsets (input block and kernel tap of each
# 16 values of K): A[r, kk] is the float at a + r·a_sr + taps[kk // 16] + 4·(kk % 16).
# B streams (the weights), so B is prefetched rather than A. The 7 variant: MR7 rows.
# ``fin`` … ``lohi`` as for micro_kernel_blocked.
micro_kernel_taps = _taps(MR)
micro_kernel_taps7 = _taps(MR7)


def packed_a_size(m: int, k: int) -> int:
    return -(-m // MR) * MR * k


def packed_b_size(k: int, n: int) -> int:
    return -(-n // NR) * NR * k


@njit(inline="always", error_model="numpy")
def pack_a(a: np.ndarray, lda: int, m: int, k: int, dst: np.ndarray) -> None:
    """A (m × k, rows lda apart; flat arrays) into MR-row panels, K slice by K slice:
    dst[k0·mp + p·kc·MR + kk·MR + r] = a[(p·MR + r)·lda + k0 + kk], zero past row m
    (mp = m rounded up to MR, kc the slice's length). A slice of every panel is one
    contiguous run, which the GEMM streams through in order (weights come from DRAM)."""
    panels = -(-m // MR)
    mp = panels * MR
    for k0 in range(0, k, KC):
        kc = min(KC, k - k0)
        for p in range(panels):
            base = k0 * mp + p * kc * MR
            for r in range(MR):
                row = p * MR + r
                if row < m:
                    src = a[row * lda + k0:row * lda + k0 + kc]
                    for kk in range(kc):
                        dst[base + kk * MR + r] = src[kk]
                else:
                    for kk in range(kc):
                        dst[base + kk * MR + r] = 0


@njit(inline="always", error_model="numpy")
def pack_b(b: np.ndarray, ldb: int, k: int, n: int, dst: np.ndarray) -> None:
    """dst[p·k·NR + kk·NR + j] = b[kk·ldb + p·NR + j] (flat arrays), zero past column n."""
    for p in range(-(-n // NR)):
        c0 = p * NR
        width = min(NR, n - c0)
        for kk in range(k):
            out = dst[(p * k + kk) * NR:(p * k + kk + 1) * NR]
            src = b[kk * ldb + c0:kk * ldb + c0 + width]
            for j in range(width):
                out[j] = src[j]
            for j in range(width, NR):
                out[j] = 0


@njit(inline="always", error_model="numpy")
def _patch(c: np.ndarray, at: int, ldc: int, edge: np.ndarray, rows: int, cols: int,
           first: int) -> None:
    """A ragged block of C (rows × cols from ``at``) from the scratch block the micro-kernel
    wrote: stored on the first K slice, added on the others."""
    for r in range(rows):
        dst = at + r * ldc
        if first:
            for j in range(cols):
                c[dst + j] = edge[r * NR + j]
        else:
            for j in range(cols):
                c[dst + j] += edge[r * NR + j]


@njit(inline="always")
def _target(whole: bool, at: int, ldc: int, first: int, edge: int) -> tuple[int, int, int]:
    """Where a micro-kernel call writes its block of C: (address, row stride in bytes,
    accumulate): in place at ``at`` for a whole block, else the scratch block at address
    ``edge``, which _patch then copies out. The callers make one call either way: each
    call site is a copy of the micro-kernel's code to compile."""
    if whole:
        return at, ldc * 4, 1 - first
    return edge, NR * 4, 0


@njit(inline="always", error_model="numpy")
def gemm(m: int, n: int, k: int, a: int, mp: int, p0: int, lda: int, bp: np.ndarray,
         c: np.ndarray, c0: int, ldc: int, edge: np.ndarray) -> None:
    """c[c0 + i·ldc + j] = Σ A[i, kk]·B[kk, j] for i < m, j < n; c a flat float32 array.

    A at address a is either packed (pack_a; ``mp`` > 0 its padded row count, A's row i
    that matrix's row p0·MR + i) or row-major (``mp`` = 0, rows lda floats apart,
    readable up to the next multiple of MR rows); B is packed (bp); edge is a scratch
    block of MR × NR for the ragged edges of C.
    """
    strips, panels = -(-n // NR), -(-m // MR)
    ca, ea = c.ctypes.data, edge.ctypes.data
    a_sk, a_sr = (MR * 4, 4) if mp else (4, lda * 4)
    # Within a span of KB values of K, its slices run innermost but one: a block of MC
    # rows × one strip of C stays in L1/L2 while they add to it, and the rows' span of A
    # (MC × KB) stays in L2 for every strip. With each slice of KC outermost, every slice
    # read and wrote all of C again (a 1024×512 product with K = 512: 4 × 2 MB through L3).
    for kb in range(0, k, KB):
        for m0 in range(0, panels, MC // MR):
            for s in range(strips):
                cols = min(NR, n - s * NR)
                for k0 in range(kb, min(k, kb + KB), KC):
                    kc = min(KC, k - k0)
                    first = 1 if k0 == 0 else 0
                    b = bp.ctypes.data + ((s * k + k0) * NR) * 4
                    for p in range(m0, min(panels, m0 + MC // MR)):
                        if mp:
                            ak = a + (k0 * mp + (p0 + p) * kc * MR) * 4
                        else:
                            ak = a + (p * MR * lda + k0) * 4
                        rows = min(MR, m - p * MR)
                        whole = rows == MR and cols == NR
                        dst, ld, more = _target(whole, ca + (c0 + p * MR * ldc + s * NR) * 4,
                                                ldc, first, ea)
                        micro_kernel(ak, a_sk, a_sr, b, kc, dst, ld, more)
                        if not whole:
                            _patch(c, c0 + p * MR * ldc + s * NR, ldc, edge, rows, cols,
                                   first)


@njit(inline="always", error_model="numpy")
def gemm_gather(m: int, n: int, k: int, ap: np.ndarray, rows: int, p0: int, offs: np.ndarray,
                b: int, c: np.ndarray, c0: int, ldc: int, edge: np.ndarray) -> None:
    """``gemm_packed`` with B read in place: B[kk, j] is the float at address b + offs[kk]
    + 4·j (offs int64 bytes). Every row must be readable to the next multiple of NR
    columns (the columns past n are computed and dropped)."""
    strips, panels = -(-n // NR), -(-m // MR)
    mp = -(-rows // MR) * MR
    ca, ea, oa, a = c.ctypes.data, edge.ctypes.data, offs.ctypes.data, ap.ctypes.data
    for k0 in range(0, k, KC):
        kc = min(KC, k - k0)
        first = 1 if k0 == 0 else 0
        for m0 in range(0, panels, MC // MR):
            for s in range(strips):
                bs = b + s * NR * 4
                cols = min(NR, n - s * NR)
                for p in range(m0, min(panels, m0 + MC // MR)):
                    ak = a + (k0 * mp + (p0 + p) * kc * MR) * 4
                    rows_here = min(MR, m - p * MR)
                    whole = rows_here == MR and cols == NR
                    dst, ld, more = _target(whole, ca + (c0 + p * MR * ldc + s * NR) * 4, ldc,
                                            first, ea)
                    micro_kernel_rows(ak, MR * 4, 4, oa + k0 * 8, bs, kc, dst, ld, more)
                    if not whole:
                        _patch(c, c0 + p * MR * ldc + s * NR, ldc, edge, rows_here, cols, first)


@njit(inline="always")
def gemm_packed(m: int, n: int, k: int, ap: np.ndarray, rows: int, p0: int, bp: np.ndarray,
                c: np.ndarray, c0: int, ldc: int, edge: np.ndarray) -> None:
    """``gemm`` with A = rows p0·MR … p0·MR + m - 1 of the matrix of ``rows`` rows packed
    (pack_a) in the flat array ap."""
    gemm(m, n, k, ap.ctypes.data, -(-rows // MR) * MR, p0, 0, bp, c, c0, ldc, edge)


@njit(inline="always")
def gemm_rows(m: int, n: int, k: int, a: int, lda: int, bp: np.ndarray, c: np.ndarray,
              c0: int, ldc: int, edge: np.ndarray) -> None:
    """``gemm`` with A row-major at address a, rows lda floats apart (readable up to the
    next multiple of MR rows)."""
    gemm(m, n, k, a, 0, 0, lda, bp, c, c0, ldc, edge)
