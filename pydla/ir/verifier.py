"""IR verifier: structural invariants every pass must keep (run between passes in tests)."""

from __future__ import annotations

from pydla.errors import PydlaError
from pydla.ir.graph import Graph


class IRVerificationError(PydlaError):
    pass


def verify(graph: Graph) -> None:
    """Raise IRVerificationError naming the first broken invariant."""
    defined: set[int] = {id(v) for v in graph.inputs}
    names: set[str] = set()
    for v in graph.inputs:
        if v.is_const or v.producer is not None:
            raise IRVerificationError(f"graph input {v.name!r} is constant or produced")
    for node in graph.nodes:
        if node.name in names:
            raise IRVerificationError(f"duplicate node name {node.name!r}")
        names.add(node.name)
        for v in node.inputs:
            if v is None:
                continue
            if not v.is_const and id(v) not in defined:
                raise IRVerificationError(
                    f"node {node.name!r} ({node.op}) reads {v.name!r} before it is defined")
        for out in node.outputs:
            if out.is_const:
                raise IRVerificationError(f"node {node.name!r} writes constant {out.name!r}")
            if out.producer is not node:
                raise IRVerificationError(f"{out.name!r} does not name {node.name!r} as producer")
            if id(out) in defined:
                raise IRVerificationError(f"{out.name!r} is defined twice")
            if any(d < 0 for d in out.shape):
                raise IRVerificationError(f"{out.name!r} has a negative dimension {out.shape}")
            defined.add(id(out))
    for v in graph.outputs:
        if not v.is_const and id(v) not in defined:
            raise IRVerificationError(f"graph output {v.name!r} is never produced")
