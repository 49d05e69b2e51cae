"""Evaluate layers whose inputs are all constant, within a size limit."""

from __future__ import annotations

import numpy as np

from pydla.backends.cpu.backend import bind_layer
from pydla.engine.memory import tensor_bytes
from pydla.ir import Graph, Value
from pydla.passes.base import Pass, PassContext
from pydla.passes.rewrite import forward
from pydla.plan.tactics import layer_spec


class FoldConstants(Pass):
    name = "fold_constants"
    ensures = ("constants_folded",)

    def run(self, graph: Graph, ctx: PassContext) -> bool:
        changed = False
        outputs = {id(v) for v in graph.outputs}
        for node in list(graph.nodes):
            # A graph output must stay a tensor some layer writes (its name is the user's).
            # A Loop of constants stays a layer: only the program holding its body runs it
            # (pydla.backends.cpu.loop); the importer unrolls the loops small enough to fold.
            if (not all(v is None or v.is_const for v in node.inputs)
                    or any(id(v) in outputs for v in node.outputs) or node.op == "Loop"):
                continue
            # Checked before computing, in Python ints (an int64 product of a hostile
            # shape wraps around to a small number).
            size = sum(tensor_bytes(v.shape, v.dtype.itemsize) for v in node.outputs)
            if size > ctx.fold_limit_bytes:
                ctx.note(f"fold_constants: kept {node.name!r}: its {size} bytes exceed the "
                         f"limit {ctx.fold_limit_bytes}")
                continue
            spec = layer_spec(node)
            outs = [np.empty(v.shape, v.dtype.np) for v in node.outputs]
            bind_layer(spec)([None if v is None else v.const for v in node.inputs], outs)
            folded = [Value(graph.unique_name(v.name), v.shape, v.dtype, const=a)
                      for v, a in zip(node.outputs, outs)]
            for old, new in zip(node.outputs, folded):
                forward(graph, old, new)
            graph.nodes.remove(node)
            ctx.note(f"fold_constants: evaluated {node.op} {node.name!r} at build time")
            changed = True
        return changed
