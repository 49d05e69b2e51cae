"""Remove layers that return their input unchanged (Identity, same-shape Reshape,
identity Transpose, same-type Cast, no-op Pad/Slice/Expand, one-input Concat, Mul/Div by a
constant 1, Add/Sub of a constant 0…)."""

from __future__ import annotations

import numpy as np

from pydla.ir import Graph, Node, Value
from pydla.passes.base import Pass, PassContext
from pydla.passes.rewrite import forward

_RESHAPES = {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Expand", "Identity", "Dropout"}
# Binary ops that return one operand when the other is this constant everywhere; the bool
# says whether the constant may come first (x * 1 == 1 * x, but 0 - x != x).
_NEUTRAL = {"Mul": (1, True), "Div": (1, False), "Add": (0, True), "Sub": (0, False)}


def passthrough(node: Node) -> Value | None:
    """The input a no-op layer returns unchanged, or None when the layer does work."""
    if node.op in _NEUTRAL:
        return _neutral_operand(node)
    return node.inputs[0] if is_noop(node) else None


def _neutral_operand(node: Node) -> Value | None:
    if len(node.inputs) != 2 or len(node.outputs) != 1 or None in node.inputs:
        return None
    neutral, commutes = _NEUTRAL[node.op]
    y = node.outputs[0]
    pairs = [(node.inputs[0], node.inputs[1])]
    if commutes:
        pairs.append((node.inputs[1], node.inputs[0]))
    for x, c in pairs:
        # Float constants only: integer Div by 1 is exact too, but x and y must match in
        # shape and dtype, so broadcasting never hides in a removed layer.
        if (x is not None and c is not None and c.const is not None and x.shape == y.shape
                and x.dtype == y.dtype and c.dtype == y.dtype and bool(np.all(c.const == neutral))):
            return x
    return None


def is_noop(node: Node) -> bool:
    if len(node.outputs) != 1 or not node.inputs or node.inputs[0] is None:
        return False
    x, y = node.inputs[0], node.outputs[0]
    if x.shape != y.shape or x.dtype != y.dtype:
        return False
    if node.op in _RESHAPES or node.op == "Cast" or node.op == "CastLike":
        return True
    if node.op == "Concat":
        return sum(v is not None for v in node.inputs) == 1
    if node.op == "Transpose":
        perm = node.attrs.get("perm")
        return perm is None and len(x.shape) <= 1 or perm == list(range(len(x.shape)))
    if node.op == "Pad":
        return not any(node.attrs.get("pads", [1]))
    if node.op == "Slice":
        return True  # same shape: every slice takes the whole axis with step 1 (or reverses)
    if node.op == "Split":
        return True
    return False


class EliminateIdentity(Pass):
    name = "eliminate_identity"
    ensures = ("no_identity",)

    def run(self, graph: Graph, ctx: PassContext) -> bool:
        changed = False
        for node in list(graph.nodes):
            if node.op == "Slice" and not _slice_is_identity(node):
                continue
            x = passthrough(node)
            if x is not None and forward(graph, node.outputs[0], x):
                graph.nodes.remove(node)
                ctx.note(f"eliminate_identity: removed {node.op} {node.name!r}")
                changed = True
        return changed


def _slice_is_identity(node: Node) -> bool:
    steps = node.attrs.get("steps")
    return steps is None or all(int(s) == 1 for s in np.atleast_1d(steps))
