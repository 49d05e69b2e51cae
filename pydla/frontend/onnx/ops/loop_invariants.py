"""Loop-invariant code of a Loop body: found, and hoisted out of the body as it is imported.

A loop-carried value the body hands back unchanged never changes; exporters do not always
say so by name. SLANet's decoder returns its encoder features as
``Squeeze(Add(Unsqueeze(x), 0))``, so the loop would copy them twice per step and run
``MatMul(features, W)`` — a third of a step — 500 times on the same data.
``passes_through`` recognizes such value-preserving chains on a first import of the body;
the loop layer then binds those values as invariants and imports the body again with
hoisting on: a node whose inputs are all invariant (constants, captured outer tensors,
earlier hoisted results) is imported into the enclosing graph instead, before the Loop,
and the body reads its result once per run. Hoisted work runs even when the loop runs
zero times, as loop-invariant code motion does in any compiler (it has no side effects).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import onnx

from pydla.frontend.onnx.importer import import_nodes
from pydla.ir import Value

if TYPE_CHECKING:
    from pydla.frontend.onnx.ops.loop_layer import BodyContext

# Ops whose output is their one non-constant input's value (same type and shape).
_SAME_VALUE = frozenset({"Identity", "Reshape", "Squeeze", "Unsqueeze", "Flatten"})
# Binary ops that leave a value unchanged when the constant operand is all this.
_NEUTRAL = {"Add": 0.0, "Sub": 0.0, "Mul": 1.0, "Div": 1.0}
_MAX_CHAIN = 64
# Ops that are not a function of their inputs alone: never hoisted.
_RANDOM = ("Random", "Multinomial", "Bernoulli")


def passes_through(result: Value, source: Value) -> bool:
    """Whether ``result`` is ``source``'s value, through a chain of value-preserving layers
    (reshapes, ``+ 0``, ``· 1``, a Cast to its own type)."""
    if result.shape != source.shape or result.dtype is not source.dtype:
        return False
    v = result
    for _ in range(_MAX_CHAIN):
        if v is source:
            return True
        node = v.producer
        if node is None or len(node.outputs) != 1:
            return False
        live = [x for x in node.inputs if x is not None and not x.is_const]
        if len(live) != 1 or live[0].dtype is not v.dtype:
            return False
        x = live[0]
        if node.op in _NEUTRAL:
            const = [c for c in node.inputs if c is not None and c.is_const]
            if (len(const) != 1 or x.shape != v.shape
                    or (node.op in ("Sub", "Div") and node.inputs[0] is not x)
                    or not np.all(const[0].const == _NEUTRAL[node.op])):
                return False
        elif node.op == "Cast":
            if x.dtype is not v.dtype:
                return False
        elif node.op not in _SAME_VALUE:
            return False
        v = x
    return False


def hoistable(bctx: BodyContext, proto: onnx.NodeProto) -> bool:
    """Whether the body node reads only invariant values, one of them computed at run time
    (a node of constants is folded in the body anyway)."""
    if (proto.domain not in ("", "ai.onnx") or proto.op_type.startswith(_RANDOM)
            or any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
                   for a in proto.attribute)):
        return False
    runtime = False
    for name in proto.input:
        if not name:
            continue
        v = bctx.local(name)
        if v is None:
            v = bctx.outer.lookup(name)
            if v is None:
                return False
        elif not v.is_const and id(v) not in bctx.outer_of:
            return False  # a loop state or a value computed in the body
        runtime = runtime or not v.is_const
    return runtime


def hoist(bctx: BodyContext, proto: onnx.NodeProto) -> None:
    """Import ``proto`` into the enclosing graph; its inputs are bound there, by the names
    the body knows them by, to their outer values (``bctx.hoisted``, a scope of the outer
    context while the body is imported)."""
    for name in proto.input:
        v = bctx.local(name) if name else None
        if v is None:
            continue
        outer = bctx.outer_of.get(id(v))
        if outer is None:  # a body constant: a copy of its own in the outer graph
            outer = Value(bctx.outer.graph.unique_name(v.name), v.shape, v.dtype, const=v.const)
        bctx.hoisted[name] = outer
    import_nodes(bctx.outer, [proto])
    bctx.hoisted_nodes += 1
