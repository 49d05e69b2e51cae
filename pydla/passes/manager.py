"""Runs passes in order, repeating the whole list until none changes the graph."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from pydla.errors import BuildError
from pydla.ir import Graph, verify
from pydla.passes.base import Pass, PassContext


class PassManager:
    def __init__(self, passes: Sequence[Pass], *, opt_level: int = 3,
                 disabled: Iterable[str] = (), verify_each: bool = False,
                 max_rounds: int = 20) -> None:
        known = {p.name for p in passes}
        unknown = set(disabled) - known
        if unknown:
            raise BuildError(f"unknown passes {sorted(unknown)}; passes: {sorted(known)}")
        self.passes = [p for p in passes if p.name not in set(disabled)
                       and p.min_level <= opt_level]
        self.verify_each = verify_each
        self.max_rounds = max_rounds

    def run(self, graph: Graph, ctx: PassContext) -> Graph:
        established: set[str] = set()
        for _ in range(self.max_rounds):
            changed = False
            for p in self.passes:
                missing = set(p.requires) - established
                if missing:
                    raise BuildError(f"pass {p.name} requires {sorted(missing)}, which no "
                                     "earlier pass ensures")
                if p.run(graph, ctx):
                    changed = True
                established.update(p.ensures)
                if self.verify_each:
                    verify(graph)
            if not changed:
                return graph
        ctx.note(f"passes still changing the graph after {self.max_rounds} rounds; stopped")
        return graph
