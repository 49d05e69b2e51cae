"""The requantizing epilogue as vector IR: 16 int32 accumulators → 16 outputs.

numba's own loop over a span of outputs vectorized, but with alias checks and scalar
remainders it cost ≈ 1.5 ns an output (1.2 ms of a 1×1 64→256 layer's 1.8 ms). This
intrinsic does a whole vector per call, with masked loads and stores for a partial one
(a convolution's tiles break at the ends of output rows).

``requant(out_kind, res_kind, acc, corr, scale, cstep, dst, count, zp, lo, hi, res, r_zp,
r_scale, dq)``: out_kind/res_kind are literals (OUT_KINDS / RES_KINDS indices), the rest int64
addresses or float32. The "dequantized" kind quantizes as uint8/int8 do (lo/hi the
quantized clamp) and stores float32 ``(q - zp) · dq``: a QuantizeLinear→DequantizeLinear pair
after the layer, without a second pass over its output. acc: 16 int32; corr/scale: one
int32/float32 spread over the lanes (cstep 0, a convolution's output channel) or 16 of
them (cstep 1, a GEMM's columns); dst and res: ``count`` ≤ 16 elements. The arithmetic
is epilogue.py's, lane by lane.
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.core.errors import TypingError
from numba.extending import intrinsic

OUT_KINDS = ("uint8", "int8", "float32", "int32", "dequantized")
RES_KINDS = ("none", "uint8", "int8", "float32")
LANES = 16

_I1, _I8, _I32, _I64 = ir.IntType(1), ir.IntType(8), ir.IntType(32), ir.IntType(64)
_F32 = ir.FloatType()


def _vec(t: ir.Type) -> ir.VectorType:
    return ir.VectorType(t, LANES)


def _splat(builder: ir.IRBuilder, value: ir.Value) -> ir.Value:
    vt = _vec(value.type)
    first = builder.insert_element(ir.Constant(vt, ir.Undefined), value, ir.Constant(_I32, 0))
    return builder.shuffle_vector(first, ir.Constant(vt, ir.Undefined),
                                  ir.Constant(_vec(_I32), [0] * LANES))


def _elem(kind: str) -> ir.Type:
    return {"uint8": _I8, "int8": _I8, "float32": _F32, "int32": _I32}[kind]


def _suffix(t: ir.Type) -> str:
    return {8: "i8", 32: "i32"}[t.width] if isinstance(t, ir.IntType) else "f32"


def _masked_load(builder: ir.IRBuilder, addr: ir.Value, elem: ir.Type, mask: ir.Value) -> ir.Value:
    vt = _vec(elem)
    fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(
        vt, [vt.as_pointer(), _I32, _vec(_I1), vt]), f"llvm.masked.load.v16{_suffix(elem)}.p0")
    return builder.call(fn, [builder.inttoptr(addr, vt.as_pointer()), ir.Constant(_I32, 1),
                             mask, ir.Constant(vt, None)])


def _masked_store(builder: ir.IRBuilder, value: ir.Value, addr: ir.Value,
                  mask: ir.Value) -> None:
    vt = value.type
    fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(
        ir.VoidType(), [vt, vt.as_pointer(), _I32, _vec(_I1)]),
        f"llvm.masked.store.v16{_suffix(vt.element)}.p0")
    builder.call(fn, [value, builder.inttoptr(addr, vt.as_pointer()), ir.Constant(_I32, 1),
                      mask])


def _per_lane(builder: ir.IRBuilder, addr: ir.Value, cstep: ir.Value, elem: ir.Type) -> ir.Value:
    """16 values at addr (cstep 1), or the one at addr spread (cstep 0)."""
    one = builder.load(builder.inttoptr(addr, elem.as_pointer()))
    many = builder.load(builder.inttoptr(addr, _vec(elem).as_pointer()), align=1)
    return builder.select(builder.icmp_signed("!=", cstep, ir.Constant(_I64, 0)), many,
                          _splat(builder, one))


def _codegen(out_kind: str, res_kind: str):  # type: ignore[no-untyped-def]
    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        (_, _, acc, corr, scale, cstep, dst, count, zp, lo, hi, res, r_zp, r_scale, dq) = args
        lane_ids = ir.Constant(_vec(_I64), list(range(LANES)))
        mask = builder.icmp_signed("<", lane_ids, _splat(builder, count))
        full = builder.icmp_signed(">=", count, ir.Constant(_I64, LANES))
        v = builder.load(builder.inttoptr(acc, _vec(_I32).as_pointer()), align=1)
        v = builder.add(v, _per_lane(builder, corr, cstep, _I32))
        if out_kind == "int32":
            out = v
        else:
            f = builder.fmul(builder.sitofp(v, _vec(_F32)), _per_lane(builder, scale, cstep, _F32))
            if res_kind != "none":
                rv = _masked_load(builder, res, _elem(res_kind), mask)
                if res_kind == "uint8":
                    rf = builder.uitofp(rv, _vec(_F32))
                elif res_kind == "int8":
                    rf = builder.sitofp(rv, _vec(_F32))
                else:
                    rf = rv
                f = builder.fadd(f, builder.fmul(builder.fsub(rf, _splat(builder, r_zp)),
                                                 _splat(builder, r_scale)))
            if out_kind != "float32":
                rint = cgutils.get_or_insert_function(builder.module, ir.FunctionType(
                    _vec(_F32), [_vec(_F32)]), "llvm.rint.v16f32")
                f = builder.fadd(builder.call(rint, [f]), _splat(builder, zp))
            lo_v, hi_v = _splat(builder, lo), _splat(builder, hi)
            # max(f, lo) then min(·, hi), as numpy's clip: a NaN (float output) stays NaN
            f = builder.select(builder.fcmp_ordered("<", f, lo_v), lo_v, f)
            f = builder.select(builder.fcmp_ordered(">", f, hi_v), hi_v, f)
            if out_kind == "float32":
                out = f
            elif out_kind == "dequantized":  # as numpy: float32(q) - float32(zp), times dq
                out = builder.fmul(builder.fsub(f, _splat(builder, zp)), _splat(builder, dq))
            elif out_kind == "uint8":
                out = builder.trunc(builder.fptosi(f, _vec(_I32)), _vec(_I8))
            else:
                out = builder.trunc(builder.fptosi(f, _vec(_I32)), _vec(_I8))
        with builder.if_else(full) as (whole, part):
            with whole:
                builder.store(out, builder.inttoptr(dst, out.type.as_pointer()), align=1)
            with part:
                _masked_store(builder, out, dst, mask)
        return context.get_dummy_value()

    return codegen


@intrinsic
def requant(typingctx, out_kind, res_kind, acc, corr, scale, cstep, dst, count, zp, lo, hi,  # type: ignore[no-untyped-def]
            res, r_zp, r_scale, dq):
    if not isinstance(out_kind, types.IntegerLiteral) or \
            not isinstance(res_kind, types.IntegerLiteral):
        raise TypingError("requant: out_kind and res_kind must be literals")
    sig = types.void(out_kind, res_kind, *([types.int64] * 6), types.float32, types.float32,
                     types.float32, types.int64, types.float32, types.float32, types.float32)
    return sig, _codegen(OUT_KINDS[out_kind.literal_value], RES_KINDS[res_kind.literal_value])
