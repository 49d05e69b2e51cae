"""Pointwise steps over integer and bool registers, casts, and the steps that mix types
(comparisons, Where, IsNaN/IsInf), as C expressions for ``codegen.emit_program``.

Semantics are the CPU backend's (numpy on x86-64): integer arithmetic wraps (computed in
``unsigned long long`` and truncated, so no signed overflow is undefined), division
truncates toward zero and gives 0 for a zero divisor, ``Mod`` follows numpy's remainder
(fmod=0) and fmod (fmod=1), float→integer casts truncate with the x86 rules of
``codegen.PRELUDE`` (``f2i32``…), int64 never goes through float. A float register holds a
value already rounded to its own storage type; bool registers are C++ ``bool``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from pydla.dtypes import DType
from pydla.errors import KernelError

_FLOATS = (DType.FLOAT32, DType.FLOAT16, DType.BFLOAT16)
ROUND = {DType.FLOAT32: "{}", DType.FLOAT16: "round_f16({})", DType.BFLOAT16: "round_bf16({})"}
_UNSIGNED = (DType.UINT8, DType.UINT16, DType.UINT32, DType.UINT64)
_C = {DType.INT8: "signed char", DType.UINT8: "unsigned char", DType.INT16: "short",
      DType.UINT16: "unsigned short", DType.INT32: "int", DType.UINT32: "unsigned int",
      DType.INT64: "long long", DType.UINT64: "unsigned long long", DType.BOOL: "bool"}
_F2I = {DType.INT32: "f2i32", DType.INT64: "f2i64", DType.UINT32: "f2u32",
        DType.UINT64: "f2u64"}
_COMPARE = {"Equal": "==", "Less": "<", "Greater": ">", "LessOrEqual": "<=",
            "GreaterOrEqual": ">="}
_LOGIC = {"And": "&&", "Or": "||", "Xor": "!="}
_WRAP = {"Add": "+", "Sub": "-", "Mul": "*", "BitwiseAnd": "&", "BitwiseOr": "|",
         "BitwiseXor": "^"}
_BITS = {DType.UINT8: 8, DType.UINT16: 16, DType.UINT32: 32, DType.UINT64: 64}

# device helpers the expressions below call (appended to codegen.PRELUDE)
HELPERS = r"""
template <typename T> __device__ __forceinline__ T idiv(T a, T b) {
  if (b == 0) return (T)0;
  if ((T)-1 < (T)0 && b == (T)-1) return (T)(0ull - (unsigned long long)a);
  return (T)(a / b);
}
template <typename T> __device__ __forceinline__ T imod(T a, T b, bool c_fmod) {
  if (b == 0 || ((T)-1 < (T)0 && b == (T)-1)) return (T)0;
  T r = (T)(a % b);
  if (!c_fmod && r != 0 && ((r < (T)0) != (b < (T)0))) r = (T)(r + b);
  return r;
}
__device__ __forceinline__ float fremainder(float a, float b) {
  float r = fmodf(a, b);
  if (b == 0.f) return r;
  if (r != 0.f) { if ((b < 0.f) != (r < 0.f)) r += b; } else r = copysignf(0.f, b);
  return r;
}
"""


def convert(expr: str, src: DType, dst: DType) -> str:
    """``expr`` (a register of ``src``) as a register of ``dst``, with numpy's cast."""
    if src is dst:
        return expr
    if dst in _FLOATS:
        return ROUND[dst].format(expr if src in _FLOATS else f"(float)({expr})")
    if dst is DType.BOOL:
        return f"({expr} != 0)"
    if src in _FLOATS:
        if dst in _F2I:
            return f"{_F2I[dst]}({expr})"
        return f"({_C[dst]})f2i32({expr})"  # the low bits of the int32 conversion
    return f"({_C[dst]})({expr})"


def _literal(value: Any, dtype: DType) -> str | None:
    """An integer Clip bound (None for an infinite one: no bound)."""
    v = float(value)
    return None if math.isinf(v) else f"(({_C[dtype]})({int(v)}ll))"


def _integer(op: str, args: Sequence[str], out: DType, attrs: Mapping[str, Any]) -> str | None:
    t = _C[out]
    u = "(unsigned long long)"
    if op in _WRAP and len(args) == 2:
        return f"(({t})({u}({args[0]}) {_WRAP[op]} {u}({args[1]})))"
    if op == "Sum" and args:
        return f"(({t})(" + " + ".join(f"{u}({a})" for a in args) + "))"
    if len(args) == 1:
        a = args[0]
        neg = f"(({t})(0ull - {u}({a})))"
        unary = {"Neg": neg, "Identity": a,
                 "Abs": a if out in _UNSIGNED else f"({a} < 0 ? {neg} : {a})",
                 "Relu": a if out in _UNSIGNED else f"({a} < 0 ? ({t})0 : {a})",
                 "Sign": f"(({t})(({a} > 0) - ({a} < 0)))", "BitwiseNot": f"(({t})(~{a}))"}
        if op in unary:
            return unary[op]
    if op == "Div" and len(args) == 2:
        return f"idiv<{t}>({args[0]}, {args[1]})"
    if op == "Mod" and len(args) == 2:
        return f"imod<{t}>({args[0]}, {args[1]}, {'true' if attrs.get('fmod') else 'false'})"
    if op in ("Max", "Min") and args:
        cmp = ">" if op == "Max" else "<"
        expr = args[0]
        for b in args[1:]:
            expr = f"({expr} {cmp} {b} ? {expr} : {b})"
        return expr
    if op == "Clip" and args:
        v = args[0]
        for k, key, cmp in ((1, "min", "<"), (2, "max", ">")):
            bound = args[k] if len(args) > k and args[k] else (
                _literal(attrs[key], out) if attrs.get(key) is not None else None)
            if bound is not None:
                v = f"({v} {cmp} {bound} ? {bound} : {v})"
        return v
    if op == "BitShift" and len(args) == 2 and out in _BITS:
        a, b = args
        shift = "<<" if attrs.get("direction") == "LEFT" else ">>"
        return f"({b} >= {_BITS[out]} ? ({t})0 : ({t})({a} {shift} {b}))"
    return None


def typed_step(op: str, args: Sequence[str], types: Sequence[DType], out: DType,
               attrs: Mapping[str, Any], where: str) -> str | None:
    """The expression of one step, or None where it is a float step of float operands
    that ``codegen._step_expr`` computes."""
    if op in ("Cast", "Identity") and len(args) == 1:
        return convert(args[0], types[0], out)
    if op in _COMPARE and len(args) == 2:
        return f"({args[0]} {_COMPARE[op]} {args[1]})"
    if op == "Not" and len(args) == 1:
        return f"(!{args[0]})"
    if op in _LOGIC and len(args) == 2:
        return f"({args[0]} {_LOGIC[op]} {args[1]})"
    if op == "IsNaN" and len(args) == 1:
        return f"({args[0]} != {args[0]})"
    if op == "IsInf" and len(args) == 1:
        tests = [f"{args[0]} == {s}__int_as_float(0x7f800000)" for s, key in (
            ("", "detect_positive"), ("-", "detect_negative")) if attrs.get(key, 1)]
        return "(" + (" || ".join(tests) or "false") + ")"
    if op == "Where" and len(args) == 3:
        x, y = convert(args[1], types[1], out), convert(args[2], types[2], out)
        return f"({args[0]} ? {x} : {y})"
    if out in _FLOATS:
        if any(t not in _FLOATS for t in types):
            raise KernelError(where, op, f"{op} of {[t.name.lower() for t in types]} → "
                              f"{out.name.lower()}: no CUDA code for these types")
        if op == "Mod" and len(args) == 2:
            fn = "fmodf" if attrs.get("fmod") else "fremainder"
            return ROUND[out].format(f"{fn}({args[0]}, {args[1]})")
        if op == "Sign" and len(args) == 1:
            a = args[0]
            return f"({a} > 0.f ? 1.f : ({a} < 0.f ? -1.f : {a}))"
        return None
    if out not in _C or any(t is not out for t in types):
        raise KernelError(where, op, f"{op} of {[t.name.lower() for t in types]} → "
                          f"{out.name.lower()}: no CUDA code for these types")
    expr = _integer(op, args, out, attrs) if out is not DType.BOOL else None
    if expr is None:
        raise KernelError(where, op, f"the CUDA backend has no {out.name.lower()} code for "
                          f"{op}")
    return expr


# the ops typed_step computes over integer registers (coverage.py reads it)
INTEGER_OPS = frozenset({*_WRAP, "Sum", "Neg", "Identity", "Abs", "Relu", "Sign", "BitwiseNot",
                         "Div", "Mod", "Max", "Min", "Clip", "BitShift", "Cast"})
# the ops that read or write bool or mix types
MIXED_OPS = frozenset({*_COMPARE, *_LOGIC, "Not", "IsNaN", "IsInf", "Where", "Cast",
                       "Identity"})
