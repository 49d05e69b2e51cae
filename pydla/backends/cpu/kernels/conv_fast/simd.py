"""Explicit 16-lane float32 vector code for the Winograd transforms.

LLVM vectorizes a numba loop over channels only after proving at run time that its loads
and stores do not overlap; a Winograd tile reads and writes dozens of rows at once, the
checks exceed its budget and the loop stays scalar (4× slower here). These intrinsics
load, combine and store whole vectors of 16 channels at given addresses instead: callers
guarantee alignment-free, non-overlapping, in-bounds blocks of 16 floats.

``linear_map(name, rows)`` builds an intrinsic ``f(src, src_step, dst, dst_step)`` (all
int64: byte addresses and byte strides) computing dst[j] = Σ_i rows[j][i] · src[i] over
vectors, for a small constant matrix — Bᵀ and Aᵀ of the transforms.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

LANES = 16


def _target_features() -> set[str]:
    """The CPU features numba compiles for: NUMBA_CPU_FEATURES where set, else the host's."""
    from numba import config  # noqa: PLC0415  (read when the kernels are first built)

    if config.CPU_FEATURES:
        return {f[1:] for f in str(config.CPU_FEATURES).split(",") if f.startswith("+")}
    import llvmlite.binding as llvm  # noqa: PLC0415

    return {name for name, on in llvm.get_host_cpu_features().items() if on}


# How many 16-float vectors of accumulators a register-blocked loop may keep live: LLVM
# splits a <16 x float> into as many native registers as it takes — one of 32 with
# AVX-512, two of 16 with AVX2 — and a loop that keeps more live than the registers hold
# spills at every step (12×32 GEMM blocks ran at 38 % of AVX2's FMA peak). Three quarters
# of the file, the rest for the operands.
_AVX512 = "avx512f" in _target_features()
ACC_VECTORS = 24 if _AVX512 else 6
# Native registers per 16-float vector, and the independent FMA chains a core needs in
# flight to keep both FMA pipes busy (latency 4 × 2 pipes: Zen 3, Skylake-X, Ice Lake).
NATIVE_PER_VECTOR = 1 if _AVX512 else 2
FMA_CHAINS = 8


def split_rows(rows: int, per_row: int) -> list[int]:
    """``rows`` rows of ``per_row`` accumulator vectors each, in as few balanced groups as
    keep every group within ACC_VECTORS (a register-blocked loop runs once per group)."""
    most = max(1, ACC_VECTORS // per_row)
    groups = -(-rows // most)
    return [rows // groups + (1 if g < rows % groups else 0) for g in range(groups)]


def register_passes(rows: int, cols: int) -> list[tuple[range, list[int]]]:
    """The loops a register-blocked block of ``rows`` × ``cols`` accumulator vectors runs
    as: (its rows, its column vectors) each — the whole block where it fits ACC_VECTORS,
    else one column vector at a time, its rows in groups (split_rows)."""
    col_sets = [list(range(cols))] if rows * cols <= ACC_VECTORS else [[c] for c in range(cols)]
    passes = []
    for col_set in col_sets:
        first = 0
        for count in split_rows(rows, len(col_set)):
            passes.append((range(first, first + count), col_set))
            first += count
    return passes


def pass_cost(rows: int, cols: int) -> float:
    """Relative time per step of K of a register-blocked block of ``rows`` × ``cols``
    accumulator vectors: its FMAs, stretched for each pass that holds fewer accumulator
    registers than FMA_CHAINS (it waits on its own FMAs: on AVX2 a 7-row block runs as
    passes of 4 and 3 rows, the second at 6 of 8 chains)."""
    total = 0.0
    for group, col_set in register_passes(rows, cols):
        regs = len(group) * len(col_set) * NATIVE_PER_VECTOR
        total += len(group) * len(col_set) * max(1.0, FMA_CHAINS / regs)
    return total


_F32 = ir.FloatType()
_VEC = ir.VectorType(_F32, LANES)
_I64 = ir.IntType(64)


def splat(builder: ir.IRBuilder, value: ir.Value) -> ir.Value:
    """A float32 spread over the 16 lanes."""
    lane0 = builder.insert_element(ir.Constant(_VEC, ir.Undefined), value,
                                   ir.Constant(ir.IntType(32), 0))
    return builder.shuffle_vector(lane0, ir.Constant(_VEC, ir.Undefined),
                                  ir.Constant(ir.VectorType(ir.IntType(32), LANES), [0] * LANES))


def counted_loop(builder: ir.IRBuilder, lo: ir.Value, hi: ir.Value, accs: list[ir.Value],
                 body: Callable[[ir.Value, list[ir.Value]], list[ir.Value]]) -> list[ir.Value]:
    """for i in [lo, hi): accs = body(i, accs) — skipped when empty; returns the accs
    (values of any LLVM type: float vectors here, int32 vectors in the int8 kernels)."""
    fn = builder.function
    entry = builder.block
    loop = fn.append_basic_block("loop")
    done = fn.append_basic_block("done")
    builder.cbranch(builder.icmp_signed("<", lo, hi), loop, done)
    builder.position_at_end(loop)
    i = builder.phi(_I64)
    i.add_incoming(lo, entry)
    phis = []
    for value in accs:
        phi = builder.phi(value.type)
        phi.add_incoming(value, entry)
        phis.append(phi)
    new = body(i, phis)
    tail = builder.block
    nxt = builder.add(i, ir.Constant(_I64, 1))
    i.add_incoming(nxt, tail)
    for phi, value in zip(phis, new):
        phi.add_incoming(value, tail)
    builder.cbranch(builder.icmp_signed("<", nxt, hi), loop, done)
    builder.position_at_end(done)
    out = []
    for before, value in zip(accs, new):
        merged = builder.phi(before.type)
        merged.add_incoming(before, entry)
        merged.add_incoming(value, tail)
        out.append(merged)
    return out


def _combine(builder: ir.IRBuilder, row: Sequence[float], src: list[ir.Value]) -> ir.Value:
    """Σ row[i]·src[i] with no multiplication by 0 or ±1."""
    acc: ir.Value | None = None
    for coef, value in zip(row, src):
        if coef == 0:
            continue
        if abs(coef) != 1:
            value = builder.fmul(value, ir.Constant(_VEC, [float(abs(coef))] * LANES))
        if acc is None:
            acc = value if coef > 0 else builder.fneg(value)
        elif coef > 0:
            acc = builder.fadd(acc, value)
        else:
            acc = builder.fsub(acc, value)
    return acc if acc is not None else ir.Constant(_VEC, [0.0] * LANES)


def linear_map(rows: Sequence[Sequence[float]]) -> Callable[..., None]:
    """An intrinsic ``(src, src_step, dst, dst_step)``: dst vectors = rows · src vectors."""
    n_in = len(rows[0])

    @intrinsic
    def apply(typingctx, src, src_step, dst, dst_step):  # type: ignore[no-untyped-def]
        sig = types.void(types.int64, types.int64, types.int64, types.int64)

        def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
            s, ss, d, ds = args

            def at(base, step, i):  # type: ignore[no-untyped-def]
                addr = builder.add(base, builder.mul(step, ir.Constant(_I64, i)))
                return builder.inttoptr(addr, _VEC.as_pointer())

            vals = [builder.load(at(s, ss, i), align=4) for i in range(n_in)]
            outs = [_combine(builder, row, vals) for row in rows]
            for j, value in enumerate(outs):
                builder.store(value, at(d, ds, j), align=4)
            return context.get_dummy_value()

        return sig, codegen

    return apply


def _transpose(builder: ir.IRBuilder, rows: list[ir.Value]) -> list[ir.Value]:
    """The 16×16 transpose of 16 vectors: four rounds that swap the off-diagonal h×h blocks
    of each pair of rows h apart (h = 8, 4, 2, 1), one two-source shuffle per row each."""
    i32 = ir.IntType(32)
    rows = list(rows)
    h = LANES // 2
    while h:
        low = [lane if lane & h == 0 else LANES + lane - h for lane in range(LANES)]
        high = [lane + h if lane & h == 0 else LANES + lane for lane in range(LANES)]
        low_mask = ir.Constant(ir.VectorType(i32, LANES), low)
        high_mask = ir.Constant(ir.VectorType(i32, LANES), high)
        for i in range(LANES):
            if i & h:
                continue
            a, b = rows[i], rows[i + h]
            rows[i] = builder.shuffle_vector(a, b, low_mask)
            rows[i + h] = builder.shuffle_vector(a, b, high_mask)
        h //= 2
    return rows


@intrinsic
def transpose16(typingctx, src, src_step, dst, dst_step, bias):  # type: ignore[no-untyped-def]
    """dst row j = (column j of the 16×16 block at src) + bias[j]; addresses and byte
    strides as int64, ``bias`` the address of 16 float32 (0: no bias)."""
    sig = types.void(types.int64, types.int64, types.int64, types.int64, types.int64)

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        s, ss, d, ds, b = args

        def at(base, step, i):  # type: ignore[no-untyped-def]
            addr = builder.add(base, builder.mul(step, ir.Constant(_I64, i)))
            return builder.inttoptr(addr, _VEC.as_pointer())

        rows = _transpose(builder, [builder.load(at(s, ss, i), align=4) for i in range(LANES)])
        has_bias = builder.icmp_signed("!=", b, ir.Constant(_I64, 0))
        with builder.if_then(has_bias):
            biases = builder.load(builder.inttoptr(b, _VEC.as_pointer()), align=4)
            for j in range(LANES):
                lane = builder.extract_element(biases, ir.Constant(ir.IntType(32), j))
                builder.store(builder.fadd(rows[j], splat(builder, lane)), at(d, ds, j),
                              align=4)
        with builder.if_then(builder.not_(has_bias)):
            for j in range(LANES):
                builder.store(rows[j], at(d, ds, j), align=4)
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def copy_bytes(typingctx, dst, src, nbytes):  # type: ignore[no-untyped-def]
    """memcpy(dst, src, nbytes) on int64 addresses (not overlapping): numba's own copies of
    short runs — a loop over elements stays scalar behind its negative-index checks, a slice
    assignment builds two array views first — cost 2-3× as much for runs of 64 floats."""
    sig = types.void(types.int64, types.int64, types.int64)

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        d, s, n = args
        i8p = ir.IntType(8).as_pointer()
        memcpy = cgutils.get_or_insert_function(builder.module, ir.FunctionType(
            ir.VoidType(), [i8p, i8p, _I64, ir.IntType(1)]), "llvm.memcpy.p0i8.p0i8.i64")
        builder.call(memcpy, [builder.inttoptr(d, i8p), builder.inttoptr(s, i8p), n,
                              ir.Constant(ir.IntType(1), 0)])
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def zero_bytes(typingctx, dst, nbytes):  # type: ignore[no-untyped-def]
    """memset(dst, 0, nbytes) on an int64 address: a slice set to 0 (``row[:] = 0``) is a
    loop numba leaves scalar, ≈ 5× slower for a 224-float row."""
    sig = types.void(types.int64, types.int64)

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        d, n = args
        i8p = ir.IntType(8).as_pointer()
        memset = cgutils.get_or_insert_function(builder.module, ir.FunctionType(
            ir.VoidType(), [i8p, ir.IntType(8), _I64, ir.IntType(1)]), "llvm.memset.p0i8.i64")
        builder.call(memset, [builder.inttoptr(d, i8p), ir.Constant(ir.IntType(8), 0), n,
                              ir.Constant(ir.IntType(1), 0)])
        return context.get_dummy_value()

    return sig, codegen


# Loops, not slice expressions: in an ordinary compiled function (a fork task) numba
# runs ``row[:] = b`` and ``row += b`` through generic strided loops that stay scalar,
# ≈ 5× slower for a row of 224 floats (inside a prange body they became simple loops).
@njit(inline="always", error_model="numpy")
def fill(row: np.ndarray, value: np.float32) -> None:
    for q in range(row.shape[0]):
        row[q] = value


@njit(inline="always", error_model="numpy")
def add_scalar(row: np.ndarray, value: np.float32) -> None:
    for q in range(row.shape[0]):
        row[q] += value


def _fma(builder: ir.IRBuilder) -> ir.Function:
    return cgutils.get_or_insert_function(
        builder.module, ir.FunctionType(_VEC, [_VEC, _VEC, _VEC]), "llvm.fma.v16f32")


def _vec_at(builder: ir.IRBuilder, addr: ir.Value) -> ir.Value:
    """A pointer to the 16 floats at byte address ``addr`` (an i64)."""
    return builder.inttoptr(addr, _VEC.as_pointer())


def _offset(builder: ir.IRBuilder, table: ir.Value, t: ir.Value) -> ir.Value:
    """Entry t of the int64 table at byte address ``table``."""
    addr = builder.add(table, builder.mul(t, ir.Constant(_I64, 8)))
    return builder.load(builder.inttoptr(addr, _I64.as_pointer()))


def _clamp(builder: ir.IRBuilder, value: ir.Value, lo: ir.Value, hi: ir.Value) -> ir.Value:
    """value bounded to the float32 scalars [lo, hi]; NaN passes through."""
    lo_v, hi_v = splat(builder, lo), splat(builder, hi)
    value = builder.select(builder.fcmp_ordered("<", value, lo_v), lo_v, value)
    return builder.select(builder.fcmp_ordered(">", value, hi_v), hi_v, value)


def tap_sum(pixels: int, broadcast: bool = False, blocks: int = 1,
            clamp: bool = False, gather: bool = False) -> Callable[..., None]:
    """An intrinsic ``(src, pixel_step, offsets, weights, taps, bias, dst, dst_step)``
    (int64 byte addresses and strides; ``offsets`` the address of ``taps`` int64 byte
    offsets): for p < pixels and b < blocks, the vector at dst + b·dst_step + 64·p =
    bias[b] + Σ_t weights[t, b] · src[p·pixel_step + offsets[t]], accumulated in registers
    over the taps (weights[t, b] at weights + 64·(t·blocks + b), bias[b] at bias + 64·b).
    Without ``broadcast`` every operand is a vector of 16 channels (a depthwise convolution
    on 16 channels, one block); with it the source is one float, spread over the lanes,
    and each block of weights holds 16 output channels (a direct convolution producing
    16·blocks channels of ``pixels`` pixels, each input value loaded once for them all).
    With ``clamp`` two more float32 arguments (lo, hi) bound every stored value — a fused
    Relu or Clip (NaN passes through, as in the epilogue's). With ``gather`` the second
    argument is the address of ``pixels`` int64 byte offsets from src, one per pixel,
    instead of one step between them: pixels anywhere in a plane share one call."""
    if blocks > 1 and not broadcast:
        raise ValueError("several blocks need a broadcast source")

    def make(sig):  # type: ignore[no-untyped-def]
        def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
            s, st, offs, w, n, b, d, ds = args[:8]
            fma = _fma(builder)
            vec = functools.partial(_vec_at, builder)
            if gather:
                bases = [builder.add(s, _offset(builder, st, ir.Constant(_I64, p)))
                         for p in range(pixels)]
            else:
                bases = [builder.add(s, builder.mul(st, ir.Constant(_I64, p)))
                         for p in range(pixels)]

            def run(pix: list[int], blks: list[int]) -> None:
                """One loop over the taps: accumulators for pixels ``pix`` × blocks ``blks``."""
                starts = [builder.load(vec(builder.add(b, ir.Constant(_I64, 64 * k))),
                                       align=4) for k in blks]

                def body(t: ir.Value, accs: list[ir.Value]) -> list[ir.Value]:
                    # accs pixel-major: accs[p·len(blks) + k]
                    off = _offset(builder, offs, t)
                    row = builder.add(w, builder.mul(t, ir.Constant(_I64, 64 * blocks)))
                    wvs = [builder.load(vec(builder.add(row, ir.Constant(_I64, 64 * k))),
                                        align=4) for k in blks]

                    def source(base):  # type: ignore[no-untyped-def]
                        addr = builder.add(base, off)
                        if not broadcast:
                            return builder.load(vec(addr), align=4)
                        return splat(builder, builder.load(
                            builder.inttoptr(addr, _F32.as_pointer()), align=4))

                    new = []
                    for p in pix:
                        x = source(bases[p])
                        for wv in wvs:
                            new.append(builder.call(fma, [wv, x, accs[len(new)]]))
                    return new

                new = counted_loop(builder, ir.Constant(_I64, 0), n, starts * len(pix), body)
                for i, p in enumerate(pix):
                    for j, k in enumerate(blks):
                        at = builder.add(builder.add(d, builder.mul(ds, ir.Constant(_I64, k))),
                                         ir.Constant(_I64, 64 * p))
                        value = new[i * len(blks) + j]
                        if clamp:
                            value = _clamp(builder, value, args[8], args[9])
                        builder.store(value, vec(at), align=4)

            for pix, blks in register_passes(pixels, blocks):  # within the registers
                run(list(pix), blks)
            return context.get_dummy_value()

        return sig, codegen

    if clamp:
        @intrinsic
        def apply_clamped(typingctx, src, step, offsets, weights, taps, bias, dst, dst_step,  # type: ignore[no-untyped-def]
                          lo, hi):
            return make(types.void(*([types.int64] * 8), types.float32, types.float32))

        return apply_clamped  # type: ignore[no-any-return]

    @intrinsic
    def apply(typingctx, src, step, offsets, weights, taps, bias, dst, dst_step):  # type: ignore[no-untyped-def]
        return make(types.void(*([types.int64] * 8)))

    return apply  # type: ignore[no-any-return]


@intrinsic
def tap_sum_one(typingctx, src, step, offsets, weights, taps, bias, dst, dst_step, lo, hi):  # type: ignore[no-untyped-def]
    """``tap_sum(1, clamp=True)`` for one pixel, its taps spread over four accumulators
    (taps t, t + 4, … in one): a lone pixel's chain of dependent multiply-adds otherwise
    waits the FMA's full latency at every tap (4× slower here). Same arguments; ``step``
    and ``dst_step`` are unused. The sum is in another order than tap_sum's."""
    sig = types.void(*([types.int64] * 8), types.float32, types.float32)

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        s, _, offs, w, n, b, d, _, low, high = args
        fma = _fma(builder)
        vec = functools.partial(_vec_at, builder)
        accs = [cgutils.alloca_once(builder, _VEC) for _ in range(4)]
        builder.store(builder.load(vec(b), align=4), accs[0])
        for acc in accs[1:]:
            builder.store(ir.Constant(_VEC, [0.0] * LANES), acc)

        def tap(t: ir.Value, acc: ir.Value) -> None:
            off = _offset(builder, offs, t)
            wv = builder.load(vec(builder.add(w, builder.mul(t, ir.Constant(_I64, 64)))),
                              align=4)
            x = builder.load(vec(builder.add(s, off)), align=4)
            builder.store(builder.call(fma, [wv, x, builder.load(acc)]), acc)

        quads = builder.ashr(n, ir.Constant(_I64, 2))

        def quad(j: ir.Value) -> None:
            for u, acc in enumerate(accs):
                tap(builder.add(builder.shl(j, ir.Constant(_I64, 2)), ir.Constant(_I64, u)),
                    acc)

        _counted_loop(builder, quads, quad, "quads")
        first = builder.shl(quads, ir.Constant(_I64, 2))
        _counted_loop(builder, builder.sub(n, first),
                      lambda j: tap(builder.add(first, j), accs[0]), "rest")
        a = [builder.load(acc) for acc in accs]
        value = builder.fadd(builder.fadd(a[0], a[1]), builder.fadd(a[2], a[3]))
        builder.store(_clamp(builder, value, low, high), vec(d), align=4)
        return context.get_dummy_value()

    return sig, codegen


def tap_max(pixels: int) -> Callable[..., None]:
    """An intrinsic ``(src, pixel_step, offsets, taps, dst)`` (int64 byte addresses and
    strides; ``offsets`` the address of ``taps`` ≥ 1 int64 byte offsets): for p < pixels
    the vector at dst + 64·p = max over t of the vector at src + p·pixel_step +
    offsets[t] — a max pool's window over 16 channels; a NaN in the window wins, as in
    the reference's np.max."""

    @intrinsic
    def apply(typingctx, src, step, offsets, taps, dst):  # type: ignore[no-untyped-def]
        sig = types.void(*([types.int64] * 5))

        def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
            s, st, offs, n, d = args
            vec = functools.partial(_vec_at, builder)
            bases = [builder.add(s, builder.mul(st, ir.Constant(_I64, p)))
                     for p in range(pixels)]
            accs = [cgutils.alloca_once(builder, _VEC) for _ in range(pixels)]
            for acc in accs:
                builder.store(ir.Constant(_VEC, [float("-inf")] * LANES), acc)

            def tap(t: ir.Value) -> None:
                off = _offset(builder, offs, t)
                for base, acc in zip(bases, accs):
                    x = builder.load(vec(builder.add(base, off)), align=4)
                    a = builder.load(acc)
                    m = builder.select(builder.fcmp_ordered(">", x, a), x, a)
                    builder.store(builder.select(builder.fcmp_unordered("uno", x, x), x, m),
                                  acc)

            _counted_loop(builder, n, tap, "window")
            for p, acc in enumerate(accs):
                builder.store(builder.load(acc),
                              vec(builder.add(d, ir.Constant(_I64, 64 * p))), align=4)
            return context.get_dummy_value()

        return sig, codegen

    return apply  # type: ignore[no-any-return]


def vector_rows(op: str) -> Callable[..., None]:
    """An intrinsic ``(src, dst, vec, count)`` (int64 byte addresses): for j < count the
    16 floats at dst + 64·j = (those at src + 64·j) ``op`` (the 16 at vec) — op one of
    mul, add, sub (src − vec), rsub (vec − src). A broadcast over the rows of a blocked
    tensor, whole vectors at a time."""
    if op not in ("mul", "add", "sub", "rsub"):
        raise ValueError(f"unknown op {op!r}")

    @intrinsic
    def apply(typingctx, src, dst, vec, count):  # type: ignore[no-untyped-def]
        sig = types.void(*([types.int64] * 4))

        def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
            s, d, v, n = args
            ptr = _VEC.as_pointer()
            value = builder.load(builder.inttoptr(v, ptr), align=4)

            def row(j: ir.Value) -> None:
                off = builder.mul(j, ir.Constant(_I64, 4 * LANES))
                x = builder.load(builder.inttoptr(builder.add(s, off), ptr), align=4)
                if op == "mul":
                    y = builder.fmul(x, value)
                elif op == "add":
                    y = builder.fadd(x, value)
                elif op == "sub":
                    y = builder.fsub(x, value)
                else:
                    y = builder.fsub(value, x)
                builder.store(y, builder.inttoptr(builder.add(d, off), ptr), align=4)

            _counted_loop(builder, n, row, "rows")
            return context.get_dummy_value()

        return sig, codegen

    return apply


@intrinsic
def vector_sum(typingctx, src, count, step, dst, scale):  # type: ignore[no-untyped-def]
    """The 16 floats at dst = scale · Σ_{j < count} (the 16 at src + j·step); addresses and
    ``step`` int64 bytes, ``scale`` float32. A reduction over the rows of a blocked
    tensor, in one vector register."""
    sig = types.void(types.int64, types.int64, types.int64, types.int64, types.float32)

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        s, n, st, d, k = args
        ptr = _VEC.as_pointer()
        zero = ir.Constant(_VEC, [0.0] * LANES)
        entry = builder.block
        fn = builder.function
        loop = fn.append_basic_block("sum.loop")
        done = fn.append_basic_block("sum.done")
        builder.cbranch(builder.icmp_signed(">", n, ir.Constant(_I64, 0)), loop, done)
        builder.position_at_end(loop)
        j = builder.phi(_I64)
        j.add_incoming(ir.Constant(_I64, 0), entry)
        acc = builder.phi(_VEC)
        acc.add_incoming(zero, entry)
        x = builder.load(builder.inttoptr(builder.add(s, builder.mul(j, st)), ptr), align=4)
        total = builder.fadd(acc, x)
        nxt = builder.add(j, ir.Constant(_I64, 1))
        j.add_incoming(nxt, loop)
        acc.add_incoming(total, loop)
        builder.cbranch(builder.icmp_signed("<", nxt, n), loop, done)
        builder.position_at_end(done)
        result = builder.phi(_VEC)
        result.add_incoming(zero, entry)
        result.add_incoming(total, loop)
        builder.store(builder.fmul(result, splat(builder, k)), builder.inttoptr(d, ptr),
                      align=4)
        return context.get_dummy_value()

    return sig, codegen



def _masked(builder: ir.IRBuilder, name: str, args: list[ir.Value]) -> ir.Value:
    """llvm.masked.load (ptr, align, mask, passthru) or .store (value, ptr, align, mask)."""
    ptr = _VEC.as_pointer()
    mask = ir.VectorType(ir.IntType(1), LANES)
    if name == "load":
        fnty = ir.FunctionType(_VEC, [ptr, ir.IntType(32), mask, _VEC])
    else:
        fnty = ir.FunctionType(ir.VoidType(), [_VEC, ptr, ir.IntType(32), mask])
    fn = cgutils.get_or_insert_function(builder.module, fnty,
                                        f"llvm.masked.{name}.v16f32.p0v16f32")
    return builder.call(fn, args)


def _lane_mask(builder: ir.IRBuilder, count: ir.Value) -> ir.Value:
    """A <16 x i1> with the lanes below ``count`` (an int64, clamped to 0…16) set."""
    i32 = ir.IntType(32)
    vec32 = ir.VectorType(i32, LANES)
    c = builder.select(builder.icmp_signed("<", count, ir.Constant(_I64, 0)),
                       ir.Constant(_I64, 0), count)
    v = builder.insert_element(ir.Constant(vec32, ir.Undefined), builder.trunc(c, i32),
                               ir.Constant(i32, 0))
    v = builder.shuffle_vector(v, ir.Constant(vec32, ir.Undefined),
                               ir.Constant(vec32, [0] * LANES))
    return builder.icmp_signed("<", ir.Constant(vec32, list(range(LANES))), v)


def _counted_loop(builder: ir.IRBuilder, count: ir.Value, body: Callable[[ir.Value], None],
                  name: str) -> None:
    """Emit ``body(j)`` for 0 ≤ j < count (an i64; nothing when it is not positive); the
    body may open blocks of its own."""
    entry = builder.block
    fn = builder.function
    loop = fn.append_basic_block(f"{name}.loop")
    done = fn.append_basic_block(f"{name}.done")
    builder.cbranch(builder.icmp_signed(">", count, ir.Constant(_I64, 0)), loop, done)
    builder.position_at_end(loop)
    j = builder.phi(_I64)
    j.add_incoming(ir.Constant(_I64, 0), entry)
    body(j)
    nxt = builder.add(j, ir.Constant(_I64, 1))
    j.add_incoming(nxt, builder.block)
    builder.cbranch(builder.icmp_signed("<", nxt, count), loop, done)
    builder.position_at_end(done)


def _steps_then_tail(builder: ir.IRBuilder, n: ir.Value, per_step: int,
                     step: Callable[[ir.Value, ir.Value | None], None]) -> None:
    """Emit ``step(j, None)`` for each whole step j < n // per_step (per_step a power of
    two, in floats), then ``step(n // per_step, rest)`` if rest = n % per_step is not 0."""
    shift = ir.Constant(_I64, per_step.bit_length() - 1)
    full = builder.ashr(n, shift)
    _counted_loop(builder, full, lambda j: step(j, None), "steps")
    fn = builder.function
    last = fn.append_basic_block("steps.rest")
    done = fn.append_basic_block("steps.tail_done")
    rest = builder.sub(n, builder.shl(full, shift))
    builder.cbranch(builder.icmp_signed(">", rest, ir.Constant(_I64, 0)), last, done)
    builder.position_at_end(last)
    step(full, rest)
    builder.branch(done)
    builder.position_at_end(done)


def vector_reduce(op: str, whole_store: bool = False) -> Callable[..., None]:
    """An intrinsic ``(srcs, nsrc, dst, count)`` (int64; ``srcs`` the address of nsrc ≥ 1
    int64 byte addresses, dst a byte address, count floats): for i < count, dst[i] = the
    max ("max") or sum ("add") over s of src_s[i], combined in registers — whole vectors,
    the last one's loads masked, and its store too unless ``whole_store`` (dst has room
    for whole vectors: a scratch row the next pass reads — a load is not forwarded from
    a masked store and waits for it to retire). Max keeps the first operand unless the
    next is greater (NaN in the first source stays, later NaNs are skipped: the scalar
    ``v if v > t else t``).
    LLVM's own vectorised loops take 64 floats a step and leave a shorter row (a pooling
    row of 56) to scalar code."""
    if op not in ("max", "add"):
        raise ValueError(f"unknown op {op!r}")

    @intrinsic
    def apply(typingctx, srcs, nsrc, dst, count):  # type: ignore[no-untyped-def]
        sig = types.void(*([types.int64] * 4))

        def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
            table, k, d, n = args
            ptr = _VEC.as_pointer()
            i32 = ir.IntType(32)
            align = ir.Constant(i32, 4)
            zero = ir.Constant(_VEC, [0.0] * LANES)

            def src(s: ir.Value) -> ir.Value:
                at = builder.add(table, builder.mul(s, ir.Constant(_I64, 8)))
                return builder.load(builder.inttoptr(at, _I64.as_pointer()))

            def fold(j: ir.Value, rest: ir.Value | None) -> None:
                """Vector j of every source into dst (its first ``rest`` lanes)."""
                off = builder.mul(j, ir.Constant(_I64, 4 * LANES))
                mask = None if rest is None else _lane_mask(builder, rest)

                def load(base: ir.Value) -> ir.Value:
                    p = builder.inttoptr(builder.add(base, off), ptr)
                    if mask is None:
                        return builder.load(p, align=4)
                    return _masked(builder, "load", [p, align, mask, zero])

                first = load(src(ir.Constant(_I64, 0)))
                before = builder.block
                fn = builder.function
                body = fn.append_basic_block("reduce.src")
                after = fn.append_basic_block("reduce.stored")
                more = builder.icmp_signed(">", k, ir.Constant(_I64, 1))
                builder.cbranch(more, body, after)
                builder.position_at_end(body)
                s = builder.phi(_I64)
                s.add_incoming(ir.Constant(_I64, 1), before)
                acc = builder.phi(_VEC)
                acc.add_incoming(first, before)
                x = load(src(s))
                if op == "add":
                    new = builder.fadd(acc, x)
                else:
                    new = builder.select(builder.fcmp_ordered(">", x, acc), x, acc)
                nxt = builder.add(s, ir.Constant(_I64, 1))
                s.add_incoming(nxt, body)
                acc.add_incoming(new, body)
                looped = builder.block
                builder.cbranch(builder.icmp_signed("<", nxt, k), body, after)
                builder.position_at_end(after)
                value = builder.phi(_VEC)
                value.add_incoming(first, before)
                value.add_incoming(new, looped)
                p = builder.inttoptr(builder.add(d, off), ptr)
                if mask is None or whole_store:
                    builder.store(value, p, align=4)
                else:
                    _masked(builder, "store", [value, p, align, mask])

            _steps_then_tail(builder, n, LANES, fold)
            return context.get_dummy_value()

        return sig, codegen

    return apply  # type: ignore[no-any-return]


@intrinsic
def deinterleave2(typingctx, src, even, odd, count):  # type: ignore[no-untyped-def]
    """For i < count (floats at byte address src): even[i // 2] = src[i] for even i,
    odd[i // 2] for odd i — two vectors in, two shuffles out, the last pair masked (a
    count that is a multiple of 32 masks nothing). A stride-2 pooling row split into its
    phases."""
    sig = types.void(*([types.int64] * 4))

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        s, e, o, n = args
        ptr = _VEC.as_pointer()
        i32 = ir.IntType(32)
        vec32 = ir.VectorType(i32, LANES)
        align = ir.Constant(i32, 4)
        zero = ir.Constant(_VEC, [0.0] * LANES)
        picks = [ir.Constant(vec32, list(range(q, 2 * LANES, 2))) for q in (0, 1)]

        def step(j: ir.Value, rem: ir.Value | None) -> None:
            at = builder.add(s, builder.mul(j, ir.Constant(_I64, 8 * LANES)))
            halves = []
            for h in range(2):
                p = builder.inttoptr(builder.add(at, ir.Constant(_I64, 4 * LANES * h)), ptr)
                if rem is None:
                    halves.append(builder.load(p, align=4))
                else:
                    left = builder.sub(rem, ir.Constant(_I64, LANES * h))
                    halves.append(_masked(builder, "load",
                                          [p, align, _lane_mask(builder, left), zero]))
            out = builder.mul(j, ir.Constant(_I64, 4 * LANES))
            for q, base in enumerate((e, o)):
                value = builder.shuffle_vector(halves[0], halves[1], picks[q])
                p = builder.inttoptr(builder.add(base, out), ptr)
                if rem is None:
                    builder.store(value, p, align=4)
                else:  # (rem + 1) // 2 even values, rem // 2 odd ones
                    count = builder.ashr(builder.add(rem, ir.Constant(_I64, 1 - q)),
                                         ir.Constant(_I64, 1))
                    _masked(builder, "store", [value, p, align, _lane_mask(builder, count)])

        _steps_then_tail(builder, n, 2 * LANES, step)
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def store_stream(typingctx, src, dst, count):  # type: ignore[no-untyped-def]
    """``count`` vectors of 16 floats from src to dst (int64 byte addresses; dst 64-byte
    aligned) with non-temporal stores: written to memory around the caches, with no read
    of the lines first — for outputs too large to stay in the last-level cache."""
    sig = types.void(types.int64, types.int64, types.int64)

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        s, d, n = args
        hint = builder.module.add_metadata([ir.Constant(ir.IntType(32), 1)])

        def body(j: ir.Value) -> None:
            off = builder.mul(j, ir.Constant(_I64, 64))
            v = builder.load(_vec_at(builder, builder.add(s, off)), align=4)
            store = builder.store(v, _vec_at(builder, builder.add(d, off)), align=64)
            store.set_metadata("nontemporal", hint)

        _counted_loop(builder, n, body, "stream")
        return context.get_dummy_value()

    return sig, codegen
