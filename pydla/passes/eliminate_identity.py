"""Remove layers that return their input unchanged (Identity, same-shape Reshape,
identity Transpose, same-type Cast, no-op Pad/Slice/Expand, one-input Concat…)."""

from __future__ import annotations

import numpy as np

from pydla.ir import Graph, Node
from pydla.passes.base import Pass, PassContext
from pydla.passes.rewrite import forward

_RESHAPES = {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Expand", "Identity", "Dropout"}


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
            if is_noop(node) and forward(graph, node.outputs[0], node.inputs[0]):  # type: ignore[arg-type]
                graph.nodes.remove(node)
                ctx.note(f"eliminate_identity: removed {node.op} {node.name!r}")
                changed = True
        return changed


def _slice_is_identity(node: Node) -> bool:
    steps = node.attrs.get("steps")
    return steps is None or all(int(s) == 1 for s in np.atleast_1d(steps))
