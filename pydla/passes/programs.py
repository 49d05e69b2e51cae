"""Pointwise programs in the IR: convert nodes to programs and splice programs together.

A program is ``(inputs, steps)``: registers 0…len(inputs)-1 are the inputs, step i writes
register len(inputs)+i, the last step is the result (format in pydla.backends.cpu.fused).
"""

from __future__ import annotations

from typing import Any

from pydla.ir import Node, Value
from pydla.ops import POINTWISE

Step = dict[str, Any]


def is_pointwise(node: Node) -> bool:
    return ((node.op in POINTWISE or node.op == "Pointwise") and len(node.outputs) == 1
            and all(v is not None for v in node.inputs) and "epilogue" not in node.attrs)


def to_program(node: Node) -> tuple[list[Value], list[Step]]:
    inputs = [v for v in node.inputs if v is not None]
    if node.op == "Pointwise":
        return inputs, [dict(s) for s in node.attrs["program"]]
    out = node.outputs[0]
    step = {"op": node.op, "in": list(range(len(inputs))), "attrs": dict(node.attrs),
            "shape": list(out.shape), "dtype": out.dtype.name.lower()}
    return inputs, [step]


def splice(first: tuple[list[Value], list[Step]], second: tuple[list[Value], list[Step]],
           link: Value, head: list[Value] | None = None) -> tuple[list[Value], list[Step]]:
    """One program computing ``second`` where its input ``link`` is ``first``'s result.

    ``head`` fixes the leading inputs of the merged program (an epilogue's register 0).
    """
    p_in, p_steps = first
    c_in, c_steps = second
    inputs: list[Value] = list(head or [])
    for v in p_in + [v for v in c_in if v is not link]:
        if not any(v is x for x in inputs):
            inputs.append(v)
    n = len(inputs)

    def pos(v: Value) -> int:
        return next(i for i, x in enumerate(inputs) if x is v)

    def remap_p(r: int) -> int:
        return pos(p_in[r]) if r < len(p_in) else n + r - len(p_in)

    # An empty first program passes ``link`` through (it must then be among the inputs).
    p_result = n + len(p_steps) - 1 if p_steps else pos(link)

    def remap_c(r: int) -> int:
        if r < len(c_in):
            return p_result if c_in[r] is link else pos(c_in[r])
        return n + len(p_steps) + r - len(c_in)

    steps = [{**s, "in": [remap_p(r) for r in s["in"]]} for s in p_steps]
    steps += [{**s, "in": [remap_c(r) for r in s["in"]]} for s in c_steps]
    return inputs, steps
