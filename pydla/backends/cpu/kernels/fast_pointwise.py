"""Pointwise programs compiled to one numba loop (tactic ``fused_loop``).

The reference runs a program step by step through scratch buffers, one memory pass per
step. Here the program becomes the source of one numba function that reads each input
element once, keeps every intermediate in a register and writes the result once; it is
generated from the steps (``fast_pointwise_ops``), written to the on-disk kernel cache
(``pydla.backends.cpu.jit``) and compiled with ``cache=True``.

Broadcasting is index arithmetic over a loop nest (fast_pointwise_codegen): full-shape,
per-channel, scalar, ``[N,C,1,1]`` and attention-mask operands all compile; a program over
more than four groups of dimensions keeps the reference kernel.

The same compiler runs epilogues in place (``compile_epilogue``): register 0 is the host's
output, read and overwritten element by element.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

import numpy as np

from pydla.backends.base import LayerSpec, RunFn, TensorSpec
from pydla.backends.cpu import threads
from pydla.backends.cpu.jit import load_source
from pydla.backends.cpu.kernels.fast_pointwise_codegen import (
    Layout,
    Step,
    generate,
    plan_layout,
    register_type,
)
from pydla.backends.cpu.registry import tactic
from pydla.backends.cpu.steps import PreboundKernel, kernel_call
from pydla.ops import POINTWISE

Thunk = Callable[[], None]

# Below this many output elements a parallel region (≈ 2 µs to start) does not pay.
PARALLEL_MIN = 1 << 15
# Elements per parallel work item at least, so that loop overhead stays small.
CHUNK_MIN = 4096
def _flat(x: np.ndarray) -> np.ndarray:
    return x.reshape(-1)


class CompiledProgram(PreboundKernel):
    """A pointwise program over fixed register shapes, compiled to one loop.

    ``prebind(ins, outs)`` returns a no-argument callable running it on those arrays (the
    executor binds arena views once, pydla.backends.cpu.steps); the object itself is a
    RunFn too.
    """

    def __init__(self, source: str, layout: Layout, live: Sequence[int],
                 in_specs: Sequence[TensorSpec], out_spec: TensorSpec) -> None:
        super().__init__()
        self.source = source
        self.driver = ""
        self.layout = layout
        self.live = list(live)
        self.in_specs = list(in_specs)
        self.out_spec = out_spec
        size = math.prod(layout.extents)
        self.size = size
        inner = layout.extents[-1]
        rows = size // inner if inner else 0
        nthreads = threads.num_threads()
        self.parallel = size >= PARALLEL_MIN and nthreads > 1
        nchunk = 1
        if self.parallel and rows < 4 * nthreads:
            nchunk = max(1, min(-(-4 * nthreads // rows), inner // CHUNK_MIN))
        chunk = -(-inner // nchunk) if inner else 0
        nchunk = -(-inner // chunk) if chunk else 1
        self.geo = np.array([rows, inner, nchunk, chunk, *layout.extents[:-1],
                             *(s for per_input in layout.strides for s in per_input)],
                            np.int64)
        self._fn: Callable[..., None] | None = None

    @property
    def module(self) -> ModuleType:
        """The compiled module: the program's functions and the driver, if one was added."""
        return load_source(self.source + self.driver)

    def add_driver(self, source: str) -> None:
        """Compile ``source`` (a kernel calling ``run_range``) into the program's module."""
        self.driver = source
        self._fn = None

    def operands(self, ins: Sequence[np.ndarray | None]) -> list[np.ndarray] | None:
        """The live registers as the functions take them (flat), and ``geo`` last; None when
        an operand needs staging (float16, strided): use prebind then."""
        arrays = [ins[r] for r in self.live]
        if any(a is None or a.dtype == np.float16 or not a.flags.c_contiguous
               for a in arrays):
            return None
        return [*(_flat(a) for a in arrays), self.geo]  # type: ignore[union-attr]

    @property
    def fn(self) -> Callable[..., None]:
        if self._fn is None:
            module = self.module
            self._fn = module.run_par if self.parallel else module.run_seq
        return self._fn

    def warm(self) -> None:
        """Compile (or load from the disk cache) the plain and the in-place loop now. Which
        one a layer runs depends on the memory plan, made after its tactic was timed: a
        build must leave both in the cache, so that no first run compiles."""
        if self.size == 0:
            return
        idle = self.geo.copy()
        idle[0] = 0  # no rows: the loops return at once

        def dummy(spec: TensorSpec) -> np.ndarray:
            name = register_type(spec.dtype.name.lower())
            return np.zeros(1, np.bool_ if name == "bool" else name)

        regs = [dummy(self.in_specs[r]) for r in self.live]
        out = dummy(self.out_spec)
        self.fn(out, *regs, idle)
        if self.live[0] == 0 and regs[0].dtype == out.dtype:
            module = self.module
            (module.run_par_inplace if self.parallel else module.run_seq_inplace)(*regs, idle)

    def prebind(self, ins: Sequence[np.ndarray | None], outs: Sequence[np.ndarray]) -> Thunk:
        threads.configure()
        out = outs[0]
        if self.size == 0:
            return _nothing
        arrays = [ins[r] for r in self.live]
        widen = [a is not None and a.dtype == np.float16 for a in arrays]
        narrow = out.dtype == np.float16
        fast = not any(widen) and not narrow and all(
            a is not None and a.flags.c_contiguous for a in arrays) and out.flags.c_contiguous
        if fast and self.live[0] == 0 and arrays[0] is not None and \
                arrays[0].ctypes.data == out.ctypes.data:
            module = self.module
            inplace = module.run_par_inplace if self.parallel else module.run_seq_inplace
            return kernel_call(inplace, *(_flat(a) for a in arrays), self.geo)
        if fast:
            return kernel_call(self.fn, _flat(out), *(_flat(a) for a in arrays),
                               self.geo)
        # float16 or strided operands: float32 contiguous staging copies at the edges.
        staged = [np.empty(a.shape, np.float32 if w else a.dtype) for a, w in
                  zip(arrays, widen)]
        target = np.empty(out.shape, np.float32 if narrow else out.dtype)
        run = kernel_call(self.fn, _flat(target), *(_flat(s) for s in staged),
                          self.geo)

        def staged_run() -> None:
            for s, a in zip(staged, arrays):
                np.copyto(s, a)
            run()
            np.copyto(out, target, casting="unsafe")

        return staged_run


def _nothing() -> None:
    """A zero-size output: nothing to compute."""


@functools.lru_cache(maxsize=512)
def _generate_cached(program_key: str, in_types: tuple[str, ...], inner_full: tuple[bool, ...],
                     groups: int) -> str | None:
    return generate(json.loads(program_key), in_types, inner_full, groups)


def compile_program(program: Sequence[Step], inputs: Sequence[TensorSpec],
                    result: TensorSpec, keep_all: bool = False) -> CompiledProgram | None:
    """Compile ``program`` (registers 0…n-1 = ``inputs``) or None if it cannot be."""
    if not program or tuple(int(d) for d in program[-1]["shape"]) != tuple(result.shape):
        return None
    in_types = tuple(register_type(s.dtype.name.lower()) for s in inputs)
    if any(t is None for t in in_types) or register_type(result.dtype.name.lower()) is None:
        return None
    layout = plan_layout(result.shape, [s.shape for s in inputs])
    if layout is None:
        return None
    live = sorted({int(r) for step in program for r in step["in"] if int(r) < len(inputs)})
    if keep_all:
        live = list(range(len(inputs)))
    if not live:
        return None
    # Inputs the program never reads are dropped from the kernel's arguments.
    remap = {r: i for i, r in enumerate(live)}
    steps = [{"op": s["op"], "dtype": s["dtype"], "attrs": dict(s.get("attrs", {})),
              "in": [remap[int(r)] if int(r) < len(inputs) else len(live) + int(r) - len(inputs)
                     for r in s["in"]]} for s in program]
    key = json.dumps(steps, sort_keys=True, default=float)
    source = _generate_cached(key, tuple(in_types[r] for r in live),  # type: ignore[misc]
                              tuple(layout.inner_full[r] for r in live),
                              len(layout.extents))
    if source is None:
        return None
    sub = Layout(layout.extents, tuple(layout.strides[r] for r in live),
                 tuple(layout.inner_full[r] for r in live))
    return CompiledProgram(source, sub, live, inputs, result)


def compile_epilogue(program: Sequence[Step], out: TensorSpec,
                     extras: Sequence[TensorSpec]) -> CompiledProgram | None:
    """An epilogue run in place: register 0 is the host's output, 1…k its extra inputs;
    prebind it with ``([y, *extras], [y])``, or call the module's ``run_range_inplace(y,
    extras…, geo, lo, hi)`` from a host kernel (``add_driver``).

    Every register is kept (none dropped as unread), so that a host's driver can pass
    its operands by position."""
    compiled = compile_program(program, [out, *extras], out, keep_all=True)
    return compiled


# -- tactics ---------------------------------------------------------------------------
def _layer_program(spec: LayerSpec) -> list[dict[str, Any]]:
    if spec.op == "Pointwise":
        return list(spec.attrs["program"])
    out = spec.outputs[0]
    return [{"op": spec.op, "in": list(range(len(spec.inputs))), "attrs": dict(spec.attrs),
             "shape": list(out.shape), "dtype": out.dtype.name.lower()}]


def _compile_layer(spec: LayerSpec) -> CompiledProgram | None:
    if len(spec.outputs) != 1 or any(s is None for s in spec.inputs) or "epilogue" in spec.attrs:
        return None
    attrs = {k: v for k, v in spec.attrs.items() if k != "in_place"}
    spec = LayerSpec(spec.name, spec.op, attrs, spec.inputs, spec.outputs, spec.tactic)
    return compile_program(_layer_program(spec), [s for s in spec.inputs if s is not None],
                           spec.outputs[0])


def _applies(spec: LayerSpec) -> bool:
    return _compile_layer(spec) is not None


def bind_fused_loop(spec: LayerSpec) -> RunFn:
    compiled = _compile_layer(spec)
    assert compiled is not None, "applies() was checked by the backend"
    compiled.warm()
    return compiled


tactic("Pointwise", "fused_loop", applies=_applies, priority=10)(bind_fused_loop)
# A lone pointwise layer is a one-step program.
for _op in sorted(POINTWISE):
    tactic(_op, "fused_loop", applies=_applies, priority=10)(bind_fused_loop)
