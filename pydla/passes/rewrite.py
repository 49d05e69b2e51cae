"""Small graph-rewriting helpers the passes share."""

from __future__ import annotations

from pydla.ir import Graph, Node, Value


class Uses:
    """Consumers of every value, computed once per pass run."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.by_value = graph.consumers()
        self.outputs = {id(v) for v in graph.outputs}
        self.inputs = {id(v) for v in graph.inputs}

    def of(self, v: Value) -> list[Node]:
        return self.by_value.get(id(v), [])

    def only_user(self, v: Value) -> Node | None:
        """The single node reading ``v``, if ``v`` is not also a graph output."""
        users = self.of(v)
        if len(users) != 1 or id(v) in self.outputs:
            return None
        if sum(1 for x in users[0].inputs if x is v) != 1:
            return None
        return users[0]


def forward(graph: Graph, old: Value, new: Value) -> bool:
    """Make every reader of ``old`` read ``new`` (Graph.replace_uses: a graph output keeps
    its name; False means nothing changed and ``old``'s producer must stay)."""
    return graph.replace_uses(old, new)


def const_scalar(v: Value | None) -> float | None:
    """The value of a constant that holds a single number (any shape of size 1)."""
    if v is None or v.const is None or v.const.size != 1:
        return None
    return float(v.const.reshape(-1)[0])


def merge_provenance(target: Node, *sources: Node) -> None:
    seen = list(target.fused_from)
    for s in sources:
        seen += [n for n in s.fused_from if n not in seen]
    target.fused_from = seen


def place_at(graph: Graph, node: Node, position_of: Node, remove: list[Node]) -> None:
    """Put ``node`` where ``position_of`` is and drop ``remove`` from the graph."""
    drop = {id(n) for n in remove}
    out: list[Node] = []
    for n in graph.nodes:
        if n is position_of:
            out.append(node)
        elif id(n) not in drop and n is not node:
            out.append(n)
    graph.nodes = out
