"""Softmax written with primitive ops → Softmax; Log of a Softmax → LogSoftmax.

    e = Exp(x − ReduceMax(x, axes))   (or Exp(x): the layer subtracts the max itself, which
    y = e / ReduceSum(e, axes)         only changes results where Exp(x) would overflow)

The axes must be one contiguous run, the canonical ``axes`` of Softmax.
"""

from __future__ import annotations

from pydla.ir import Graph, Node, Value
from pydla.passes.base import PassContext
from pydla.passes.patterns import RewritePass, outside_reader, produced_by, refuse, replace
from pydla.passes.rewrite import Uses


def _reduced_axes(node: Node) -> list[int] | None:
    """The axes of a keepdims reduction, if they form one contiguous run."""
    axes = [int(a) for a in node.attrs.get("axes", [])]
    if not axes or not node.attrs.get("keepdims", 1) or axes != list(range(axes[0],
                                                                             axes[-1] + 1)):
        return None
    return axes


def _stabilised(v: Value, axes: list[int]) -> tuple[Value, list[Node]]:
    """The softmax input behind ``v`` = x − ReduceMax(x, axes), or ``v`` itself."""
    sub = produced_by(v, "Sub")
    if sub is not None:
        x, m = sub.inputs
        mx = produced_by(m, "ReduceMax")
        if x is not None and mx is not None and mx.inputs[0] is x \
                and _reduced_axes(mx) == axes:
            return x, [mx, sub]
    return v, []


class RecognizeSoftmax(RewritePass):
    name = "recognize_softmax"
    ensures = ("softmax_recognized",)

    def rewrite(self, graph: Graph, uses: Uses, node: Node, ctx: PassContext) -> bool:
        if node.op == "Div":
            return self._softmax(graph, uses, node, ctx)
        if node.op == "Log":
            return self._log_softmax(graph, uses, node, ctx)
        return False

    def _softmax(self, graph: Graph, uses: Uses, div: Node, ctx: PassContext) -> bool:
        e, s = div.inputs
        exp = produced_by(e, "Exp")
        total = produced_by(s, "ReduceSum")
        if exp is None or total is None or total.inputs[0] is not e or exp.inputs[0] is None:
            return False
        axes = _reduced_axes(total)
        if axes is None or not exp.inputs[0].dtype.is_float:
            refuse(ctx, f"{self.name}: kept {div.name!r}: ReduceSum {total.name!r} must keep "
                        "its dims and reduce one contiguous run of axes of a float tensor")
            return False
        x, head = _stabilised(exp.inputs[0], axes)
        nodes = [*head, exp, total, div]
        why = outside_reader(uses, nodes, div)
        if why is None and div.outputs[0].shape != x.shape:
            why = f"the quotient {div.outputs[0].shape} is broadcast beyond the input {x.shape}"
        if why is not None:
            refuse(ctx, f"{self.name}: kept {div.name!r}: {why}")
            return False
        sm = replace(graph, "Softmax", [x], {"axes": axes}, nodes, div)
        ctx.note(f"{self.name}: {len(nodes)} layers ending in {div.name!r} -> Softmax "
                 f"{sm.name!r} over axes {axes}")
        return True

    def _log_softmax(self, graph: Graph, uses: Uses, log: Node, ctx: PassContext) -> bool:
        sm = produced_by(log.inputs[0], "Softmax")
        if sm is None or uses.only_user(sm.outputs[0]) is not log:
            return False
        lsm = replace(graph, "LogSoftmax", list(sm.inputs), dict(sm.attrs), [sm, log], log)
        ctx.note(f"{self.name}: Softmax {sm.name!r} + Log {log.name!r} -> LogSoftmax "
                 f"{lsm.name!r}")
        return True
