"""Explicit registry of ONNX op importers, keyed by op type and the opset they start at."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pydla.frontend.onnx.importer import ImportContext, OnnxNode
    from pydla.ir import Value

ImporterFn = Callable[["ImportContext", "OnnxNode"], Sequence["Value | None"]]

IMPORTERS: dict[str, list[tuple[int, ImporterFn]]] = {}


def onnx_op(*op_types: str, since: int = 1) -> Callable[[ImporterFn], ImporterFn]:
    """Register an importer for ``op_types`` from opset ``since`` on (until a later one)."""

    def register(fn: ImporterFn) -> ImporterFn:
        for op in op_types:
            entries = IMPORTERS.setdefault(op, [])
            if any(s == since for s, _ in entries):
                raise RuntimeError(f"importer for {op} since opset {since} registered twice")
            entries.append((since, fn))
            entries.sort(key=lambda e: e[0])
        return fn

    return register


def find_importer(op_type: str, opset: int) -> ImporterFn | None:
    best = None
    for since, fn in IMPORTERS.get(op_type, []):
        if since <= opset:
            best = fn
    return best
