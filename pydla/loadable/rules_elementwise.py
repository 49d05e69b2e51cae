"""Shape rules of elementwise layers: single pointwise ops, fused pointwise programs and the
epilogue programs of Conv, Gemm and MatMul (format in pydla.backends.cpu.fused)."""

from __future__ import annotations

from typing import Any

from pydla.dtypes import DType
from pydla.loadable.validate import Expected, LayerCheck, broadcast, rule
from pydla.ops import POINTWISE

# Ops whose output is bool whatever their inputs are.
_PREDICATES = frozenset({"Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "IsInf",
                         "IsNaN", "Not", "And", "Or", "Xor"})
_MAX_STEPS = 4096


def _elementwise(check: LayerCheck) -> Expected:
    check.arity(1, 64)
    shapes = [t.shape for t in check.ins if t is not None]
    if check.ins[0] is None:
        raise check.fail(".inputs[0]", "a required input is absent")
    dtype = DType.BOOL if check.layer.op in _PREDICATES else None
    return [(broadcast(check, shapes, ".inputs"), dtype)]


for _op in sorted(POINTWISE):
    rule(_op)(_elementwise)


def check_program(check: LayerCheck, program: Any, registers: list[tuple[int, ...]],
                  where: str) -> tuple[int, ...]:
    """Each step's operands are earlier registers and its shape their broadcast; returns
    the program's result shape."""
    if not isinstance(program, list) or not 0 < len(program) <= _MAX_STEPS:
        raise check.fail(where, "a program is a non-empty list of steps")
    regs = list(registers)
    for i, step in enumerate(program):
        path = f"{where}[{i}]"
        if (not isinstance(step, dict) or not isinstance(step.get("op"), str)
                or step["op"] not in POINTWISE):
            raise check.fail(path, "a step is an object naming a pointwise op")
        ins, shape = step.get("in"), step.get("shape")
        if (not isinstance(ins, list) or not ins
                or any(isinstance(r, bool) or not isinstance(r, int) or not 0 <= r < len(regs)
                       for r in ins)):
            raise check.fail(f"{path}.in", f"{ins!r} are not registers in [0, {len(regs)})")
        if (not isinstance(shape, list)
                or any(isinstance(d, bool) or not isinstance(d, int) for d in shape)):
            raise check.fail(f"{path}.shape", f"{shape!r} is not a shape")
        try:
            DType.from_name(step.get("dtype"))  # type: ignore[arg-type]
        except (ValueError, TypeError):
            raise check.fail(f"{path}.dtype", f"unknown dtype {step.get('dtype')!r}") from None
        want = broadcast(check, [regs[r] for r in ins], path)
        if tuple(shape) != want:
            raise check.fail(f"{path}.shape", f"{tuple(shape)} is not the broadcast {want} "
                             "of its operands")
        regs.append(want)
    return regs[-1]


@rule("Pointwise")
def _pointwise(check: LayerCheck) -> Expected:
    check.arity(1, 4096)
    shapes = [check.x(k).shape for k in range(len(check.ins))]
    return [(check_program(check, check.attrs.get("program"), shapes, ".attrs.program"), None)]


def with_epilogue(check: LayerCheck, own: int, host: Expected) -> Expected:
    """The layer's result after its epilogue program (registers: the host's result, then
    the last ``inputs`` layer inputs), or the host's own result without one."""
    epi = check.attrs.get("epilogue")
    if epi is None:
        return host
    if not isinstance(epi, dict):
        raise check.fail(".attrs.epilogue", "expected an object")
    extra = epi.get("inputs")
    if isinstance(extra, bool) or not isinstance(extra, int) or extra != len(check.ins) - own:
        raise check.fail(".attrs.epilogue.inputs", f"{extra!r} is not the layer's "
                         f"{len(check.ins) - own} extra inputs")
    regs = [tuple(host[0][0])] + [check.x(k).shape for k in range(own, len(check.ins))]
    shape = check_program(check, epi.get("program"), regs, ".attrs.epilogue.program")
    if shape != tuple(host[0][0]):
        raise check.fail(".attrs.epilogue.program", f"yields shape {shape}, the layer's "
                         f"result is {tuple(host[0][0])}")
    return [(shape, None)]


def own_inputs(check: LayerCheck) -> int:
    """How many inputs belong to the host op (the rest feed its epilogue)."""
    epi = check.attrs.get("epilogue")
    extra = epi.get("inputs") if isinstance(epi, dict) else 0
    if isinstance(extra, bool) or not isinstance(extra, int) or not 0 <= extra < len(check.ins):
        raise check.fail(".attrs.epilogue.inputs", f"{extra!r} is not a count of the "
                         "layer's inputs")
    return len(check.ins) - extra
