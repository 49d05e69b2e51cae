"""Evaluate layers whose inputs are all constant, within a size limit."""

from __future__ import annotations

import numpy as np

from pydla.backends.base import LayerSpec, TensorSpec
from pydla.backends.cpu.backend import bind_layer
from pydla.ir import Graph, Value
from pydla.passes.base import Pass, PassContext
from pydla.passes.rewrite import forward


class FoldConstants(Pass):
    name = "fold_constants"
    ensures = ("constants_folded",)

    def run(self, graph: Graph, ctx: PassContext) -> bool:
        changed = False
        for node in list(graph.nodes):
            if not all(v is None or v.is_const for v in node.inputs):
                continue
            size = sum(v.nbytes for v in node.outputs)
            if size > ctx.fold_limit_bytes:
                ctx.note(f"fold_constants: kept {node.name!r}: its {size} bytes exceed the "
                         f"limit {ctx.fold_limit_bytes}")
                continue
            spec = LayerSpec(node.name, node.op, node.attrs,
                             tuple(None if v is None else TensorSpec(v.shape, v.dtype)
                                   for v in node.inputs),
                             tuple(TensorSpec(v.shape, v.dtype) for v in node.outputs))
            outs = [np.empty(v.shape, v.dtype.np) for v in node.outputs]
            bind_layer(spec)([None if v is None else v.const for v in node.inputs], outs)
            folded = [Value(graph.unique_name(v.name), v.shape, v.dtype, const=a)
                      for v, a in zip(node.outputs, outs)]
            if all(forward(graph, old, new) or not _used(graph, old)
                   for old, new in zip(node.outputs, folded)):
                graph.nodes.remove(node)
                ctx.note(f"fold_constants: evaluated {node.op} {node.name!r} at build time")
                changed = True
        return changed


def _used(graph: Graph, v: Value) -> bool:
    return any(o is v for o in graph.outputs) or any(
        x is v for n in graph.nodes for x in n.inputs)
