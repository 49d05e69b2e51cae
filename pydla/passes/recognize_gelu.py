"""GELU written with primitive ops → one Gelu layer.

Exact form:  0.5 · x · (1 + erf(x / √2))   (x·(1/√2) accepted for x/√2)
tanh form:   0.5 · x · (1 + tanh(√(2/π) · (x + 0.044715 · x³)))   (x³ as Pow(x, 3) or x·x·x)

The outer product of the three factors x, (1 + …) and ½ comes in any grouping exporters
use: (x·p)·½, x·(p·½), (x·½)·p, with ½ also written as a division by 2.
"""

from __future__ import annotations

import math

from pydla.ir import Graph, Node, Value
from pydla.passes.base import PassContext
from pydla.passes.patterns import (
    ADD,
    RewritePass,
    is_add,
    is_scalar,
    other_operand,
    outside_reader,
    produced_by,
    refuse,
    replace,
    scaled_by,
    split_const,
)
from pydla.passes.rewrite import Uses

_TANH_SCALE = math.sqrt(2.0 / math.pi)
_CUBIC = 0.044715


def _erf_argument(erf: Node) -> tuple[Value, list[Node]] | None:
    """x for erf(x/√2): (x, the scaling node)."""
    scale = produced_by(erf.inputs[0], "Div", "Mul")
    if scale is None:
        return None
    pair = split_const(scale)
    x = scale.inputs[0] if scale.op == "Div" else pair[1] if pair is not None else None
    if x is None or not scaled_by(scale, x, 1.0 / math.sqrt(2.0)):
        return None
    return x, [scale]


def _cube(v: Value | None, x: Value) -> list[Node] | None:
    """Nodes computing x³ from x as Pow(x, 3), x·(x·x) or (x·x)·x."""
    pw = produced_by(v, "Pow")
    if pw is not None:
        return [pw] if pw.inputs[0] is x and is_scalar(pw.inputs[1], 3.0) else None
    outer = produced_by(v, "Mul")
    if outer is None:
        return None
    sq = produced_by(other_operand(outer, x), "Mul")
    if sq is None or sq.inputs[0] is not x or sq.inputs[1] is not x:
        return None
    return [sq, outer]


def _tanh_argument(tanh: Node) -> tuple[Value, list[Node]] | None:
    """x for tanh(√(2/π)·(x + 0.044715·x³)): (x, the nodes computing the argument)."""
    outer = produced_by(tanh.inputs[0], "Mul")
    pair = split_const(outer) if outer is not None else None
    if outer is None or pair is None or not is_scalar(pair[0], _TANH_SCALE):
        return None
    inner = produced_by(pair[1], *ADD)
    if inner is None or len(inner.inputs) != 2:
        return None
    for x, term in (inner.inputs, inner.inputs[::-1]):
        k = produced_by(term, "Mul")
        if x is None or k is None:
            continue
        kpair = split_const(k)
        if kpair is None or not is_scalar(kpair[0], _CUBIC):
            continue
        cube = _cube(kpair[1], x)
        if cube is not None:
            return x, [*cube, k, inner, outer]
    return None


def _halves(node: Node | None, v: Value) -> bool:
    """``node`` computes v·½ (as Mul by 0.5 or Div by 2)."""
    return scaled_by(node, v, 0.5)


def _product(uses: Uses, p: Value, x: Value) -> list[Node] | None:
    """The nodes forming ½·x·p from the factor p = 1 + erf/tanh(…); the last is the result.

    Every reader of p is tried: one with a second reader still matches, so that the check
    afterwards can say which reader blocks the rewrite.
    """
    for m1 in uses.of(p):
        y = m1.outputs[0]
        if _halves(m1, p):  # x·(p·½)
            for m2 in uses.of(y):
                if m2.op == "Mul" and other_operand(m2, y) is x:
                    return [m1, m2]
        elif m1.op == "Mul" and other_operand(m1, p) is x:  # (x·p)·½
            for m2 in uses.of(y):
                if _halves(m2, y):
                    return [m1, m2]
        elif m1.op == "Mul":  # (x·½)·p
            half = produced_by(other_operand(m1, p), "Mul", "Div")
            if half is not None and _halves(half, x):
                return [half, m1]
    return None


def _one_plus(uses: Uses, v: Value) -> Node | None:
    """A reader of ``v`` computing 1 + v."""
    return next((n for n in uses.of(v) if is_add(n) and is_scalar(other_operand(n, v), 1.0)),
                None)


class RecognizeGelu(RewritePass):
    name = "recognize_gelu"
    ensures = ("gelu_recognized",)

    def rewrite(self, graph: Graph, uses: Uses, node: Node, ctx: PassContext) -> bool:
        if node.op == "Erf":
            found, approximate = _erf_argument(node), "none"
        elif node.op == "Tanh":
            found, approximate = _tanh_argument(node), "tanh"
        else:
            return False
        if found is None:
            return False
        x, argument = found
        plus = _one_plus(uses, node.outputs[0])
        if plus is None:
            return False
        product = _product(uses, plus.outputs[0], x)
        if product is None or not x.dtype.is_float:
            return False
        nodes = [*argument, node, plus, *product]
        result = product[-1]
        why = outside_reader(uses, nodes, result)
        if why is None and any(n.outputs[0].shape != x.shape for n in nodes):
            why = "a constant broadcasts the result beyond the input's shape"
        if why is not None:
            refuse(ctx, f"{self.name}: kept {node.op} {node.name!r}: {why}")
            return False
        nodes.sort(key=graph.nodes.index)
        gelu = replace(graph, "Gelu", [x], {"approximate": approximate}, nodes, result)
        ctx.note(f"{self.name}: {len(nodes)} layers around {node.name!r} -> Gelu "
                 f"{gelu.name!r} (approximate={approximate!r})")
        return True
