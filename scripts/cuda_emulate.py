"""Run the CUDA backend's generated (NVRTC) kernels on the host, without a GPU, against the
CPU backend: a check of new kernels before GPU time is spent on them.

    python scripts/cuda_emulate.py [CASE-SUBSTRING …]

Each kernel's CUDA C (``codegen.PRELUDE`` + its source) is compiled by g++ with a shim that
makes the CUDA keywords plain C++ (half types through ``_Float16`` and bit arithmetic,
atomics as plain read-modify-writes) and called as one thread, which its grid-stride loop
turns into a walk over every element. Tensors live in numpy buffers laid out as the backend
lays them (rank-4 activations channels-last), weights are "uploaded" as host copies. Only
kernels whose threads never cooperate can run so (pointwise programs, casts, copies,
Gather/Scatter families, Pad, ArgMax, Tile, TopK, the recurrent layers' steps…): a layer
runs its first candidate made only of such kernels (the recurrent layers' plain projection
fallback), and a case with a layer that has none (shared memory, barriers or warp shuffles:
MatMul, reductions, pools, normalization; or cuDNN) is skipped. The cases are
``tests/gpu/typed_cases.py``'s, ``tests/gpu/coverage_cases.py``'s and ``tests/gpu/int8_cases.py``'s;
integer outputs must
match exactly, float ones within the case's bound. Needs g++ (C++17, ``_Float16``: GCC 12
on x86-64).
"""

from __future__ import annotations

import ctypes
import hashlib
import subprocess
import sys
import tempfile
import types
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

# the binders import CuPy and the driver bindings at module level; neither is called here
sys.modules.setdefault("cupy", mock.MagicMock())
_driver = types.ModuleType("pydla.backends.cuda.driver")
_driver.memcpy_async = lambda dst, src, n, stream: ctypes.memmove(dst, src, n)  # type: ignore[attr-defined]
_driver.arch_name = lambda ordinal=0: "host"  # type: ignore[attr-defined]  (plan cache key)
sys.modules["pydla.backends.cuda.driver"] = _driver

from pydla.backends.cuda import kernels as _kernels  # noqa: E402, F401  (registers them)
from pydla.backends.cuda.codegen import PRELUDE  # noqa: E402
from pydla.backends.cuda.context import BindContext  # noqa: E402
from pydla.backends.cuda.layout import LINEAR, NHWC, Placement  # noqa: E402
from pydla.backends.cuda.registry import KERNELS, Candidate, Launch  # noqa: E402
from pydla.builder import BuildOptions, build  # noqa: E402
from pydla.dtypes import DType  # noqa: E402
from pydla.engine.module import LoadedModule  # noqa: E402
from tests.gpu import coverage_cases, int8_cases, typed_cases  # noqa: E402

SHIM = r"""
#include <cstring>
#include <cmath>
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __restrict__ __restrict
struct EmuDim { unsigned x; };
static EmuDim blockIdx = {0}, threadIdx = {0}, blockDim = {1}, gridDim = {1};
inline int __float2int_rz(float f) { return (int)f; }
inline long long __float2ll_rz(float f) { return (long long)f; }
inline unsigned __float_as_uint(float f) { unsigned u; std::memcpy(&u, &f, 4); return u; }
inline float __int_as_float(int i) { float f; std::memcpy(&f, &i, 4); return f; }
template <class T> T atomicCAS(T* a, T cmp, T v) { T old = *a; if (old == cmp) *a = v; return old; }
inline double atomicAdd(double* a, double v) { double old = *a; *a = old + v; return old; }
struct __half { unsigned short x; };
struct __nv_bfloat16 { unsigned short x; };
struct uint2 { unsigned x, y; };
struct uint4 { unsigned x, y, z, w; };
inline unsigned short __half_as_ushort(__half h) { return h.x; }
inline float __uint_as_float(unsigned u) { float f; std::memcpy(&f, &u, 4); return f; }
inline float __half2float(__half h) {  /* CUDA's: every NaN widens to 0x7fffffff */
  if ((h.x & 0x7c00) == 0x7c00 && (h.x & 0x3ff)) return __uint_as_float(0x7fffffffu);
  _Float16 v; std::memcpy(&v, &h.x, 2); return (float)v; }
inline __half __float2half_rn(float f) {
  _Float16 v = (_Float16)f; __half h; std::memcpy(&h.x, &v, 2); return h; }
inline float __bfloat162float(__nv_bfloat16 b) {
  unsigned u = (unsigned)b.x << 16; float f; std::memcpy(&f, &u, 4); return f; }
inline __nv_bfloat16 __float2bfloat16_rn(float f) {  /* CUDA's: every NaN is 0x7fff */
  unsigned u = __float_as_uint(f); __nv_bfloat16 b;
  if (f != f) { b.x = 0x7fff; return b; }
  b.x = (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16); return b; }
inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short s) { __nv_bfloat16 b; b.x = s; return b; }
inline int __dp4a(int a, int b, int c) {  /* four signed byte products added to c */
  for (int i = 0; i < 4; ++i) c += (int)(signed char)(a >> 8 * i) * (int)(signed char)(b >> 8 * i);
  return c; }
inline float __fmul_rn(float a, float b) { return a * b; }  /* g++ contracts nothing here */
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
"""
_PRELUDE = SHIM + PRELUDE.replace("#include <cuda_fp16.h>", "").replace(
    "#include <cuda_bf16.h>", "")
_COOPERATIVE = ("__syncthreads", "__shared__", "__shfl", "__launch_bounds__")


class Cooperative(Exception):
    """A kernel whose threads cooperate: one host thread cannot run it."""


class HostContext(BindContext):
    """The bind context over numpy buffers; kernels compile with g++ into ``workdir``."""

    def __init__(self, program: Any, placements: dict[int, Placement], workdir: Path) -> None:
        super().__init__(program, placements, None)
        self.workdir = workdir
        self.buffers: list[np.ndarray] = []
        self.slots: list[tuple[np.ndarray, str, str]] = []

    def upload(self, array: np.ndarray) -> int:
        copy = np.ascontiguousarray(array).copy()
        self.buffers.append(copy)
        return int(copy.ctypes.data)

    def scratch(self, nbytes: int) -> int:
        return self.upload(np.zeros(max(nbytes, 1), np.uint8))

    def index_check(self, layer: str, op: str, what: str, size: int,
                    valid: str | None = None) -> int:
        slot = np.zeros(2, np.int64)
        self.buffers.append(slot)
        self.slots.append((slot, layer, what))
        return int(slot.ctypes.data)

    def kernel_launch(self, source: str, name: str, threads: int, args: Any,
                      block: int = 256, lazy: bool = False) -> Launch:
        if any(word in source for word in _COOPERATIVE):
            def refuse(stream: Any) -> None:
                raise Cooperative(name)

            return refuse  # a later candidate of the layer may run (a recurrent fallback)
        fn = self._compile(source, name)
        values = [ctypes.c_uint64(int(a)) for a in args]
        return lambda stream: fn(*values)

    def _compile(self, source: str, name: str) -> Any:
        key = hashlib.sha1(f"{source}\0{name}".encode()).hexdigest()[:16]
        lib = self.workdir / f"k_{key}.so"
        if not lib.exists():
            cpp = lib.with_suffix(".cpp")
            cpp.write_text(_PRELUDE + source)
            done = subprocess.run(["g++", "-std=c++17", "-O1", "-shared", "-fPIC", "-w", "-o",
                                   str(lib), str(cpp)], capture_output=True, text=True)
            if done.returncode:
                raise RuntimeError(f"g++ refused {name}:\n{done.stderr[:2000]}")
        return getattr(ctypes.CDLL(str(lib)), name)

    @property
    def cudnn(self) -> Any:
        return None  # no cuDNN here: its candidates are not built


def _memory(x: np.ndarray, p: Placement) -> np.ndarray:
    x = x.view(np.uint16) if p.dtype is DType.BFLOAT16 else x.astype(p.dtype.np)
    return np.ascontiguousarray(x.transpose(0, 2, 3, 1) if p.layout == NHWC else x)


def _logical(buf: np.ndarray, p: Placement) -> np.ndarray:
    storage = np.uint16 if p.dtype is DType.BFLOAT16 else p.dtype.np
    if p.layout == NHWC:
        n, c, h, w = p.shape
        return np.frombuffer(buf, storage, p.size).reshape(n, h, w, c).transpose(0, 3, 1, 2)
    return np.frombuffer(buf, storage, p.size).reshape(p.shape)


def emulate(model: Any, feeds: dict[str, np.ndarray], precision: DType | None,
            workdir: Path) -> tuple[list[np.ndarray], list[np.ndarray], list[str]]:
    """(emulated outputs, the CPU backend's, index errors flagged) of one cuda build."""
    data = build(model, BuildOptions(autotune=False, autocast=precision, target="cuda"))
    cpu = LoadedModule(data)
    inputs = [feeds[i.name] for i in model.graph.input]
    want = cpu.run(inputs)
    program = cpu.program
    buffers: dict[int, np.ndarray] = {}
    placements: dict[int, Placement] = {}
    for t in program.tensors:
        if t.kind == "weight":
            continue
        # rank 4: what the layers see (the backend copies network inputs and outputs into
        # channels-last shadows)
        layout = NHWC if len(t.shape) == 4 else LINEAR
        buffers[t.index] = np.zeros(max(t.nbytes, 1), np.uint8)
        placements[t.index] = Placement(int(buffers[t.index].ctypes.data), t.shape, t.dtype,
                                        layout)
    for io, x in zip(program.inputs, inputs):
        p = placements[io.tensor]
        m = _memory(np.asarray(x), p)
        ctypes.memmove(p.ptr, m.ctypes.data, m.nbytes)
    ctx = HostContext(program, placements, workdir)
    for layer in program.layers:
        _run_first(KERNELS[layer.op](ctx, layer))
    got = [_logical(buffers[io.tensor], placements[io.tensor]) for io in program.outputs]
    flagged = [f"{layer} {what}: index {int(slot[1])}" for slot, layer, what in ctx.slots
               if slot[0]]
    return got, [np.asarray(w) for w in want], flagged


_STREAM = types.SimpleNamespace(ptr=0)  # what a launch reads of its stream (memcpy's handle)


def _run_first(candidates: list[Candidate]) -> None:
    """Run the first candidate whose kernels one host thread can run (a candidate's
    launches rewrite everything they read, so a retry after a refused one is exact)."""
    for candidate in candidates[:-1]:
        try:
            candidate.launch(_STREAM)
            return
        except Cooperative:
            continue
    candidates[-1].launch(_STREAM)


def _same(got: np.ndarray, want: np.ndarray, bound: float | None) -> bool:
    if want.dtype.name == "bfloat16":
        want = want.view(np.uint16)
    got = got.reshape(want.shape).view(want.dtype)
    if bound is not None:
        g, w = got.astype(np.float64), want.astype(np.float64)
        return bool(np.linalg.norm(g - w) <= bound * max(np.linalg.norm(w), 1e-30))
    return bool(np.array_equal(got, want, equal_nan=want.dtype.kind == "f"))


def main(argv: list[str]) -> int:
    cases: dict[str, tuple[Any, float | None, list[DType | None]]] = {}
    for name, case in typed_cases.EXACT_CASES.items():
        cases[name] = (case, None, [None])
    for name, case in typed_cases.FLOAT_CASES.items():
        cases[name] = (case, None, [None, DType.FLOAT16, DType.BFLOAT16])
    for name, (case, bound) in typed_cases.TOLERANT_CASES.items():
        cases[name] = (case, bound, [None])
    for name, case in coverage_cases.EXACT_CASES.items():
        cases[name] = (case, None, [None])
    for name, case in coverage_cases.FLOAT_CASES.items():
        cases[name] = (case, None, [DType.FLOAT16, DType.BFLOAT16])
    for name, (case, bound) in coverage_cases.TOLERANT_CASES.items():
        cases[name] = (case, bound, [None])
    for name, case in int8_cases.CASES.items():
        cases[name] = (case, None, [None])
    failures = 0
    with tempfile.TemporaryDirectory(prefix="pydla-emulate-") as tmp:
        for name, (case, bound, precisions) in cases.items():
            if argv and not any(a in name for a in argv):
                continue
            for precision in precisions:
                label = f"{name} ({precision.short if precision else 'fp32'})"
                try:
                    got, want, flagged = emulate(*case(), precision, Path(tmp))
                except Cooperative as e:
                    print(f"{label}: skipped (kernel {e} has cooperating threads)")
                    continue
                bad = [k for k, (g, w) in enumerate(zip(got, want)) if not _same(g, w, bound)]
                failures += bool(bad)
                print(f"{label}: {len(want) - len(bad)} of {len(want)} outputs match"
                      + (f"; mismatched: {bad}" if bad else "")
                      + (f"; flagged: {flagged}" if flagged else ""))
    print(f"{failures} case(s) with mismatches")
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
