"""Source of a QPointwise program's loop (tactic ``fused_loop`` of qlinear_pointwise): every
8-bit input element is loaded once, dequantized, run through the float32 ops and any Q→DQ
round trips in registers, and quantized once into the 8-bit output.

Broadcasting is fast_pointwise_codegen's loop nest (``plan_layout``; the same ``geo``
array); the float ops are fast_pointwise_ops' expressions. The quantization parameters
are a runtime float32 array ``qp`` (scale, zero point per Q/DQ step, in step order), so
one compiled kernel serves every layer with the same program shape — PP-LCNet's 27
BatchNorm+HardSwish chains compile once.

Arithmetic is the Q/DQ nodes' (onnxruntime's): DQ ``(float32(q) - zp) · scale``, Q
``clamp(rint(x / scale) + zp)`` in float32, a true division (no reciprocal) and no
contraction into FMA, so the results are the reference kernel's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pydla.backends.cpu.kernels import fast_math
from pydla.backends.cpu.kernels.fast_pointwise_ops import expression

Step = Mapping[str, Any]

EIGHT_BIT = {"uint8": (0, 255), "int8": (-128, 127)}
# fast_math's flags without "arcp" (x / s as x · (1/s)) and "contract" (FMA): the
# quantized result must round as the separate float32 operations do.
FLAGS = sorted(fast_math.FASTMATH - {"arcp", "contract"})


def _expressions(program: Sequence[Step], in_types: Sequence[str],
                 const: Any) -> tuple[list[str], list[str]] | None:
    """(each step's expression, each register's type) or None when a step is not
    compiled. Register types: "uint8"/"int8" (inputs), "float32", "q" (a quantized
    value held as an exact float32)."""
    types = list(in_types)
    exprs: list[str] = []
    param = 0
    for step in program:
        op, regs = str(step["op"]), [int(r) for r in step["in"]]
        if op == "DequantizeLinear":
            t = types[regs[0]]
            if t not in (*EIGHT_BIT, "q") or step["dtype"] != "float32":
                return None
            v = f"v{regs[0]}" if t == "q" else f"np.float32(v{regs[0]})"
            exprs.append(f"np.float32(({v} - Z{param}) * S{param})")
            types.append("float32")
            param += 1
        elif op == "QuantizeLinear":
            if types[regs[0]] != "float32" or step["dtype"] not in EIGHT_BIT:
                return None
            lo, hi = EIGHT_BIT[str(step["dtype"])]
            exprs.append(f"at_most(at_least(np.float32(np.rint(v{regs[0]} / S{param})) + "
                         f"Z{param}, {const(lo)}), {const(hi)})")
            types.append("q")
            param += 1
        else:
            if step["dtype"] != "float32" or any(types[r] != "float32" for r in regs):
                return None
            e = expression(op, [f"v{r}" for r in regs], ["float32"] * len(regs), "float32",
                           step.get("attrs", {}), const)
            if e is None:
                return None
            exprs.append(e)
            types.append("float32")
    return exprs, types


def generate(program: Sequence[Step], in_types: Sequence[str], out_type: str,
             inner_full: Sequence[bool], groups: int) -> str | None:
    """Module source with ``run_par``/``run_seq(out, r…, geo, qp)``; None when some step
    is not compiled."""
    consts: dict[float, str] = {}

    def const(value: float) -> str:
        return consts.setdefault(float(value), f"K{len(consts)}")

    got = _expressions(program, in_types, const)
    if got is None:
        return None
    exprs, types = got
    n_in = len(in_types)
    last = types[-1]
    if (last == "q") != (out_type in EIGHT_BIT) or (last == "float32") != (
            out_type == "float32"):
        return None
    live = {n_in + len(program) - 1}
    for i in range(len(program) - 1, -1, -1):
        if n_in + i in live:
            live.update(int(r) for r in program[i]["in"])
    invariant = [not inner_full[r] for r in range(n_in)]
    for step in program:
        invariant.append(all(invariant[int(r)] for r in step["in"]))
    params = sum(s["op"] in ("QuantizeLinear", "DequantizeLinear") for s in program)
    hoisted = [f"S{j} = qp[{2 * j}]\nZ{j} = qp[{2 * j + 1}]" for j in range(params)]
    body: list[str] = []
    # Unsigned indices: numba wraps negative signed ones, and that check keeps LLVM from
    # vectorising the loop.
    for r in range(n_in):
        if r in live:
            (hoisted if invariant[r] else body).append(
                f"v{r} = r{r}[b{r}]" if invariant[r] else f"v{r} = r{r}[np.uint64(b{r} + i)]")
    for i, e in enumerate(exprs):
        if n_in + i in live:
            (hoisted if invariant[n_in + i] else body).append(f"v{n_in + i} = {e}")
    result = f"v{n_in + len(program) - 1}"
    store = f"np.{out_type}({result})" if out_type in EIGHT_BIT else result
    args = ", ".join(f"r{r}" for r in range(n_in))
    outer = groups - 1
    decompose = ["q = row"]
    for j in range(outer - 1, 0, -1):
        decompose += [f"i{j} = q % geo[{4 + j}]", f"q = q // geo[{4 + j}]"]
    if outer:
        decompose.append("i0 = q")
    bases = [f"b{r} = " + (" + ".join(f"i{j} * geo[{4 + outer + r * outer + j}]"
                                      for j in range(outer)) or "0") for r in range(n_in)]
    lines = [f"# generated by {__name__}; math {fast_math.SOURCE_HASH}", "import numpy as np",
             "from numba import njit, prange",
             "from pydla.backends.cpu.kernels.fast_math import at_least, at_most, erf32, "
             "exp32, gelu32, gelu_tanh32, nan_max, nan_min, sigmoid32, softplus32, tanh32",
             "import math", f"FLAGS = set({FLAGS!r})"]
    lines += [f'{name} = np.float32(float("{value!r}"))' for value, name in consts.items()]
    for name, parallel, loop in (("run_par", True, "prange"), ("run_seq", False, "range")):
        lines += ["", "", f"@njit(parallel={parallel}, cache=True, nogil=True, "
                  "error_model='numpy', fastmath=FLAGS)",
                  f"def {name}(out, {args}, geo, qp):",
                  "    rows, inner, nchunk, chunk = geo[0], geo[1], geo[2], geo[3]",
                  f"    for t in {loop}(rows * nchunk):",
                  "        row = t // nchunk",
                  "        lo = (t - row * nchunk) * chunk",
                  "        hi = min(lo + chunk, inner)"]
        for s in decompose + bases + hoisted:
            lines += [f"        {part}" for part in s.split("\n")]
        lines += ["        ob = row * inner", "        for i in range(lo, hi):"]
        lines += [f"            {s}" for s in body]
        lines += [f"            out[np.uint64(ob + i)] = {store}"]
    return "\n".join(lines) + "\n"
