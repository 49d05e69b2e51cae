"""Run data movement between a DequantizeLinear and a QuantizeLinear of the same
parameters on the int8 tensor itself: DQ(q) → MaxPool/Reshape/Transpose/Gather/… → Q
becomes the op on q, writing the Q's output (onnxruntime's QDQ transformer drops such pairs
too); a Split whose every output is read by such a Q alone writes all of them.

Exact: these ops only select, reorder or take the maximum of elements, quantization is
monotonic and Q(DQ(q)) = q for equal parameters. Runs before fold_qdq, so that a
convolution whose int8 output feeds such an op keeps its int8 output.
"""

from __future__ import annotations

import numpy as np

from pydla.dtypes import DType
from pydla.ir import Graph, Node, Value
from pydla.ops import POINTWISE
from pydla.passes.base import PassContext
from pydla.passes.patterns import RewritePass, produced_by
from pydla.passes.rewrite import Uses, merge_provenance, place_at

MOVES = frozenset({"MaxPool", "GlobalMaxPool", "Reshape", "Flatten", "Transpose", "Squeeze",
                   "Unsqueeze", "DepthToSpace", "SpaceToDepth", "Slice", "Gather", "Split"})


# Moves that commute with any elementwise function: they only place elements elsewhere.
SHUFFLES = frozenset({"Reshape", "Flatten", "Transpose", "Squeeze", "Unsqueeze",
                      "DepthToSpace", "SpaceToDepth"})


def _unary(node: Node | None) -> bool:
    """A float32 elementwise op of one tensor (its other operands one-element constants)."""
    return (node is not None and node.op in POINTWISE and len(node.outputs) == 1
            and "epilogue" not in node.attrs and node.inputs[0] is not None
            and node.outputs[0].dtype is DType.FLOAT32
            and node.inputs[0].dtype is DType.FLOAT32
            and node.outputs[0].shape == node.inputs[0].shape
            and all(v is None or (v.const is not None and v.size == 1)
                    for v in node.inputs[1:]))


def _hoist(graph: Graph, uses: Uses, node: Node, ctx: PassContext) -> bool:
    """DQ(q) → Relu/Clip/… → Transpose (a TensorFlow export's activation before its
    NHWC→NCHW Transpose, open_nsfw's 48) becomes Transpose(q) → DQ → Relu/…: the shuffle
    moves bytes instead of floats, and the DQ → Relu → Q left is one 8-bit layer for
    fold_qdq_pointwise. Exact: a shuffle commutes with elementwise functions; the DQ is
    per tensor."""
    chain: list[Node] = []
    v = node.inputs[0]
    while v is not None and _unary(v.producer) and uses.only_user(v) is \
            (chain[-1] if chain else node):
        chain.append(v.producer)  # type: ignore[arg-type]
        v = v.producer.inputs[0]  # type: ignore[union-attr]
    dq = produced_by(v, "DequantizeLinear")
    if not chain or dq is None or dq.inputs[0] is None or dq.inputs[1] is None or \
            dq.inputs[1].size != 1 or int(dq.attrs.get("block_size", 0)):
        return False
    out = node.outputs[0]
    moved_q = Value(graph.unique_name(f"{dq.inputs[0].name}_moved"), out.shape,
                    dq.inputs[0].dtype)
    moved = Node(node.op, graph.unique_node_name(node.name), [dq.inputs[0], *node.inputs[1:]],
                 [moved_q], dict(node.attrs))
    cur = Value(graph.unique_name(f"{moved_q.name}_dequantized"), out.shape, DType.FLOAT32)
    new = [moved, Node("DequantizeLinear", graph.unique_node_name(dq.name),
                       [moved_q, *dq.inputs[1:]], [cur], dict(dq.attrs))]
    for i, u in enumerate(reversed(chain)):
        last = i == len(chain) - 1
        nxt = out if last else Value(graph.unique_name(u.outputs[0].name), out.shape,
                                     DType.FLOAT32)
        new.append(Node(u.op, graph.unique_node_name(u.name), [cur, *u.inputs[1:]], [nxt],
                        dict(u.attrs), fused_from=list(u.fused_from)))
        cur = nxt
    moved.fused_from = list(node.fused_from)
    at = graph.nodes.index(node)
    drop = {id(n) for n in chain}
    graph.nodes[at:at + 1] = new
    graph.nodes = [n for n in graph.nodes if id(n) not in drop]
    ctx.note(f"fold_qdq_moves: {node.op} {node.name!r} moved above "
             f"{' + '.join(n.op for n in reversed(chain))} onto the 8-bit tensor "
             f"{dq.inputs[0].name!r}")
    return True


def _same_parameters(dq: Node, q: Node) -> bool:
    """Both per tensor, with equal constant scales and zero points (absent = 0)."""
    pairs = [(dq.inputs[1], q.inputs[1]), (dq.inputs[2] if len(dq.inputs) > 2 else None,
                                            q.inputs[2] if len(q.inputs) > 2 else None)]
    for i, (a, b) in enumerate(pairs):
        va = None if a is None else a.const
        vb = None if b is None else b.const
        if (a is not None and va is None) or (b is not None and vb is None):
            return False
        if i == 0 and (va is None or vb is None or va.size != 1 or vb.size != 1):
            return False
        za = np.zeros(1) if va is None else va.reshape(-1)
        zb = np.zeros(1) if vb is None else vb.reshape(-1)
        if za.size != 1 or zb.size != 1 or za[0] != zb[0]:
            return False
    return True


class FoldQDQMoves(RewritePass):
    name = "fold_qdq_moves"
    ensures = ("int8_data_movement",)

    def rewrite(self, graph: Graph, uses: Uses, node: Node, ctx: PassContext) -> bool:
        # Split: every output read by its own Q (an LSTM's gates, CRNN's 40 steps)
        if node.op not in MOVES or not node.outputs or not node.inputs or \
                (len(node.outputs) != 1 and node.op != "Split"):
            return False
        dq = produced_by(node.inputs[0], "DequantizeLinear")
        qs = [uses.only_user(v) for v in node.outputs]
        if dq is None:
            return node.op in SHUFFLES and _hoist(graph, uses, node, ctx)
        if int(dq.attrs.get("block_size", 0)) or dq.inputs[0] is None:
            return False
        source = dq.inputs[0]
        for q in qs:
            if q is None or q.op != "QuantizeLinear" or int(q.attrs.get("block_size", 0)) \
                    or source.dtype is not q.outputs[0].dtype or not _same_parameters(dq, q):
                return False
        moved = Node(node.op, graph.unique_node_name(node.name), [source, *node.inputs[1:]],
                     [q.outputs[0] for q in qs], dict(node.attrs))  # type: ignore[union-attr]
        moved.fused_from = []
        moved.precision = "int8"
        merge_provenance(moved, node, *qs)  # type: ignore[arg-type]
        order = {id(n): i for i, n in enumerate(graph.nodes)}
        first = min(qs, key=lambda n: order[id(n)])  # type: ignore[arg-type]
        place_at(graph, moved, first, [node, *qs])  # type: ignore[arg-type, list-item]
        ctx.note(f"fold_qdq_moves: {node.op} {node.name!r} runs on the int8 tensor "
                 f"{source.name!r}")
        return True
