"""The pass contract: what a pass requires and ensures, and whether it changed the graph."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pydla.ir import Graph


@dataclass
class PassContext:
    """Build-wide settings passes read, and the log of every decision they made."""

    fold_limit_bytes: int = 1 << 26
    verbose: bool = False
    log: list[str] = field(default_factory=list)
    echo: Callable[[str], None] | None = None
    # Facts the loadable records in its build section (``int8``: pydla.quantization's scales
    # and each layer's precision with the reason).
    records: dict[str, Any] = field(default_factory=dict)
    # The backend the build is for ("cpu", "cuda"): passes that make CPU-only layers
    # (fold_qdq_pointwise's QPointwise) leave other targets' graphs alone.
    target: str = "cpu"

    def note(self, message: str) -> None:
        self.log.append(message)
        if self.verbose and self.echo is not None:
            self.echo(message)


class Pass:
    """A graph rewrite. Subclasses set ``name``, ``requires``, ``ensures`` and ``run``.

    ``requires``: properties the input graph must have (names other passes ensure).
    ``ensures``: properties the output graph has when ``run`` returns.
    ``run`` returns True if it changed the graph.
    """

    name: str = ""
    requires: tuple[str, ...] = ()
    ensures: tuple[str, ...] = ()
    min_level: int = 1  # the lowest --builderOptimizationLevel that runs this pass

    def run(self, graph: Graph, ctx: PassContext) -> bool:
        raise NotImplementedError(f"{type(self).__name__}.run")
