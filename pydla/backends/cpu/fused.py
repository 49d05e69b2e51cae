"""Fused layers on the CPU: pointwise programs and epilogues.

A pointwise program is a list of steps ``{"op", "in", "attrs", "shape", "dtype"}``; registers
0…n-1 are the program's inputs and step i writes register n+i; the last register is the
result. Each step runs the op's own CPU kernel (bound once, scratch allocated once), so a
fused layer computes exactly what the unfused ops did.

A layer with an ``epilogue`` attribute (``{"program": [...], "inputs": k}``) runs its own
kernel into a staging buffer, then the program with register 0 = that result and registers
1…k = its last k inputs, writing the layer's output.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from pydla.backends.base import LayerSpec, RunFn, TensorSpec
from pydla.backends.cpu import workspace
from pydla.backends.cpu.registry import KERNELS, kernel
from pydla.backends.cpu.steps import PreboundKernel, Thunk, prebind
from pydla.dtypes import DType
from pydla.errors import KernelError
from pydla.ops import POINTWISE


def _bind_program(name: str, program: Sequence[Mapping[str, Any]],
                  inputs: Sequence[TensorSpec], result: TensorSpec
                  ) -> tuple[list[RunFn], list[list[int]], list[workspace.Scratch | None]]:
    """Validate and bind every step; returns (runs, operand registers, scratch per step)."""
    from pydla.backends.cpu.backend import bind_layer  # the half-precision wrapper too

    specs: list[TensorSpec] = list(inputs)
    runs: list[RunFn] = []
    operands: list[list[int]] = []
    scratch: list[workspace.Scratch | None] = []
    if not program:
        raise KernelError(name, "Pointwise", "empty program")
    for i, step in enumerate(program):
        op = step["op"]
        if op not in POINTWISE or op not in KERNELS:
            raise KernelError(name, "Pointwise", f"step {i}: {op!r} is not a pointwise op")
        regs = [int(r) for r in step["in"]]
        if any(not 0 <= r < len(specs) for r in regs):
            raise KernelError(name, "Pointwise", f"step {i}: register out of range {regs}")
        shape = tuple(int(d) for d in step["shape"])
        out = TensorSpec(shape, DType.from_name(step["dtype"]))
        try:
            want = np.broadcast_shapes(*(specs[r].shape for r in regs))
        except ValueError:
            raise KernelError(name, "Pointwise", f"step {i}: operands do not broadcast") from None
        if want != shape:
            raise KernelError(name, "Pointwise", f"step {i}: shape {shape} is not the broadcast "
                              f"of its operands {want}")
        step_spec = LayerSpec(f"{name}/{i}:{op}", op, dict(step.get("attrs", {})),
                              tuple(specs[r] for r in regs), (out,))
        runs.append(bind_layer(step_spec))
        operands.append(regs)
        last = i == len(program) - 1
        scratch.append(None if last else workspace.scratch(shape, out.dtype.np))
        specs.append(out)
    if specs[-1] != result:
        raise KernelError(name, "Pointwise", f"program yields {specs[-1]}, the layer writes "
                          f"{result}")
    return runs, operands, scratch


def bind_program(name: str, program: Sequence[Mapping[str, Any]],
                 inputs: Sequence[TensorSpec], result: TensorSpec
                 ) -> tuple[RunFn, int]:
    """A RunFn evaluating the program: inputs are its registers 0…n-1, outputs[0] its result."""
    runs, operands, scratch = _bind_program(name, program, inputs, result)
    n_in = len(inputs)
    steps = list(zip(runs, operands, scratch))

    def bind(ins: Sequence[np.ndarray | None], outs: Sequence[np.ndarray]) -> Thunk:
        # Each step prebound to its registers, as the executor prebinds a layer: a step's
        # kernel prepares its views and arguments once, not at every run.
        regs: list[np.ndarray | None] = list(ins[:n_in])
        thunks = []
        for step_run, ops, buf in steps:
            target = outs[0] if buf is None else buf.array
            thunks.append(prebind(step_run, [regs[r] for r in ops], [target]))
            regs.append(target)
        if len(thunks) == 1:
            return thunks[0]

        def run() -> None:
            for thunk in thunks:
                thunk()

        return run

    return PreboundKernel(bind), n_in


@kernel("Pointwise")
def bind_pointwise(spec: LayerSpec) -> RunFn:
    if any(s is None for s in spec.inputs):
        raise KernelError(spec.name, spec.op, "a pointwise layer has no optional inputs")
    run, _ = bind_program(spec.name, spec.attrs["program"],
                          [s for s in spec.inputs if s is not None], spec.outputs[0])
    return run


def with_epilogue(spec: LayerSpec, bind_base: Any) -> RunFn:
    """Bind ``spec``'s own kernel (without the epilogue) and chain its epilogue after it."""
    epi = spec.attrs["epilogue"]
    k = int(epi["inputs"])
    if not 0 <= k < len(spec.inputs):
        raise KernelError(spec.name, spec.op, f"epilogue takes {k} of {len(spec.inputs)} inputs")
    own = {key: v for key, v in spec.attrs.items() if key != "epilogue"}
    n_own = len(spec.inputs) - k
    base = bind_base(LayerSpec(spec.name, spec.op, own, spec.inputs[:n_own], spec.outputs,
                               spec.tactic))
    extra = [s for s in spec.inputs[n_own:]]
    if any(s is None for s in extra):
        raise KernelError(spec.name, spec.op, "epilogue inputs cannot be absent")
    out = spec.outputs[0]
    program, _ = bind_program(spec.name, epi["program"], [out, *extra], out)  # type: ignore[list-item]

    # The base result goes to its own buffer: kernels may read their input several times,
    # so the epilogue must never write over what it reads.
    staged = [workspace.scratch(o.shape, o.dtype.np) for o in spec.outputs]

    def bind(ins: Sequence[np.ndarray | None], outs: Sequence[np.ndarray]) -> Thunk:
        # Both parts prebound: a fast tactic's kernel (conv_fast's runner) prepares its
        # views and numba arguments once here, not at every run (piper's masked 1-D
        # convolutions spent 0.4 ms a run preparing 0.01 ms kernels).
        bufs = [s.array for s in staged]
        first = prebind(base, ins[:n_own], bufs)
        then = prebind(program, [bufs[0], *ins[n_own:]], outs)

        def run() -> None:
            first()
            then()

        return run

    return PreboundKernel(bind)


def scratch_bytes(attrs: Mapping[str, Any], output_nbytes: int) -> int:
    """Scratch memory the CPU backend allocates for a layer's fused work (bytes)."""
    from pydla.dtypes import DType as _DType

    def program_bytes(program: Sequence[Mapping[str, Any]]) -> int:
        return sum(int(np.prod(s["shape"], dtype=np.int64)) * _DType.from_name(s["dtype"]).itemsize
                   for s in program[:-1])

    total = 0
    if "epilogue" in attrs:
        total += output_nbytes + program_bytes(attrs["epilogue"]["program"])
    if "program" in attrs:
        total += program_bytes(attrs["program"])
    return total
