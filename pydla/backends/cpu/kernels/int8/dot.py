"""The int8 micro-kernels: register-blocked u8×s8 dot products into int32, as LLVM vector IR.

A micro-kernel computes a tile of R rows × C vectors of int32 accumulators,

    acc[r][c·L + lane] = Σ_{o < outer} Σ_{t < taps} dot(bcast(r, o, t), vector(c, lane, o, t))

where each term is a dot product of KG adjacent bytes: a KG-byte group *broadcast* to every
lane (one per row: the same weights for 16 pixels, or the same activations for 16 output
channels) against a vector holding one KG-byte group per lane. The two operands' addresses:

    vector  v + c·VCS + o·v_outer + offsets[t]      (offsets: an int64 table, one per tap)
    bcast   b + r·b_row + (o·taps + t)·BKS

Which operand holds the unsigned activations is fixed per kernel (``vector_u8``): a
convolution broadcasts weights over pixels, a GEMM broadcasts activations over channels.

Two paths:

- avx512_vnni: KG = 4, L = 16; ``vpdpbusd`` (u8×s8, four products summed into each int32
  lane, exact: |4·255·128| < 2³¹).
- avx2: KG = 2, L = 8; the u8 operand is widened to int16 (``vpmovzxbw``), the weights are
  stored widened to int16 when packed, and ``vpmaddwd`` sums pairs of int16 products into
  int32 — exact for every input. ``vpmaddubsw`` (u8×s8 straight to int16 pairs) is not
  used: 255·(-128)·2 = -65280 saturates int16, and the usual 7-bit-weights workaround
  changes results; widening first costs one more instruction per vector, not accuracy.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.core.errors import TypingError
from numba.extending import intrinsic

from pydla.backends.cpu.kernels.conv_fast.simd import counted_loop

_I8 = ir.IntType(8)
_I16 = ir.IntType(16)
_I32 = ir.IntType(32)
_I64 = ir.IntType(64)
_ZERO = ir.Constant(_I64, 0)


@dataclass(frozen=True)
class Path:
    """One ISA path's vector shape and register blocking."""

    name: str
    kg: int          # bytes (k values) per lane and step
    lanes: int       # int32 lanes per vector
    weight_bytes: int  # bytes per stored weight (the AVX2 path widens them to int16)
    rows: int        # R: broadcast rows per tile
    cols: int        # C: vectors per tile

    @property
    def vec_cols(self) -> int:
        """Output columns (pixels or channels) per tile."""
        return self.lanes * self.cols


# R×C accumulators plus C operand vectors, a broadcast and a temporary stay in registers:
# 24 + 4 + 2 of AVX-512's 32; 12 + 3 + 2 of AVX2's 16 (one spilled operand is reloaded as
# vpmaddwd's memory operand).
VNNI = Path("avx512_vnni", kg=4, lanes=16, weight_bytes=1, rows=6, cols=4)
AVX2 = Path("avx2", kg=2, lanes=8, weight_bytes=2, rows=4, cols=3)
PATHS = {p.name: p for p in (VNNI, AVX2)}


def _splat32(builder: ir.IRBuilder, value: ir.Value, lanes: int) -> ir.Value:
    vec = ir.VectorType(_I32, lanes)
    first = builder.insert_element(ir.Constant(vec, ir.Undefined), value, ir.Constant(_I32, 0))
    return builder.shuffle_vector(first, ir.Constant(vec, ir.Undefined),
                                  ir.Constant(ir.VectorType(_I32, lanes), [0] * lanes))


def _at(builder: ir.IRBuilder, addr: ir.Value, ty: ir.Type) -> ir.Value:
    return builder.inttoptr(addr, ty.as_pointer())


class _Ops:
    """The path's loads and multiply-accumulate, for one micro-kernel."""

    def __init__(self, builder: ir.IRBuilder, path: Path, vector_u8: bool) -> None:
        self.b = builder
        self.path = path
        self.vector_u8 = vector_u8
        self.acc_t = ir.VectorType(_I32, path.lanes)

    def zero(self) -> ir.Value:
        return ir.Constant(self.acc_t, [0] * self.path.lanes)

    def vector(self, addr: ir.Value) -> ir.Value:
        b, p = self.b, self.path
        if p is VNNI:
            return b.load(_at(b, addr, self.acc_t), align=1)
        pairs = p.lanes * 2
        if self.vector_u8:
            raw = b.load(_at(b, addr, ir.VectorType(_I8, pairs)), align=1)
            return b.zext(raw, ir.VectorType(_I16, pairs))
        return b.load(_at(b, addr, ir.VectorType(_I16, pairs)), align=1)

    def bcast(self, addr: ir.Value) -> ir.Value:
        b, p = self.b, self.path
        if p is VNNI or self.vector_u8:
            # four activation/weight bytes, or an int16 weight pair: one int32 to spread
            word = b.load(_at(b, addr, _I32), align=1)
        else:
            # two activation bytes widened to an int16 pair
            raw = b.load(_at(b, addr, ir.VectorType(_I8, 2)), align=1)
            word = b.bitcast(b.zext(raw, ir.VectorType(_I16, 2)), _I32)
        spread = _splat32(b, word, p.lanes)
        if p is VNNI:
            return spread
        return b.bitcast(spread, ir.VectorType(_I16, p.lanes * 2))

    def madd(self, acc: ir.Value, vec: ir.Value, spread: ir.Value) -> ir.Value:
        b, p = self.b, self.path
        module = b.module
        if p is VNNI:
            fn = cgutils.get_or_insert_function(module, ir.FunctionType(
                self.acc_t, [self.acc_t] * 3), "llvm.x86.avx512.vpdpbusd.512")
            u8, s8 = (vec, spread) if self.vector_u8 else (spread, vec)
            return b.call(fn, [acc, u8, s8])
        half = ir.VectorType(_I16, p.lanes * 2)
        fn = cgutils.get_or_insert_function(module, ir.FunctionType(self.acc_t, [half, half]),
                                            "llvm.x86.avx2.pmadd.wd")
        return b.add(acc, b.call(fn, [vec, spread]))


@functools.cache
def micro_kernel(path_name: str, rows: int, cols: int, vector_u8: bool) -> Callable[..., None]:
    """The intrinsic ``(outer, taps, v, v_outer, offsets, b, b_row, acc)`` (all int64;
    outer, taps ≥ 1) storing the R×C tile of int32 vectors at ``acc`` (row-major, no gaps)."""
    path = PATHS[path_name]
    vcs = path.lanes * path.kg * (1 if vector_u8 else path.weight_bytes)
    bks = path.kg * (path.weight_bytes if vector_u8 else 1)

    @intrinsic
    def kernel(typingctx, outer, taps, v, v_outer, offsets, b, b_row, acc):  # type: ignore[no-untyped-def]
        sig = types.void(*([types.int64] * 8))

        def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
            n_outer, n_taps, v0, v_step, offs, b0, b_row_step, acc_at = args
            ops = _Ops(builder, path, vector_u8)
            state = [ops.zero() for _ in range(rows * cols)]

            def over_outer(o: ir.Value, accs: list[ir.Value]) -> list[ir.Value]:
                v_base = builder.add(v0, builder.mul(o, v_step))
                b_base = builder.add(b0, builder.mul(builder.mul(o, n_taps),
                                                     ir.Constant(_I64, bks)))

                def over_taps(t: ir.Value, inner: list[ir.Value]) -> list[ir.Value]:
                    off = builder.load(_at(builder, builder.add(
                        offs, builder.mul(t, ir.Constant(_I64, 8))), _I64))
                    vb = builder.add(v_base, off)
                    vecs = [ops.vector(builder.add(vb, ir.Constant(_I64, c * vcs)))
                            for c in range(cols)]
                    bb = builder.add(b_base, builder.mul(t, ir.Constant(_I64, bks)))
                    out = list(inner)
                    for r in range(rows):
                        spread = ops.bcast(builder.add(bb, builder.mul(
                            b_row_step, ir.Constant(_I64, r))))
                        for c in range(cols):
                            out[r * cols + c] = ops.madd(out[r * cols + c], vecs[c], spread)
                    return out

                return counted_loop(builder, _ZERO, n_taps, accs, over_taps)

            final = counted_loop(builder, _ZERO, n_outer, state, over_outer)
            for i, value in enumerate(final):
                builder.store(value, _at(builder, builder.add(
                    acc_at, ir.Constant(_I64, i * path.lanes * 4)), ops.acc_t), align=1)
            return context.get_dummy_value()

        return sig, codegen

    return kernel


def _interleave2(builder: ir.IRBuilder, a: ir.Value, b: ir.Value) -> ir.Value:
    """[a0, b0, a1, b1, …] of two equal vectors."""
    n = a.type.count
    mask = [i // 2 + (n if i % 2 else 0) for i in range(2 * n)]
    return builder.shuffle_vector(a, b, ir.Constant(ir.VectorType(_I32, 2 * n), mask))


@intrinsic
def interleave16(typingctx, kg, dst, rows, row_step, flip):  # type: ignore[no-untyped-def]
    """16 pixels of KG (literal 2 or 4) channel rows — row j at rows + j·row_step — xor
    flip, stored pixel-major at dst: dst[KG·p + j] = row_j[p] ^ flip. The input copy's
    inner loop (conv.py): numba's loop over pixels with KG strided byte stores stayed
    scalar, ≈ 1.2 ns a byte."""
    if not isinstance(kg, types.IntegerLiteral) or kg.literal_value not in (2, 4):
        raise TypingError("interleave16: kg must be the literal 2 or 4")
    count = kg.literal_value
    sig = types.void(kg, types.int64, types.int64, types.int64, types.int64)

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        _, d, src, step, f = args
        v16 = ir.VectorType(_I8, 16)
        spread = builder.trunc(f, _I8)
        fv = builder.shuffle_vector(
            builder.insert_element(ir.Constant(v16, ir.Undefined), spread, ir.Constant(_I32, 0)),
            ir.Constant(v16, ir.Undefined), ir.Constant(ir.VectorType(_I32, 16), [0] * 16))
        rows = []
        for j in range(count):
            addr = builder.add(src, builder.mul(step, ir.Constant(_I64, j)))
            rows.append(builder.xor(builder.load(_at(builder, addr, v16), align=1), fv))
        pair01 = _interleave2(builder, rows[0], rows[1])
        if count == 4:
            pair23 = _interleave2(builder, rows[2], rows[3])
            w16 = ir.VectorType(_I16, 16)
            out = _interleave2(builder, builder.bitcast(pair01, w16), builder.bitcast(pair23, w16))
        else:
            out = pair01
        builder.store(out, _at(builder, d, out.type), align=1)
        return context.get_dummy_value()

    return sig, codegen
