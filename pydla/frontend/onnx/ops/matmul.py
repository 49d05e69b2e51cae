"""Importers of the matrix products: MatMul, Gemm, Einsum (MatMulInteger: quantize.py)."""

from __future__ import annotations

from pydla.frontend.onnx.importer import ImportContext, OnnxNode
from pydla.frontend.onnx.registry import onnx_op
from pydla.ir import Value


def _operands(ctx: ImportContext, node: OnnxNode) -> tuple[Value, Value]:
    a, b = node.input(0), node.input(1)
    if a is None or b is None:
        raise ctx.error("A and B are required")
    if len(a.shape) == 0 or len(b.shape) == 0:
        raise ctx.error(f"A {a.shape} and B {b.shape} must have rank 1 or more")
    return a, b


@onnx_op("MatMul")
def import_matmul(ctx: ImportContext, node: OnnxNode) -> list[Value]:
    return ctx.emit("MatMul", list(_operands(ctx, node)))


@onnx_op("Gemm")
def import_gemm(ctx: ImportContext, node: OnnxNode) -> list[Value]:
    a, b = _operands(ctx, node)
    if len(a.shape) != 2 or len(b.shape) != 2:
        raise ctx.error(f"A {a.shape} and B {b.shape} must be matrices")
    attrs = node.attrs_with_defaults()
    canonical = {"alpha": float(attrs.get("alpha", 1.0)), "beta": float(attrs.get("beta", 1.0)),
                 "transA": int(attrs.get("transA", 0)), "transB": int(attrs.get("transB", 0))}
    m = a.shape[1] if canonical["transA"] else a.shape[0]
    n = b.shape[0] if canonical["transB"] else b.shape[1]
    return ctx.emit("Gemm", [a, b, node.input(2)], canonical, out_types=[((m, n), a.dtype)])


@onnx_op("Einsum", since=12)
def import_einsum(ctx: ImportContext, node: OnnxNode) -> list[Value]:
    equation = str(node.attr("equation", "")).replace(" ", "")
    if not equation:
        raise ctx.error("equation is required")
    return ctx.emit("Einsum", node.inputs, {"equation": equation})
