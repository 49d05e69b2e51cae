"""Would an fp16 CPU kernel win where memory bounds it? A single-threaded Add (y = a + b) in
three forms, timed alternating in rounds (benchmarks.timing.alternate):

- fp32: float32 in and out;
- fp16_f16c: float16 storage, F16C loads/stores (vcvtph2ps/vcvtps2ph), float32 math;
- fp16_numpy: a half layer as pydla ran it before pydla.backends.cpu.half — numpy widens the
  inputs, the float32 kernel, numpy rounds the output.

    python -m benchmarks.f16c_elementwise   # one JSON row per size
"""

from __future__ import annotations

import ctypes
import json
from collections.abc import Callable

import llvmlite.binding as llvm
import numpy as np

from benchmarks.timing import alternate, others_load

LANES = 8


def add_ir(elem: str) -> str:
    """y[i] = a[i] + b[i] over n/LANES vectors; ``elem`` is the storage type (float, half)."""
    vec = f"<{LANES} x {elem}>"
    wide = f"<{LANES} x float>"
    ext = (lambda r, s: f"%{r} = fpext {vec} %{s} to {wide}") if elem == "half" else (
        lambda r, s: f"%{r} = fadd {wide} %{s}, zeroinitializer")
    trunc = (f"%r = fptrunc {wide} %s to {vec}" if elem == "half"
             else f"%r = fadd {wide} %s, zeroinitializer")
    return f"""
define void @add(i8* %pa, i8* %pb, i8* %py, i64 %n) {{
entry:
  %a = bitcast i8* %pa to {vec}*
  %b = bitcast i8* %pb to {vec}*
  %y = bitcast i8* %py to {vec}*
  br label %loop
loop:
  %i = phi i64 [0, %entry], [%i1, %loop]
  %ap = getelementptr {vec}, {vec}* %a, i64 %i
  %bp = getelementptr {vec}, {vec}* %b, i64 %i
  %yp = getelementptr {vec}, {vec}* %y, i64 %i
  %xa = load {vec}, {vec}* %ap, align 2
  %xb = load {vec}, {vec}* %bp, align 2
  {ext("wa", "xa")}
  {ext("wb", "xb")}
  %s = fadd {wide} %wa, %wb
  {trunc}
  store {vec} %r, {vec}* %yp, align 2
  %i1 = add i64 %i, 1
  %c = icmp ult i64 %i1, %n
  br i1 %c, label %loop, label %done
done:
  ret void
}}"""


Kernel = Callable[[int, int, int, int], None]


def compile_kernels() -> tuple[dict[str, Kernel], list[object]]:
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    machine = llvm.Target.from_default_triple().create_target_machine(
        cpu=llvm.get_host_cpu_name(), features=llvm.get_host_cpu_features().flatten(), opt=3)
    kernels: dict[str, Kernel] = {}
    keep: list[object] = []  # the engines own the code
    for elem in ("float", "half"):
        module = llvm.parse_assembly(add_ir(elem))
        module.verify()
        engine = llvm.create_mcjit_compiler(module, machine)
        engine.finalize_object()
        keep.append(engine)
        proto = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                                 ctypes.c_int64)
        kernels[elem] = proto(engine.get_function_address("add"))
    return kernels, keep


def runs_for(n: int, k: dict[str, Kernel]) -> dict[str, Callable[[], None]]:
    rng = np.random.default_rng(0)
    a32, b32 = (rng.standard_normal(n).astype(np.float32) for _ in range(2))
    y32 = np.empty_like(a32)
    a16, b16 = a32.astype(np.float16), b32.astype(np.float16)
    y16 = np.empty(n, np.float16)
    blocks = n // LANES

    def numpy_half() -> None:
        wa, wb, wy = a16.astype(np.float32), b16.astype(np.float32), np.empty(n, np.float32)
        k["float"](wa.ctypes.data, wb.ctypes.data, wy.ctypes.data, blocks)
        y16[:] = wy

    return {"fp32": lambda: k["float"](a32.ctypes.data, b32.ctypes.data, y32.ctypes.data,
                                       blocks),
            "fp16_f16c": lambda: k["half"](a16.ctypes.data, b16.ctypes.data, y16.ctypes.data,
                                           blocks),
            "fp16_numpy": numpy_half}


def main() -> int:
    kernels, _keep = compile_kernels()
    for n in (1 << 14, 1 << 18, 1 << 22, 1 << 24):
        runs = runs_for(n, kernels)
        times, load = others_load(lambda runs=runs: alternate(runs, min_seconds=1.5))
        print(json.dumps({"elements": n, "fp32_bytes_moved": 12 * n,
                          **{f"{k}_ms": round(v, 4) for k, v in times.items()},
                          "others_load": None if load is None else round(load, 2)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
