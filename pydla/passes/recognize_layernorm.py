"""LayerNorm written with primitive ops → one LayerNormalization layer.

The pattern exporters emit (PyTorch's decomposition, older TF/Keras exports):

    mean = ReduceMean(x, trailing axes)      d = x − mean
    var  = ReduceMean(Pow(d, 2) or d·d)      std = Sqrt(var + ε)
    y    = d / std  or  d · Reciprocal(std)  or  d · Pow(var + ε, −0.5)
    [y · γ] [+ β]

It is recognised only when the reductions cover the trailing axes (what LayerNormalization
normalises) and no intermediate is read elsewhere.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pydla.dtypes import to_storage
from pydla.ir import Graph, Node, Value
from pydla.passes.base import PassContext
from pydla.passes.patterns import (
    ADD,
    RewritePass,
    is_scalar,
    other_operand,
    outside_reader,
    produced_by,
    refuse,
    replace,
    split_const,
)
from pydla.passes.rewrite import Uses, const_scalar


@dataclass
class _Core:
    """The normalisation up to ``d / std``: its input, reduced axes, ε and nodes."""

    x: Value
    axes: list[int]
    eps: float
    nodes: list[Node]


def _inverse_std(v: Value | None) -> tuple[Value, list[Node]] | None:
    """``v`` = 1/√(var+ε) as Reciprocal(Sqrt(·)) or Pow(·, −0.5): (var+ε, nodes)."""
    pw = produced_by(v, "Pow")
    if pw is not None and is_scalar(pw.inputs[1], -0.5) and pw.inputs[0] is not None:
        return pw.inputs[0], [pw]
    rc = produced_by(v, "Reciprocal")
    sq = produced_by(rc.inputs[0], "Sqrt") if rc is not None else None
    if rc is None or sq is None or sq.inputs[0] is None:
        return None
    return sq.inputs[0], [sq, rc]


def _divisor(norm: Node) -> tuple[Value, Value, list[Node]] | None:
    """(d, var+ε, nodes between them) for the node that divides d by the deviation."""
    if norm.op == "Div":
        d, std = norm.inputs
        sq = produced_by(std, "Sqrt")
        if d is None or sq is None or sq.inputs[0] is None:
            return None
        return d, sq.inputs[0], [sq]
    if norm.op == "Mul" and len(norm.inputs) == 2:
        for d, r in (norm.inputs, norm.inputs[::-1]):
            inv = _inverse_std(r)
            if d is not None and inv is not None and produced_by(d, "Sub") is not None:
                return d, inv[0], inv[1]
    return None


def _match_core(norm: Node) -> _Core | None:
    found = _divisor(norm)
    if found is None:
        return None
    d, var_eps, between = found
    sub = produced_by(d, "Sub")
    add = produced_by(var_eps, *ADD)
    if sub is None or add is None:
        return None
    x, mean = sub.inputs
    rm1 = produced_by(mean, "ReduceMean")
    pair = split_const(add)
    rm2 = produced_by(pair[1], "ReduceMean") if pair is not None else None
    if x is None or rm1 is None or rm1.inputs[0] is not x or pair is None or rm2 is None:
        return None
    eps = const_scalar(pair[0])
    square = produced_by(rm2.inputs[0], "Pow", "Mul")
    if eps is None or square is None:
        return None
    if square.op == "Pow" and not (square.inputs[0] is d and is_scalar(square.inputs[1], 2.0)):
        return None
    if square.op == "Mul" and not (square.inputs[0] is d and square.inputs[1] is d):
        return None
    if rm1.attrs.get("axes") != rm2.attrs.get("axes") or not rm1.attrs.get("keepdims", 1) \
            or not rm2.attrs.get("keepdims", 1):
        return None
    nodes = [rm1, sub, square, rm2, add, *between, norm]
    return _Core(x, [int(a) for a in rm1.attrs["axes"]], eps, nodes)


def _affine(c: Value, x: Value, axis: int) -> np.ndarray | None:
    """A constant γ/β as an array of the normalised shape, if it varies along those axes only."""
    assert c.const is not None
    rank = len(x.shape)
    if c.const.ndim > rank:
        return None
    shape = (1,) * (rank - c.const.ndim) + c.const.shape
    if any(d != 1 for d in shape[:axis]):
        return None
    try:
        full = np.broadcast_to(c.const.reshape(shape[axis:]), x.shape[axis:])
    except ValueError:
        return None
    return np.ascontiguousarray(full)


class RecognizeLayerNorm(RewritePass):
    name = "recognize_layernorm"
    ensures = ("layernorm_recognized",)

    def rewrite(self, graph: Graph, uses: Uses, node: Node, ctx: PassContext) -> bool:
        if node.op not in ("Div", "Mul"):
            return False
        core = _match_core(node)
        if core is None:
            return False
        x = core.x
        rank = len(x.shape)
        axis = core.axes[0] if core.axes else rank
        if axis == rank or core.axes != list(range(axis, rank)) or not x.dtype.is_float:
            refuse(ctx, f"{self.name}: kept {node.name!r}: it normalises axes {core.axes} of a "
                        f"rank-{rank} {x.dtype.short} tensor; LayerNormalization needs "
                        "trailing axes of a float tensor")
            return False
        nodes = list(core.nodes)
        gamma = self._absorb(uses, nodes, ("Mul",), x, axis)
        beta = self._absorb(uses, nodes, ADD, x, axis)
        result = nodes[-1]
        why = outside_reader(uses, nodes, result)
        if why is not None:
            refuse(ctx, f"{self.name}: kept {node.name!r}: {why}")
            return False
        norm_shape = tuple(x.shape[axis:])
        if gamma is None:  # LayerNormalization's scale is required: γ = 1
            gamma = to_storage(np.ones(norm_shape, np.float32), x.dtype)
        scale = Value(graph.unique_name(f"{result.name}_gamma"), norm_shape, x.dtype, const=gamma)
        bias = None if beta is None else Value(
            graph.unique_name(f"{result.name}_beta"), norm_shape, x.dtype, const=beta)
        ln = replace(graph, "LayerNormalization", [x, scale, bias],
                     {"axis": axis, "epsilon": core.eps}, nodes, result)
        ctx.note(f"{self.name}: {len(nodes)} layers from {nodes[0].name!r} -> "
                 f"LayerNormalization {ln.name!r} (axis {axis}, epsilon {core.eps:g})")
        return True

    @staticmethod
    def _absorb(uses: Uses, nodes: list[Node], ops: tuple[str, ...], x: Value,
                axis: int) -> np.ndarray | None:
        """Append the γ Mul (or β Add) that follows the match; its parameter, normalised."""
        last = nodes[-1].outputs[0]
        nxt = uses.only_user(last)
        if nxt is None or nxt.op not in ops or nxt.outputs[0].shape != x.shape:
            return None
        c = other_operand(nxt, last)
        if c is None or not c.is_const or c.dtype != x.dtype:
            return None
        param = _affine(c, x, axis)
        if param is not None:
            nodes.append(nxt)
        return param
