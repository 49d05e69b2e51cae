"""Common-subexpression elimination: identical layers on identical inputs run once;
identical constants are stored once."""

from __future__ import annotations

import hashlib
import json

from pydla.ir import Graph, Value
from pydla.passes.base import Pass, PassContext
from pydla.passes.rewrite import forward


class EliminateCommonSubexpressions(Pass):
    name = "cse"
    ensures = ("no_common_subexpressions",)

    def run(self, graph: Graph, ctx: PassContext) -> bool:
        changed = self._merge_constants(graph)
        seen: dict[tuple, list[Value]] = {}
        for node in list(graph.nodes):
            key = (node.op, tuple(id(v) if v is not None else None for v in node.inputs),
                   json.dumps(node.attrs, sort_keys=True),
                   tuple((v.shape, v.dtype) for v in node.outputs))
            if key not in seen:
                seen[key] = node.outputs
                continue
            first = seen[key]
            if all(forward(graph, dup, keep) for dup, keep in zip(node.outputs, first)):
                graph.nodes.remove(node)
                ctx.note(f"cse: {node.name!r} repeats an earlier {node.op}; removed")
                changed = True
        return changed

    @staticmethod
    def _merge_constants(graph: Graph) -> bool:
        by_content: dict[tuple, Value] = {}
        replace: dict[int, Value] = {}
        for v in graph.constants():
            assert v.const is not None
            key = (v.dtype, v.shape, hashlib.sha256(v.const.tobytes()).digest())
            if key in by_content:
                replace[id(v)] = by_content[key]
            else:
                by_content[key] = v
        if not replace:
            return False
        for node in graph.nodes:
            node.inputs = [replace.get(id(v), v) if v is not None else None for v in node.inputs]
        return True
