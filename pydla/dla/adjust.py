"""``--adjust`` (trtexec's ``--adjustForDLA``): rewrite common layers the DLA refuses into
layers it runs, with the same results.

Each rewrite is an ONNX-to-ONNX change of one node, so ``check``, ``partition`` and
``build`` all see the same adjusted model, and the rewritten model is still a plain ONNX
model (what a Jetson's trtexec builds):

- ``HardSigmoid(x)`` → ``Clip(Add(Mul(x, alpha), beta), 0, 1)`` — the operator's own
  definition, max(0, min(1, alpha·x + beta)), step by step in the same order;
- ``HardSwish(x)`` → ``Mul(x, Clip(Add(Mul(x, 1/6), 0.5), 0, 1))`` — likewise;
- ``ReduceMean`` over H and W of an NCHW tensor, dims kept → ``GlobalAveragePool``.

The first two compute the operator's definition step by step (an implementation that fuses
the multiply-add rounds once less: equal to float rounding); the third sums the same
elements in another order.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper


def adjust_for_dla(model: onnx.ModelProto) -> tuple[onnx.ModelProto, list[str]]:
    """The adjusted copy of ``model`` and one line per rewrite made."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    graph = out.graph
    opset = next((o.version for o in out.opset_import if o.domain in ("", "ai.onnx")), 13)
    shapes = _ranks(out)
    consts = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    taken = {n for node in graph.node for n in (*node.input, *node.output)} | set(consts)
    log: list[str] = []
    nodes: list[onnx.NodeProto] = []

    def fresh(base: str) -> str:
        name = base
        while name in taken:
            name += "_"
        taken.add(name)
        return name

    def scalar(base: str, value: float) -> str:
        name = fresh(base)
        graph.initializer.append(numpy_helper.from_array(np.array(value, np.float32), name))
        return name

    def hard_sigmoid(node: onnx.NodeProto, x: str, y: str, alpha: float, beta: float) -> None:
        prefix = node.name or node.output[0]
        scaled, shifted = fresh(f"{prefix}/scaled"), fresh(f"{prefix}/shifted")
        nodes.extend([
            helper.make_node("Mul", [x, scalar(f"{prefix}/alpha", alpha)], [scaled],
                             name=fresh(f"{prefix}/mul")),
            helper.make_node("Add", [scaled, scalar(f"{prefix}/beta", beta)], [shifted],
                             name=fresh(f"{prefix}/add")),
            helper.make_node("Clip", [shifted, scalar(f"{prefix}/zero", 0.0),
                                      scalar(f"{prefix}/one", 1.0)], [y],
                             name=fresh(f"{prefix}/clip"))])

    for node in graph.node:
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        if node.op_type == "HardSigmoid" and opset >= 11:
            hard_sigmoid(node, node.input[0], node.output[0], float(attrs.get("alpha", 0.2)),
                         float(attrs.get("beta", 0.5)))
            log.append(f"{node.name or node.output[0]}: HardSigmoid -> Mul, Add, Clip")
        elif node.op_type == "HardSwish" and opset >= 11:
            gate = fresh(f"{node.name or node.output[0]}/gate")
            hard_sigmoid(node, node.input[0], gate, 1.0 / 6.0, 0.5)
            nodes.append(helper.make_node("Mul", [node.input[0], gate], [node.output[0]],
                                          name=fresh(f"{node.name or node.output[0]}/mul_x")))
            log.append(f"{node.name or node.output[0]}: HardSwish -> Mul, Add, Clip, Mul")
        elif node.op_type == "ReduceMean" and _spatial_mean(node, attrs, shapes, consts):
            nodes.append(helper.make_node("GlobalAveragePool", [node.input[0]],
                                          [node.output[0]], name=node.name))
            log.append(f"{node.name or node.output[0]}: ReduceMean over H, W -> "
                       "GlobalAveragePool")
        else:
            nodes.append(node)
    del graph.node[:]
    graph.node.extend(nodes)
    return out, log


def _ranks(model: onnx.ModelProto) -> dict[str, int]:
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:  # noqa: BLE001  (unknown ops: ranks unknown, rewrites that need one skip)
        inferred = model
    g = inferred.graph
    return {v.name: len(v.type.tensor_type.shape.dim)
            for v in (*g.input, *g.value_info, *g.output)
            if v.type.tensor_type.HasField("shape")}


def _spatial_mean(node: onnx.NodeProto, attrs: dict, ranks: dict[str, int],
                  consts: dict[str, np.ndarray]) -> bool:
    if ranks.get(node.input[0]) != 4 or int(attrs.get("keepdims", 1)) != 1:
        return False
    axes = attrs.get("axes")
    if axes is None and len(node.input) > 1 and node.input[1]:
        found = consts.get(node.input[1])
        axes = None if found is None else found.tolist()
    return axes is not None and sorted(int(a) % 4 for a in axes) == [2, 3]
