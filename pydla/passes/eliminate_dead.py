"""Drop layers whose results nobody reads."""

from pydla.ir import Graph
from pydla.passes.base import Pass, PassContext


class EliminateDead(Pass):
    name = "eliminate_dead"
    ensures = ("no_dead_nodes",)

    def run(self, graph: Graph, ctx: PassContext) -> bool:
        before = len(graph.nodes)
        changed = graph.remove_dead()
        if changed:
            ctx.note(f"eliminate_dead: removed {before - len(graph.nodes)} unused layers")
        return changed
