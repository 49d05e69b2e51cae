"""CUDA C source for pointwise programs, compiled at load time by NVRTC (pure Python).

A pointwise program (``pydla.backends.cpu.fused`` defines the format) becomes a sequence of
``float`` statements: every step computes in float32 and rounds to its own storage type,
as the CPU backend does, so a fused layer matches the unfused ops. The same emitter serves
standalone ``Pointwise``/``Cast`` layers, epilogues run after cuDNN, and epilogues fused
into the depthwise and GEMM kernels.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from pydla.dtypes import DType
from pydla.errors import KernelError

C_TYPES = {DType.FLOAT32: "float", DType.FLOAT16: "__half", DType.BFLOAT16: "__nv_bfloat16"}

PRELUDE = r"""
#include <cuda_fp16.h>
#include <cuda_bf16.h>
typedef long long i64;
__device__ __forceinline__ float ld(const float* p) { return *p; }
__device__ __forceinline__ float ld(const __half* p) { return __half2float(*p); }
__device__ __forceinline__ float ld(const __nv_bfloat16* p) { return __bfloat162float(*p); }
__device__ __forceinline__ void st(float* p, float v) { *p = v; }
__device__ __forceinline__ void st(__half* p, float v) { *p = __float2half_rn(v); }
__device__ __forceinline__ void st(__nv_bfloat16* p, float v) { *p = __float2bfloat16_rn(v); }
__device__ __forceinline__ float round_f16(float v) { return __half2float(__float2half_rn(v)); }
__device__ __forceinline__ float round_bf16(float v) {
  return __bfloat162float(__float2bfloat16_rn(v));
}
/* VEC consecutive elements through one load/store of up to 16 bytes (the caller keeps the
   address VEC-aligned). */
template <bool B, typename X, typename Y> struct Cond { typedef X type; };
template <typename X, typename Y> struct Cond<false, X, Y> { typedef Y type; };
template <typename T, int VEC> struct Pack {
  static constexpr int BYTES = sizeof(T) * VEC;
  typedef typename Cond<BYTES == 16, uint4, typename Cond<BYTES == 8, uint2,
      typename Cond<BYTES == 4, unsigned int,
      typename Cond<BYTES == 2, unsigned short, T>::type>::type>::type>::type W;
};
template <typename T, int VEC>
__device__ __forceinline__ void ldv(const T* p, float* out) {
  typedef typename Pack<T, VEC>::W W;
  W w = *reinterpret_cast<const W*>(p);
  const T* e = reinterpret_cast<const T*>(&w);
#pragma unroll
  for (int j = 0; j < VEC; ++j) out[j] = ld(e + j);
}
template <typename T, int VEC>
__device__ __forceinline__ void stv(T* p, const float* v) {
  typedef typename Pack<T, VEC>::W W;
  W w;
  T* e = reinterpret_cast<T*>(&w);
#pragma unroll
  for (int j = 0; j < VEC; ++j) st(e + j, v[j]);
  *reinterpret_cast<W*>(p) = w;
}
"""

_ROUND = {DType.FLOAT32: "{}", DType.FLOAT16: "round_f16({})", DType.BFLOAT16: "round_bf16({})"}


def c_type(dtype: DType, where: str) -> str:
    try:
        return C_TYPES[dtype]
    except KeyError:
        raise KernelError(where, "cuda", f"the CUDA backend computes float32, float16 and "
                          f"bfloat16 tensors, not {dtype.name.lower()}") from None


def f32(value: float) -> str:
    """A float literal C accepts (infinities and NaN included)."""
    v = float(value)
    if math.isnan(v):
        return "__int_as_float(0x7fc00000)"
    if math.isinf(v):
        return "__int_as_float(0x7f800000)" if v > 0 else "__int_as_float(0xff800000)"
    return f"{v!r}f"


def _unary(op: str, a: str, attrs: Mapping[str, Any]) -> str | None:
    alpha = attrs.get("alpha")
    table = {
        "Relu": f"({a} < 0.f ? 0.f : {a})",
        "Abs": f"fabsf({a})", "Neg": f"(-{a})", "Exp": f"expf({a})", "Log": f"logf({a})",
        "Sqrt": f"sqrtf({a})", "Reciprocal": f"(1.f / {a})", "Floor": f"floorf({a})",
        "Ceil": f"ceilf({a})", "Round": f"rintf({a})", "Erf": f"erff({a})",
        "Sin": f"sinf({a})", "Cos": f"cosf({a})", "Tan": f"tanf({a})", "Tanh": f"tanhf({a})",
        "Sigmoid": f"(1.f / (1.f + expf(-{a})))",
        "Softplus": f"({a} > 20.f ? {a} : log1pf(expf({a})))",
        "Softsign": f"({a} / (1.f + fabsf({a})))",
        "Identity": a, "Cast": a,
        "HardSwish": f"({a} * fminf(fmaxf({a} * (1.f / 6.f) + 0.5f, 0.f), 1.f))",
        "Mish": f"({a} * tanhf({a} > 20.f ? {a} : log1pf(expf({a}))))",
    }
    if op in table:
        return table[op]
    if op == "LeakyRelu":
        return f"({a} < 0.f ? {f32(alpha)} * {a} : {a})"
    if op == "Elu":
        return f"({a} < 0.f ? {f32(alpha)} * (expf({a}) - 1.f) : {a})"
    if op == "Selu":
        return (f"({f32(attrs['gamma'])} * ({a} <= 0.f ? {f32(alpha)} * (expf({a}) - 1.f)"
                f" : {a}))")
    if op == "HardSigmoid":
        return f"fminf(fmaxf({f32(alpha)} * {a} + {f32(attrs['beta'])}, 0.f), 1.f)"
    if op == "Swish":
        return f"({a} / (1.f + expf(-{f32(alpha)} * {a})))"
    if op == "ThresholdedRelu":
        return f"({a} > {f32(alpha)} ? {a} : 0.f)"
    if op == "Gelu":
        if attrs.get("approximate", "none") == "tanh":
            return (f"(0.5f * {a} * (1.f + tanhf(0.7978845608028654f * ({a} + 0.044715f * "
                    f"{a} * {a} * {a}))))")
        return f"(0.5f * {a} * (1.f + erff({a} * 0.7071067811865476f)))"
    return None


def _step_expr(op: str, args: Sequence[str], attrs: Mapping[str, Any], where: str) -> str:
    if len(args) == 1:
        expr = _unary(op, args[0], attrs)
        if expr is not None:
            return expr
    if op == "Clip":
        lo = args[1] if len(args) > 1 and args[1] else (
            f32(attrs["min"]) if attrs.get("min") is not None else None)
        hi = args[2] if len(args) > 2 and args[2] else (
            f32(attrs["max"]) if attrs.get("max") is not None else None)
        v = args[0]
        if lo is not None:  # comparisons keep NaN, as numpy's clip does
            v = f"({v} < {lo} ? {lo} : {v})"
        if hi is not None:
            v = f"({v} > {hi} ? {hi} : {v})"
        return v
    if len(args) == 2:
        a, b = args
        binary = {"Add": f"({a} + {b})", "Sub": f"({a} - {b})", "Mul": f"({a} * {b})",
                  "Div": f"({a} / {b})", "Pow": f"powf({a}, {b})",
                  "PRelu": f"({a} < 0.f ? {b} * {a} : {a})"}
        if op in binary:
            return binary[op]
    if op in ("Max", "Min", "Sum", "Mean") and args:
        if op in ("Sum", "Mean"):
            total = "(" + " + ".join(args) + ")"
            return total if op == "Sum" else f"({total} * {f32(1.0 / len(args))})"
        fn = "fmaxf" if op == "Max" else "fminf"
        expr = args[0]
        for b in args[1:]:  # NaN-propagating, as numpy's maximum/minimum
            nan = f"({expr}) != ({expr}) || ({b}) != ({b})"
            expr = f"({nan} ? ({expr}) + ({b}) : {fn}({expr}, {b}))"
        return expr
    raise KernelError(where, op, f"the CUDA backend has no pointwise code for {op} with "
                      f"{len(args)} operand(s)")


def emit_program(program: Sequence[Mapping[str, Any]], operands: Sequence[str], where: str,
                 prefix: str = "r") -> tuple[list[str], str]:
    """Statements evaluating ``program`` over float operand expressions (registers
    0…n-1); returns (statements, name of the result variable)."""
    regs = list(operands)
    lines: list[str] = []
    for i, step in enumerate(program):
        dtype = DType.from_name(step["dtype"])
        if dtype not in _ROUND:
            raise KernelError(where, step["op"], f"step {i} computes {dtype.name.lower()}; the "
                              "CUDA backend's pointwise code is float-only")
        args = [regs[int(r)] for r in step["in"]]
        expr = _step_expr(step["op"], args, step.get("attrs", {}), where)
        name = f"{prefix}{len(regs)}"
        lines.append(f"float {name} = {_ROUND[dtype].format(expr)};")
        regs.append(name)
    return lines, regs[-1]



def defines(values: Mapping[str, Any]) -> str:
    """``#define`` lines specialising a kernel template."""
    return "".join(f"#define {k} {v}\n" for k, v in values.items())


def decompose(var: str, sizes: Sequence[int], prefix: str, indent: str = "  ") -> list[str]:
    """Statements splitting linear index ``var`` over ``sizes`` (slowest first) into
    ``const i64 {prefix}0 …``; sizes of 1 give a constant 0."""
    lines = [f"{indent}i64 {prefix}_rem = {var};"]
    for d in range(len(sizes) - 1, -1, -1):
        if sizes[d] == 1:
            lines.append(f"{indent}const i64 {prefix}{d} = 0;")
        elif d == 0:
            lines.append(f"{indent}const i64 {prefix}{d} = {prefix}_rem;")
        else:
            lines.append(f"{indent}const i64 {prefix}{d} = {prefix}_rem % {sizes[d]}; "
                         f"{prefix}_rem /= {sizes[d]};")
    lines.append(f"{indent}(void){prefix}_rem;")
    return lines


def offset(coords: Sequence[str], strides: Sequence[int]) -> str:
    """``c0 * s0 + c1 * s1 …`` over the non-zero strides (``0`` when none)."""
    terms = [f"({c}) * {s}" for c, s in zip(coords, strides) if s]
    return " + ".join(terms) or "0"
