"""MatMul + constant bias Add → Gemm, and 2-D Transposes folded into Gemm's transA/transB.

A Gemm carries its bias and both transposes in one layer (TensorRT's FullyConnected), and
fold_batchnorm can then fold a following per-channel scale into its weights.
"""

from __future__ import annotations

from pydla.ir import Graph, Node
from pydla.passes.base import PassContext
from pydla.passes.patterns import (
    RewritePass,
    is_add,
    other_operand,
    produced_by,
    refuse,
    replace,
)
from pydla.passes.rewrite import Uses, merge_provenance


class MatMulToGemm(RewritePass):
    name = "matmul_to_gemm"
    ensures = ("matmul_bias_is_gemm",)

    def rewrite(self, graph: Graph, uses: Uses, node: Node, ctx: PassContext) -> bool:
        if node.op == "MatMul":
            return self._bias_add(graph, uses, node, ctx)
        if node.op == "Gemm":
            return self._transposes(graph, uses, node, ctx)
        return False

    def _bias_add(self, graph: Graph, uses: Uses, mm: Node, ctx: PassContext) -> bool:
        a, b = mm.inputs[0], mm.inputs[1]
        y = mm.outputs[0]
        if a is None or b is None or len(a.shape) != 2 or len(b.shape) != 2:
            return False
        if not b.is_const or not y.dtype.is_float or "epilogue" in mm.attrs:
            return False
        add = uses.only_user(y)
        if add is None or not is_add(add):
            return False
        bias = other_operand(add, y)
        if bias is None or not bias.is_const:
            return False  # a runtime addend (residual) is fuse_epilogue's business
        if add.outputs[0].shape != y.shape or len(bias.shape) > 2 or bias.dtype != y.dtype:
            refuse(ctx, f"{self.name}: kept {mm.name!r} + {add.name!r}: bias {bias.shape} "
                        f"does not broadcast into the {y.shape} product as Gemm's C")
            return False
        attrs = {"alpha": 1.0, "beta": 1.0, "transA": 0, "transB": 0}
        gemm = replace(graph, "Gemm", [a, b, bias], attrs, [mm, add], add)
        ctx.note(f"{self.name}: MatMul {mm.name!r} + Add {add.name!r} -> Gemm {gemm.name!r}")
        return True

    def _transposes(self, graph: Graph, uses: Uses, gemm: Node, ctx: PassContext) -> bool:
        for index, flag in ((0, "transA"), (1, "transB")):
            t = produced_by(gemm.inputs[index], "Transpose")
            if t is None or t.attrs.get("perm") != [1, 0]:
                continue
            if uses.only_user(t.outputs[0]) is not gemm:
                continue  # the transpose runs anyway for its other readers
            gemm.inputs[index] = t.inputs[0]
            gemm.attrs = {**gemm.attrs, flag: 1 - int(gemm.attrs.get(flag, 0))}
            graph.nodes.remove(t)
            merge_provenance(gemm, t)
            ctx.note(f"{self.name}: folded Transpose {t.name!r} into {flag} of Gemm "
                     f"{gemm.name!r}")
            return True
        return False
