"""Importer helpers shared by the op families."""

from __future__ import annotations

from collections.abc import Sequence

from pydla.frontend.onnx.importer import ImportContext, OnnxNode
from pydla.frontend.onnx.registry import onnx_op
from pydla.ir import Value


def passthrough(*op_types: str, since: int = 1) -> None:
    """Register ops whose canonical form is the ONNX node itself (attributes with defaults)."""

    def import_same(ctx: ImportContext, node: OnnxNode) -> Sequence[Value | None]:
        return ctx.emit(node.op_type, node.inputs, node.attrs_with_defaults())

    onnx_op(*op_types, since=since)(import_same)


def int_list(ctx: ImportContext, v: Value | None, what: str) -> list[int]:
    """A constant 1-D integer input (shape, axes, pads, …) as a Python list."""
    return [int(x) for x in ctx.const_value(v, what).reshape(-1)]
