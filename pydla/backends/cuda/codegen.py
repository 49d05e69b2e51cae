"""CUDA C source for pointwise programs, compiled at load time by NVRTC (pure Python).

A pointwise program (``pydla.backends.cpu.fused`` defines the format) becomes a sequence of
typed statements. A float step computes in float32 and rounds to its own storage type, as
the CPU backend does, so a fused layer matches the unfused ops; an integer step computes in
its own C type (wrapping, exact for int64), a bool step in ``bool``
(``pydla.backends.cuda.typed_steps``). The same emitter serves standalone
``Pointwise``/``Cast`` layers, epilogues run after cuDNN, and epilogues fused into the
depthwise and GEMM kernels.

Two type maps: ``c_type`` (float32/float16/bfloat16 only) is what the compute kernels
(convolution, pooling, reductions…) read and write; ``storage_type`` adds every integer
type and bool (one byte, ``b8``) for the kernels that move or select elements or compute
them exactly (pointwise programs, Gather, Pad, reshapes, ArgMax).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from pydla.backends.cuda.typed_steps import HELPERS, ROUND, typed_step
from pydla.dtypes import DType
from pydla.errors import KernelError

C_TYPES = {DType.FLOAT32: "float", DType.FLOAT16: "__half", DType.BFLOAT16: "__nv_bfloat16"}
INT_TYPES = {DType.INT8: "signed char", DType.UINT8: "unsigned char", DType.INT16: "short",
             DType.UINT16: "unsigned short", DType.INT32: "int", DType.UINT32: "unsigned int",
             DType.INT64: "long long", DType.UINT64: "unsigned long long"}
# bool is stored as one byte and read as "not zero" (never as a C++ bool: a byte other
# than 0/1 — the arena's timing noise — would be undefined behaviour)
STORAGE_TYPES = {**C_TYPES, **INT_TYPES, DType.BOOL: "b8"}

PRELUDE = r"""
#include <cuda_fp16.h>
#include <cuda_bf16.h>
typedef long long i64;
__device__ __forceinline__ float ld(const float* p) { return *p; }
/* A float16 NaN widens as numpy (and the CPU backend) widens it: sign and payload kept
   (__half2float gives 0x7fffffff for every NaN, which then narrows to another bfloat16) */
__device__ __forceinline__ float ld(const __half* p) {
  unsigned short h = __half_as_ushort(*p);
  return ((h & 0x7c00u) == 0x7c00u && (h & 0x3ffu))
      ? __uint_as_float(((unsigned)(h & 0x8000u) << 16) | 0x7f800000u | ((h & 0x3ffu) << 13))
      : __half2float(*p);
}
__device__ __forceinline__ float ld(const __nv_bfloat16* p) { return __bfloat162float(*p); }
__device__ __forceinline__ void st(float* p, float v) { *p = v; }
__device__ __forceinline__ void st(__half* p, float v) { *p = __float2half_rn(v); }
/* NaN to bfloat16 as the CPU backend (dtypes.f32_to_bf16): sign and top payload bits kept,
   quiet bit set (__float2bfloat16_rn gives 0x7fff for every NaN) */
__device__ __forceinline__ __nv_bfloat16 to_bf16(float v) {
  return v != v ? __ushort_as_bfloat16((unsigned short)((__float_as_uint(v) >> 16) | 0x40))
                : __float2bfloat16_rn(v);
}
__device__ __forceinline__ void st(__nv_bfloat16* p, float v) { *p = to_bf16(v); }
struct b8 { unsigned char v; };
__device__ __forceinline__ bool ld(const b8* p) { return p->v != 0; }
__device__ __forceinline__ void st(b8* p, bool v) { p->v = v ? 1 : 0; }
#define PYDLA_INT_LDST(T) \
  __device__ __forceinline__ T ld(const T* p) { return *p; } \
  __device__ __forceinline__ void st(T* p, T v) { *p = v; }
PYDLA_INT_LDST(signed char) PYDLA_INT_LDST(unsigned char) PYDLA_INT_LDST(short)
PYDLA_INT_LDST(unsigned short) PYDLA_INT_LDST(int) PYDLA_INT_LDST(unsigned int)
PYDLA_INT_LDST(long long) PYDLA_INT_LDST(unsigned long long)
/* float -> integer as the CPU backend's numpy cast does on x86-64 (cvttss2si): truncation
   toward zero; NaN and out-of-range values give the "integer indefinite" (the minimum);
   narrower types take the low bits of the int32 result; unsigned types above the signed
   range go through value - 2^(bits-1). */
__device__ __forceinline__ int f2i32(float f) {
  return (f != f || f >= 2147483648.f || f < -2147483648.f) ? (int)0x80000000u
                                                              : __float2int_rz(f);
}
__device__ __forceinline__ long long f2i64(float f) {
  return (f != f || f >= 9223372036854775808.f || f < -9223372036854775808.f)
      ? (long long)0x8000000000000000ull : __float2ll_rz(f);
}
__device__ __forceinline__ unsigned int f2u32(float f) {
  return f >= 2147483648.f ? (unsigned int)f2i32(f - 2147483648.f) ^ 0x80000000u
                           : (unsigned int)f2i32(f);
}
__device__ __forceinline__ unsigned long long f2u64(float f) {
  return f >= 9223372036854775808.f
      ? (unsigned long long)f2i64(f - 9223372036854775808.f) ^ 0x8000000000000000ull
      : (unsigned long long)f2i64(f);
}
__device__ __forceinline__ float round_f16(float v) { return __half2float(__float2half_rn(v)); }
__device__ __forceinline__ float round_bf16(float v) {
  return v != v ? v : __bfloat162float(__float2bfloat16_rn(v));
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
template <typename T, int VEC, typename C>
__device__ __forceinline__ void ldv(const T* p, C* out) {
  typedef typename Pack<T, VEC>::W W;
  W w = *reinterpret_cast<const W*>(p);
  const T* e = reinterpret_cast<const T*>(&w);
#pragma unroll
  for (int j = 0; j < VEC; ++j) out[j] = ld(e + j);
}
template <typename T, int VEC, typename C>
__device__ __forceinline__ void stv(T* p, const C* v) {
  typedef typename Pack<T, VEC>::W W;
  W w;
  T* e = reinterpret_cast<T*>(&w);
#pragma unroll
  for (int j = 0; j < VEC; ++j) st(e + j, v[j]);
  *reinterpret_cast<W*>(p) = w;
}
""" + HELPERS


def c_type(dtype: DType, where: str) -> str:
    try:
        return C_TYPES[dtype]
    except KeyError:
        raise KernelError(where, "cuda", f"the CUDA backend computes float32, float16 and "
                          f"bfloat16 tensors, not {dtype.name.lower()}") from None


def storage_type(dtype: DType, where: str) -> str:
    """The C type a tensor of ``dtype`` is read and written as (``ld``/``st``)."""
    try:
        return STORAGE_TYPES[dtype]
    except KeyError:
        raise KernelError(where, "cuda", f"the CUDA backend stores no {dtype.name.lower()} "
                          "tensors") from None


def compute_type(dtype: DType) -> str:
    """The C type ``ld`` returns for ``dtype`` (what a program register holds)."""
    if dtype in C_TYPES:
        return "float"
    return "bool" if dtype is DType.BOOL else INT_TYPES[dtype]


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
        "Acos": f"acosf({a})", "Acosh": f"acoshf({a})", "Asin": f"asinf({a})",
        "Asinh": f"asinhf({a})", "Atan": f"atanf({a})", "Atanh": f"atanhf({a})",
        "Cosh": f"coshf({a})", "Sinh": f"sinhf({a})",
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
    if op == "Celu":
        return f"({a} > 0.f ? {a} : {f32(alpha)} * expm1f({a} / {f32(alpha)}))"
    if op == "Shrink":
        lambd, bias = f32(attrs["lambd"]), f32(attrs["bias"])
        return f"({a} < -{lambd} ? {a} + {bias} : ({a} > {lambd} ? {a} - {bias} : 0.f))"
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
                 prefix: str = "r", dtypes: Sequence[DType] | None = None
                 ) -> tuple[list[str], str]:
    """Statements evaluating ``program`` over operand expressions (registers 0…n-1, of
    ``dtypes``' compute types: float for every float type, by default); returns
    (statements, name of the result variable)."""
    regs = list(operands)
    types = list(dtypes) if dtypes is not None else [DType.FLOAT32] * len(regs)
    lines: list[str] = []
    for i, step in enumerate(program):
        dtype = DType.from_name(step["dtype"])
        if dtype not in STORAGE_TYPES:
            raise KernelError(where, step["op"], f"step {i} computes {dtype.name.lower()}, "
                              "a type the CUDA backend does not store")
        ins = [int(r) for r in step["in"]]
        args, arg_types = [regs[r] for r in ins], [types[r] for r in ins]
        attrs = step.get("attrs", {})
        expr = typed_step(step["op"], args, arg_types, dtype, attrs, where)
        if expr is None:
            if dtype not in ROUND or any(t not in ROUND for t in arg_types):
                raise KernelError(where, step["op"], f"step {i} ({step['op']}) has no CUDA "
                                  f"code for {[t.name.lower() for t in arg_types]} → "
                                  f"{dtype.name.lower()}")
            expr = ROUND[dtype].format(_step_expr(step["op"], args, attrs, where))
        name = f"{prefix}{len(regs)}"
        lines.append(f"{compute_type(dtype)} {name} = {expr};")
        regs.append(name)
        types.append(dtype)
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
