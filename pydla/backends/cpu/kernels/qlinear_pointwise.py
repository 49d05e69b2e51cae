"""QPointwise: float pointwise work between DequantizeLinear and QuantizeLinear, on the 8-bit
tensors (pydla.passes.fold_qdq_pointwise makes these layers).

The layer's ``program`` is a pointwise program (pydla.backends.cpu.fused's format:
registers 0…n-1 are the inputs, step i writes register n+i) whose steps are float32
pointwise ops and two more:

- ``DequantizeLinear`` (attrs ``scale``, ``zero_point``): an int8/uint8 register (an input,
  or a QuantizeLinear step's result) to float32, ``(float32(q) - zp) · scale``;
- ``QuantizeLinear`` (the same attrs; ``dtype`` int8 or uint8): float32 to 8 bits,
  ``saturate(rint(x / scale) + zp)`` in float32, rounding half to even.

The reference runs the steps one by one (the Q/DQ arithmetic of kernels.quantize, each
float op on its own kernel); tactic ``fused_loop`` compiles the program into one loop
(qlinear_pointwise_codegen) that reads each input element once and writes the 8-bit
result once.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numba
import numpy as np
from numba import njit

from pydla.backends.base import LayerSpec, RunFn, TensorSpec
from pydla.backends.cpu import threads, workspace
from pydla.backends.cpu.kernels.fast_pointwise import CompiledProgram
from pydla.backends.cpu.kernels.fast_pointwise_codegen import plan_layout
from pydla.backends.cpu.kernels.qlinear_pointwise_codegen import generate
from pydla.backends.cpu.registry import kernel, tactic
from pydla.backends.cpu.steps import kernel_call
from pydla.dtypes import DType
from pydla.errors import KernelError
from pydla.ops import POINTWISE

Inputs = Sequence[np.ndarray | None]
Outputs = Sequence[np.ndarray]
QDQ = ("QuantizeLinear", "DequantizeLinear")
_EIGHT = (DType.INT8, DType.UINT8)


def check_program(spec: LayerSpec) -> list[TensorSpec]:
    """Every register's spec (inputs, then one per step); KernelError naming the step
    when an operand is missing, of the wrong type or shape, or the result is not the
    layer's output."""
    program = spec.attrs.get("program")
    if not isinstance(program, list) or not program:
        raise KernelError(spec.name, spec.op, "needs a non-empty program")
    if any(s is None for s in spec.inputs) or len(spec.outputs) != 1:
        raise KernelError(spec.name, spec.op, "takes no absent inputs and writes one output")
    regs: list[TensorSpec] = [s for s in spec.inputs if s is not None]
    for i, step in enumerate(program):
        op, ins = step.get("op"), [int(r) for r in step.get("in", [])]
        where = f"step {i} ({op})"
        if op not in POINTWISE and op not in QDQ:
            raise KernelError(spec.name, spec.op, f"{where} is not a pointwise op")
        if not ins or any(not 0 <= r < len(regs) for r in ins):
            raise KernelError(spec.name, spec.op, f"{where}: registers {ins} out of range")
        out = TensorSpec(tuple(int(d) for d in step["shape"]), DType.from_name(step["dtype"]))
        types = [regs[r].dtype for r in ins]
        if op in QDQ:
            scale = float(step.get("attrs", {}).get("scale", 0.0))
            if op == "DequantizeLinear":
                ok, what = types[0] in _EIGHT and out.dtype is DType.FLOAT32, "8-bit -> float32"
            else:
                ok, what = types[0] is DType.FLOAT32 and out.dtype in _EIGHT, "float32 -> 8-bit"
            if len(ins) != 1 or not ok or not (np.isfinite(scale) and scale > 0) or \
                    regs[ins[0]].shape != out.shape:
                raise KernelError(spec.name, spec.op, f"{where}: needs one operand of its "
                                  f"shape, {what}, a positive scale; got "
                                  f"{[t.name.lower() for t in types]} -> "
                                  f"{out.dtype.name.lower()}, scale {scale}")
        elif out.dtype is not DType.FLOAT32 or any(t is not DType.FLOAT32 for t in types):
            raise KernelError(spec.name, spec.op, f"{where}: float ops compute float32; got "
                              f"{[t.name.lower() for t in types]} -> {out.dtype.name.lower()}")
        try:
            shape = np.broadcast_shapes(*(regs[r].shape for r in ins))
        except ValueError:
            raise KernelError(spec.name, spec.op, f"{where}: operands do not broadcast") from None
        if shape != out.shape:
            raise KernelError(spec.name, spec.op, f"{where}: shape {out.shape} is not the "
                              f"broadcast {shape} of its operands")
        regs.append(out)
    if regs[-1] != spec.outputs[0]:
        raise KernelError(spec.name, spec.op, f"the program yields {regs[-1]}, the layer "
                          f"writes {spec.outputs[0]}")
    return regs


def _params(step: Mapping[str, Any]) -> tuple[np.float32, np.float32]:
    a = step["attrs"]
    return np.float32(a["scale"]), np.float32(a["zero_point"])


def _dequantize(step: Mapping[str, Any]) -> RunFn:
    scale, zp = _params(step)

    def run(ins: Inputs, outs: Outputs) -> None:
        d = ins[0].astype(np.float32)  # type: ignore[union-attr]
        d -= zp
        np.multiply(d, scale, out=outs[0])

    return run


def _quantize(step: Mapping[str, Any]) -> RunFn:
    scale, zp = _params(step)
    info = np.iinfo(DType.from_name(step["dtype"]).np)

    def run(ins: Inputs, outs: Outputs) -> None:
        q = np.divide(ins[0], scale, dtype=np.float32)
        np.rint(q, out=q)
        q += zp
        np.clip(q, info.min, info.max, out=q)
        np.copyto(outs[0], q, casting="unsafe")

    return run


@kernel("QPointwise")
def bind_qpointwise(spec: LayerSpec) -> RunFn:
    from pydla.backends.cpu.backend import bind_layer  # noqa: PLC0415  (backend imports us)

    regs = check_program(spec)
    n_in = len(spec.inputs)
    program = spec.attrs["program"]
    runs: list[tuple[RunFn, list[int], workspace.Scratch | None]] = []
    for i, step in enumerate(program):
        ins = [int(r) for r in step["in"]]
        out = regs[n_in + i]
        if step["op"] == "DequantizeLinear":
            run = _dequantize(step)
        elif step["op"] == "QuantizeLinear":
            run = _quantize(step)
        else:
            run = bind_layer(LayerSpec(f"{spec.name}/{i}:{step['op']}", step["op"],
                                       dict(step.get("attrs", {})),
                                       tuple(regs[r] for r in ins), (out,)))
        last = i == len(program) - 1
        runs.append((run, ins, None if last else workspace.scratch(out.shape, out.dtype.np)))

    def run_all(ins: Inputs, outs: Outputs) -> None:
        values: list[np.ndarray | None] = list(ins)
        for step_run, operands, buf in runs:
            target = outs[0] if buf is None else buf.array
            step_run([values[r] for r in operands], [target])
            values.append(target)

    return run_all


# -- tactic fused_loop -----------------------------------------------------------------
class _QuantizedLoop(CompiledProgram):
    """CompiledProgram's loop nest and threading, with the Q/DQ parameters as one more
    argument (``qp``) and 8-bit registers."""

    def __init__(self, source: str, spec: LayerSpec, live: list[int], qp: np.ndarray) -> None:
        ins = [s for s in spec.inputs if s is not None]
        layout = plan_layout(spec.outputs[0].shape, [ins[r].shape for r in live])
        assert layout is not None
        super().__init__(source, layout, live, ins, spec.outputs[0])
        self.qp = qp

    def warm(self) -> None:
        if self.size == 0:
            return
        idle = self.geo.copy()
        idle[0] = 0  # no rows: the loop returns at once
        regs = [np.zeros(1, self.in_specs[r].dtype.np) for r in self.live]
        self.fn(np.zeros(1, self.out_spec.dtype.np), *regs, idle, self.qp)

    def prebind(self, ins: Inputs, outs: Outputs) -> Callable[[], None]:
        threads.configure()
        out = outs[0]
        if self.size == 0:
            return lambda: None
        arrays = [np.ascontiguousarray(ins[r]) for r in self.live]  # type: ignore[arg-type]
        if all(a is ins[r] for a, r in zip(arrays, self.live)) and out.flags.c_contiguous:
            return kernel_call(self.fn, out.reshape(-1), *(a.reshape(-1) for a in arrays),
                               self.geo, self.qp)
        sources = [ins[r] for r in self.live]
        target = np.empty(out.shape, out.dtype)
        run = kernel_call(self.fn, target.reshape(-1), *(a.reshape(-1) for a in arrays),
                          self.geo, self.qp)

        def staged() -> None:  # strided views: contiguous copies at the edges
            for a, src in zip(arrays, sources):
                np.copyto(a, src)
            run()
            np.copyto(out, target)

        return staged


def _compile(spec: LayerSpec) -> _QuantizedLoop | None:
    try:
        check_program(spec)
    except KernelError:
        return None
    program = spec.attrs["program"]
    ins = [s for s in spec.inputs if s is not None]
    live = sorted({int(r) for s in program for r in s["in"] if int(r) < len(ins)})
    layout = plan_layout(spec.outputs[0].shape, [ins[r].shape for r in live])
    if layout is None or not live:
        return None
    remap = {r: i for i, r in enumerate(live)}
    steps = [{"op": s["op"], "dtype": s["dtype"],
              "attrs": {} if s["op"] in QDQ else dict(s.get("attrs", {})),
              "in": [remap[int(r)] if int(r) < len(ins) else len(live) + int(r) - len(ins)
                     for r in s["in"]]} for s in program]
    source = _source(json.dumps(steps, sort_keys=True, default=float),
                     tuple(ins[r].dtype.name.lower() for r in live),
                     spec.outputs[0].dtype.name.lower(), layout.inner_full, len(layout.extents))
    if source is None:
        return None
    qp = np.array([v for s in program if s["op"] in QDQ for v in _params(s)], np.float32)
    return _QuantizedLoop(source, spec, live, np.concatenate([qp, np.zeros(2, np.float32)]))


_SOURCES: dict[tuple, str | None] = {}


def _source(key: str, in_types: tuple[str, ...], out_type: str, inner_full: tuple[bool, ...],
            groups: int) -> str | None:
    k = (key, in_types, out_type, inner_full, groups)
    if k not in _SOURCES:
        _SOURCES[k] = generate(json.loads(key), in_types, out_type, inner_full, groups)
    return _SOURCES[k]


def _applies(spec: LayerSpec) -> bool:
    return _compile(spec) is not None


def bind_fused_loop(spec: LayerSpec) -> RunFn:
    compiled = _compile(spec)
    assert compiled is not None, "applies() was checked by the backend"
    compiled.warm()
    return compiled


tactic("QPointwise", "fused_loop", applies=_applies, priority=10)(bind_fused_loop)


# -- tactic table ------------------------------------------------------------------------
# A program of one full-size 8-bit input x and small (broadcast) other inputs — per-channel
# constants: a QDQ model's batch norm, HardSwish, TensorFlow's Sub/Mul/Add — is a function
# of (x's 256 values, the position in the small inputs' broadcast shape B): the reference
# evaluates it once for all of them into a table of B × 256 results, and the layer is one
# lookup per element, whatever the program's length (the Q/DQ round trips' divisions cost
# ≈ 0.3 ns an element each in the loop). Exact by construction.
# Fewer Q steps run as fast in the loop (two: 0.53 ns an element, the table 0.49).
MIN_QUANTIZE = 3
Table = tuple[int, tuple[int, ...]]  # (x's register, B)


def _table_plan(spec: LayerSpec) -> Table | None:
    try:
        check_program(spec)
    except KernelError:
        return None
    program = spec.attrs["program"]
    ins = [s for s in spec.inputs if s is not None]
    out = spec.outputs[0]
    live = sorted({int(r) for s in program for r in s["in"] if int(r) < len(ins)})
    full = [r for r in live if ins[r].shape == out.shape]
    quantize = sum(s["op"] == "QuantizeLinear" for s in program)
    if quantize < MIN_QUANTIZE or len(full) != 1 or ins[full[0]].dtype not in _EIGHT:
        return None
    small = [ins[r].shape for r in live if r != full[0]]
    b = tuple(np.broadcast_shapes(*small)) if small else ()
    b = (1,) * (len(out.shape) - len(b)) + b
    size = int(np.prod(b, dtype=np.int64)) * 256
    elements = int(np.prod(out.shape, dtype=np.int64))
    if size > max(elements, 1) or plan_layout(out.shape, [out.shape, b]) is None:
        return None
    return full[0], b


def _table_spec(spec: LayerSpec, x: int, b: tuple[int, ...]) -> LayerSpec:
    """The program over x's 256 values (a leading axis) and the small inputs."""
    ins = [s for s in spec.inputs if s is not None]
    regs = [TensorSpec((256, *b), s.dtype) if r == x else s for r, s in enumerate(ins)]
    steps = []
    for step in spec.attrs["program"]:
        shape = np.broadcast_shapes(*(regs[int(r)].shape for r in step["in"]))
        regs.append(TensorSpec(tuple(shape), DType.from_name(step["dtype"])))
        steps.append({**step, "shape": list(shape)})
    out = TensorSpec(regs[-1].shape, spec.outputs[0].dtype)
    return LayerSpec(spec.name, spec.op, {"program": steps}, tuple(regs[:len(ins)]), (out,))


@njit(parallel=True, cache=True, nogil=True, error_model="numpy")
def _lookup_par(out: np.ndarray, x: np.ndarray, table: np.ndarray, geo: np.ndarray,
                outer: int, varying: bool) -> None:  # pragma: no cover
    _lookup_rows(out, x, table, geo, outer, varying)


@njit(cache=True, nogil=True, error_model="numpy")
def _lookup_seq(out: np.ndarray, x: np.ndarray, table: np.ndarray, geo: np.ndarray,
                outer: int, varying: bool) -> None:  # pragma: no cover
    _lookup_rows(out, x, table, geo, outer, varying)


@njit(inline="always", error_model="numpy")
def _lookup_rows(out: np.ndarray, x: np.ndarray, table: np.ndarray, geo: np.ndarray,
                 outer: int, varying: bool) -> None:  # pragma: no cover
    """out[k] = table[b(k)·256 + x[k]]: geo is CompiledProgram's over the live inputs
    (x, B); ``varying``: B changes along the innermost loop."""
    rows, inner, nchunk, chunk = geo[0], geo[1], geo[2], geo[3]
    for t in numba.prange(rows * nchunk):
        row = t // nchunk
        lo = (t - row * nchunk) * chunk
        hi = min(lo + chunk, inner)
        q = row
        bt = 0
        for j in range(outer - 1, -1, -1):
            i = q if j == 0 else q % geo[4 + j]
            q = q // geo[4 + j] if j else q
            bt += i * geo[4 + 2 * outer + j]
        ob = row * inner
        if varying:
            for i in range(lo, hi):
                out[np.uint64(ob + i)] = table[np.uint64((bt + i) * 256 + x[np.uint64(ob + i)])]
        else:
            base = bt * 256
            for i in range(lo, hi):
                out[np.uint64(ob + i)] = table[np.uint64(base + x[np.uint64(ob + i)])]


class _TableLookup(CompiledProgram):
    def __init__(self, spec: LayerSpec, x: int, b: tuple[int, ...]) -> None:
        out = spec.outputs[0]
        layout = plan_layout(out.shape, [out.shape, b])
        assert layout is not None
        super().__init__("", layout, [x], [s for s in spec.inputs if s is not None], out)
        self.x = x
        self.b = b
        self.table_spec = _table_spec(spec, x, b)
        self.evaluate = bind_qpointwise(self.table_spec)
        self.outer = len(layout.extents) - 1
        self.varying = bool(layout.inner_full[1])
        self.kernel = _lookup_par if self.parallel else _lookup_seq

    def warm(self) -> None:
        idle = self.geo.copy()
        idle[0] = 0
        self.kernel(np.zeros(1, self.out_spec.dtype.np), np.zeros(1, np.uint8),
                    np.zeros(1, self.out_spec.dtype.np), idle, self.outer, self.varying)

    def prebind(self, ins: Inputs, outs: Outputs) -> Callable[[], None]:
        threads.configure()
        out = outs[0]
        if self.size == 0:
            return lambda: None
        x = ins[self.x]
        assert x is not None
        values = np.arange(256, dtype=np.uint8).view(x.dtype).reshape((256,) + (1,) * len(self.b))
        t_in = [np.ascontiguousarray(np.broadcast_to(values, (256, *self.b))) if r == self.x
                else ins[r] for r in range(len(self.table_spec.inputs))]
        result = np.empty(self.table_spec.outputs[0].shape, out.dtype)
        table = np.empty(result.size, out.dtype)

        def fill() -> None:  # B-major: entry b·256 + v
            self.evaluate(t_in, [result])
            table[:] = np.moveaxis(result, 0, -1).reshape(-1)

        if not (x.flags.c_contiguous and out.flags.c_contiguous):
            return _staged_lookup(self, fill, x, out, table)
        lookup = kernel_call(self.kernel, out.reshape(-1), x.reshape(-1).view(np.uint8),
                             table, self.geo, self.outer, self.varying)
        if all(not a.flags.writeable for r, a in enumerate(ins)  # type: ignore[union-attr]
               if r != self.x and a is not None):
            fill()  # constants (the loadable's weights): the table once
            return lookup

        def run() -> None:
            fill()
            lookup()

        return run


def _staged_lookup(k: _TableLookup, fill: Callable[[], None], x: np.ndarray,
                   out: np.ndarray, table: np.ndarray) -> Callable[[], None]:
    xc = np.empty(x.shape, x.dtype)
    oc = np.empty(out.shape, out.dtype)
    lookup = kernel_call(k.kernel, oc.reshape(-1), xc.reshape(-1).view(np.uint8), table,
                         k.geo, k.outer, k.varying)

    def run() -> None:
        fill()
        np.copyto(xc, x)
        lookup()
        np.copyto(out, oc)

    return run


def bind_table(spec: LayerSpec) -> RunFn:
    plan = _table_plan(spec)
    assert plan is not None, "applies() was checked by the backend"
    k = _TableLookup(spec, *plan)
    k.warm()
    return k


tactic("QPointwise", "table", applies=lambda spec: _table_plan(spec) is not None,
       priority=11)(bind_table)
