"""Shuffle simplification: Transpose∘Transpose becomes one Transpose (none if the composed
permutation is the identity); chains of Reshape/Flatten/Squeeze/Unsqueeze become one
Reshape (none if it restores the shape); a Transpose that only moves size-1 axes keeps the
element order, so it is a Reshape and joins those chains. Together these make
reshape/transpose pairs that restore their input disappear.
"""

from __future__ import annotations

from pydla.ir import Graph, Node, Value
from pydla.passes.base import PassContext
from pydla.passes.patterns import RewritePass, produced_by
from pydla.passes.rewrite import Uses, forward, merge_provenance

# Ops that reinterpret the same row-major elements under another shape.
RESHAPES = ("Reshape", "Flatten", "Squeeze", "Unsqueeze")


def keeps_order(perm: list[int], shape: tuple[int, ...]) -> bool:
    """Whether transposing ``shape`` by ``perm`` leaves the elements in row-major order."""
    moved = [p for p in perm if shape[p] != 1]
    return moved == sorted(moved)


class CancelTransposes(RewritePass):
    name = "cancel_transposes"
    ensures = ("shuffles_simplified",)

    def rewrite(self, graph: Graph, uses: Uses, node: Node, ctx: PassContext) -> bool:
        if len(node.inputs) != 1 or node.inputs[0] is None or len(node.outputs) != 1:
            return False
        x = node.inputs[0]
        if node.op == "Transpose":
            perm = [int(p) for p in node.attrs["perm"]]
            if keeps_order(perm, x.shape):
                self._to_reshape(node, ctx, "moves only size-1 axes")
                return True
            inner = produced_by(x, "Transpose")
            if inner is not None:
                return self._compose_transposes(graph, uses, inner, node, ctx)
        if node.op in RESHAPES:
            inner = produced_by(x, *RESHAPES)
            if inner is not None:
                return self._merge_reshapes(graph, uses, inner, node, ctx)
            if node.outputs[0].shape == x.shape and forward(graph, node.outputs[0], x):
                graph.nodes.remove(node)
                ctx.note(f"{self.name}: removed {node.op} {node.name!r}, which keeps the shape")
                return True
        return False

    def _to_reshape(self, node: Node, ctx: PassContext, why: str) -> None:
        node.op = "Reshape"
        node.attrs = {"shape": list(node.outputs[0].shape)}
        ctx.note(f"{self.name}: Transpose {node.name!r} {why}; it is a Reshape")

    def _compose_transposes(self, graph: Graph, uses: Uses, inner: Node, outer: Node,
                            ctx: PassContext) -> bool:
        first = [int(p) for p in inner.attrs["perm"]]
        perm = [first[int(p)] for p in outer.attrs["perm"]]
        x = inner.inputs[0]
        assert x is not None
        self._bypass(graph, uses, inner, outer, x)
        outer.attrs = {**outer.attrs, "perm": perm}
        what = "cancel out" if perm == sorted(perm) else f"compose to perm {perm}"
        ctx.note(f"{self.name}: Transposes {inner.name!r} and {outer.name!r} {what}")
        if perm == sorted(perm) and forward(graph, outer.outputs[0], x):
            graph.nodes.remove(outer)
        return True

    def _merge_reshapes(self, graph: Graph, uses: Uses, inner: Node, outer: Node,
                        ctx: PassContext) -> bool:
        x = inner.inputs[0]
        assert x is not None
        self._bypass(graph, uses, inner, outer, x)
        outer.op = "Reshape"
        outer.attrs = {"shape": list(outer.outputs[0].shape)}
        restores = outer.outputs[0].shape == x.shape
        ctx.note(f"{self.name}: {inner.op} {inner.name!r} and {outer.name!r} merged into one "
                 f"Reshape{' that restores the shape' if restores else ''}")
        if restores and forward(graph, outer.outputs[0], x):
            graph.nodes.remove(outer)
        return True

    @staticmethod
    def _bypass(graph: Graph, uses: Uses, inner: Node, outer: Node, x: Value) -> None:
        """Make ``outer`` read ``inner``'s input; drop ``inner`` if nothing else reads it."""
        sole = uses.only_user(inner.outputs[0]) is outer
        outer.inputs = [x]
        if sole:
            graph.nodes.remove(inner)
            merge_provenance(outer, inner)
