"""Shared pieces of the pattern passes: match, check, rewrite.

Matchers walk producers backwards from an anchor (a value has one producer, so the walk
never branches) and forwards only through sole readers. ``outside_reader`` is the check every
fusion needs: an intermediate that something outside the match still reads would lose its
producer. Refusals are logged once, with the reason, so ``--verbose`` says why a pattern that
looked right was left alone.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from pydla.ir import Graph, Node, Value
from pydla.passes.base import Pass, PassContext
from pydla.passes.rewrite import Uses, const_scalar, merge_provenance, place_at

# Two-input Sum is an Add (ONNX's own function bodies, e.g. Gelu's, write Sum).
ADD = ("Add", "Sum")


def is_add(node: Node | None) -> bool:
    return node is not None and node.op in ADD and len(node.inputs) == 2


def produced_by(v: Value | None, *ops: str) -> Node | None:
    """The node computing ``v`` if it is one of ``ops`` (never for constants or inputs)."""
    if v is None or v.producer is None or v.producer.op not in ops:
        return None
    if len(v.producer.outputs) != 1 or "epilogue" in v.producer.attrs:
        return None
    return v.producer


def split_const(node: Node) -> tuple[Value, Value] | None:
    """(constant, other) operands of a binary node with exactly one constant operand."""
    if len(node.inputs) != 2 or any(v is None for v in node.inputs):
        return None
    a, b = node.inputs
    assert a is not None and b is not None
    if a.is_const != b.is_const:
        return (a, b) if a.is_const else (b, a)
    return None


def is_scalar(v: Value | None, target: float, rtol: float = 1e-4) -> bool:
    """``v`` is a one-element constant close to ``target`` (exporters round constants)."""
    got = const_scalar(v)
    return got is not None and math.isclose(got, target, rel_tol=rtol)


def scaled_by(node: Node | None, x: Value, factor: float) -> bool:
    """``node`` computes x·factor, written as Mul by the factor or Div by its inverse."""
    if node is None:
        return False
    if node.op == "Mul":
        pair = split_const(node)
        return pair is not None and pair[1] is x and is_scalar(pair[0], factor)
    if node.op == "Div":
        return node.inputs[0] is x and is_scalar(node.inputs[1], 1.0 / factor)
    return False


def other_operand(node: Node, v: Value) -> Value | None:
    """The operand of binary ``node`` that is not ``v`` (None if ``v`` is not read once)."""
    if len(node.inputs) != 2 or sum(x is v for x in node.inputs) != 1:
        return None
    return node.inputs[1] if node.inputs[0] is v else node.inputs[0]


def outside_reader(uses: Uses, nodes: Iterable[Node], result: Node) -> str | None:
    """Why the match cannot be replaced: an intermediate read outside it, or a graph output."""
    inside = {id(n) for n in nodes}
    for n in nodes:
        if n is result:
            continue
        for v in n.outputs:
            if id(v) in uses.outputs:
                return f"intermediate {v.name!r} is a graph output"
            other = [r for r in uses.of(v) if id(r) not in inside]
            if other:
                return f"intermediate {v.name!r} is also read by {other[0].op} {other[0].name!r}"
    return None


def refuse(ctx: PassContext, message: str) -> None:
    """Log a refusal once: passes rerun until nothing changes and would repeat it."""
    if message not in ctx.log:
        ctx.note(message)


def replace(graph: Graph, op: str, inputs: list[Value | None], attrs: dict,
            nodes: list[Node], result: Node) -> Node:
    """Replace ``nodes`` by one ``op`` layer writing ``result``'s output, at its position."""
    node = Node(op, graph.unique_node_name(result.name), inputs, [result.outputs[0]], attrs)
    node.fused_from = []
    merge_provenance(node, *nodes)
    place_at(graph, node, result, nodes)
    return node


class RewritePass(Pass):
    """A pass that tries ``rewrite`` on each node, restarting after every change (consumer
    lists go stale after a rewrite) until a sweep changes nothing."""

    def run(self, graph: Graph, ctx: PassContext) -> bool:
        changed = False
        while self._sweep(graph, ctx):
            changed = True
        return changed

    def _sweep(self, graph: Graph, ctx: PassContext) -> bool:
        uses = Uses(graph)
        return any(self.rewrite(graph, uses, node, ctx) for node in list(graph.nodes))

    def rewrite(self, graph: Graph, uses: Uses, node: Node, ctx: PassContext) -> bool:
        raise NotImplementedError(f"{type(self).__name__}.rewrite")
