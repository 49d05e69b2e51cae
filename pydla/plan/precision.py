"""Autocast: run a float32 network in float16 or bfloat16 where it is numerically safe.

Policy (docs/builder.md):
- layers that accumulate or exponentiate stay float32: softmax, normalizations, reductions,
  exp/log/pow (also inside fused pointwise programs), cumulative sums, recurrent cells;
- data-movement layers (reshape, transpose, concat, slice, gather, pooling…) take the
  precision of their input;
- every other float layer runs in the target type;
- with calibration data, a layer whose inputs or outputs exceed the target type's range
  stays float32, and the build log says so;
- ``--layerPrecisions=name:fp32`` overrides the decision for a layer.
Casts are inserted where a tensor crosses precisions; network inputs and outputs keep their
types. Only float32 tensors change type.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from pydla.dtypes import DType, to_compute, to_storage
from pydla.errors import BuildError
from pydla.ir import Graph, Node, Value
from pydla.passes.base import PassContext

SENSITIVE = frozenset({
    "Softmax", "LogSoftmax", "BatchNormalization", "LayerNormalization",
    "InstanceNormalization", "GroupNormalization", "RMSNormalization", "LpNormalization",
    "MeanVarianceNormalization", "LRN", "ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin",
    "ReduceProd", "ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp",
    "ReduceSumSquare", "Exp", "Log", "Pow", "Softplus", "Mish", "CumSum", "CumProd", "LSTM",
    "GRU", "RNN", "LpPool", "GlobalAveragePool", "AveragePool", "Einsum",
})
FOLLOW = frozenset({
    "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose", "Concat", "Split", "Slice",
    "Gather", "GatherElements", "GatherND", "Expand", "Tile", "Pad", "DepthToSpace",
    "SpaceToDepth", "Identity", "MaxPool", "GlobalMaxPool", "Where", "Resize", "TopK",
    "ScatterND", "ScatterElements", "Trilu", "ReverseSequence", "Equal", "Less", "Greater",
    "LessOrEqual", "GreaterOrEqual", "Max", "Min", "Cast",
})
LIMITS = {DType.FLOAT16: 65504.0, DType.BFLOAT16: 3.3895e38}
WIDE_INTEGERS = frozenset({DType.INT16, DType.UINT16, DType.INT32, DType.UINT32, DType.INT64,
                           DType.UINT64})
SHORT_TO_DTYPE = {"fp32": DType.FLOAT32, "fp16": DType.FLOAT16, "bf16": DType.BFLOAT16}


def _program_ops(node: Node) -> set[str]:
    ops = {node.op}
    for key in ("program",):
        ops |= {s["op"] for s in node.attrs.get(key, [])}
    if "epilogue" in node.attrs:
        ops |= {s["op"] for s in node.attrs["epilogue"]["program"]}
    return ops


def _casts_wide(node: Node) -> bool:
    """A layer that turns wide integers (int32 sums…) into floats."""
    return "Cast" in _program_ops(node) and any(
        v is not None and not v.is_const and v.dtype in WIDE_INTEGERS for v in node.inputs)


def _is_float32(v: Value | None) -> bool:
    return v is not None and v.dtype is DType.FLOAT32


Precision = dict[int, DType]  # id(node) -> the type it runs in (nodes with a float32 tensor)


def autocast(graph: Graph, target: DType, ctx: PassContext,
             overrides: Mapping[str, str] | None = None,
             ranges: Mapping[int, float] | None = None,
             choose: Callable[[Graph, Precision, set[int]], Precision] | None = None
             ) -> dict[str, tuple[str, str]]:
    """Convert ``graph`` under the policy; ``choose`` (weak typing, pydla.plan.weak_typing)
    may change the types of layers the policy made ``target`` before anything changes: it
    receives the plan and the ids of the layers ``--layerPrecisions`` fixed. Returns each
    converted layer's name → (type, why: the policy's reason, "--layerPrecisions", or "" where
    the policy allowed ``target``)."""
    if target not in LIMITS:
        raise BuildError(f"--autocast takes fp16 or bf16, not {target.short}")
    overrides = dict(overrides or {})
    names = {n.name for n in graph.nodes} | {f for n in graph.nodes for f in n.fused_from}
    unknown = sorted(set(overrides) - names)
    if unknown:
        raise BuildError(f"--layerPrecisions names unknown layers {unknown}")
    decisions: dict[int, tuple[DType | None, str]] = {}
    for node in graph.nodes:
        decisions[id(node)] = _decide(node, target, overrides, ranges, LIMITS[target])
        if decisions[id(node)][1]:
            ctx.note(f"autocast: kept {node.op} {node.name!r} in fp32: "
                     f"{decisions[id(node)][1]}")
    fixed = {id(n) for n in graph.nodes
             if any(name in overrides for name in [n.name, *n.fused_from])}
    plan = plan_precisions(graph, target, decisions)
    if choose is not None:
        plan = choose(graph, plan, fixed)
    why = {id(n): "--layerPrecisions" if id(n) in fixed else decisions[id(n)][1]
           for n in graph.nodes}
    chosen = {n.name: (plan[id(n)].short, why[id(n)]) for n in graph.nodes if id(n) in plan}
    apply_precisions(graph, plan)
    return chosen


def plan_precisions(graph: Graph, target: DType,
                    decisions: Mapping[int, tuple[DType | None, str]],
                    forced: Mapping[int, DType] | None = None) -> Precision:
    """Each layer's type without changing the graph: ``forced`` first, else the policy's
    decision, else (data movement) the type of its first non-constant float input as the
    layers before it leave that input."""
    forced = forced or {}
    dtypes: dict[int, DType] = {}

    def dtype(v: Value) -> DType:
        return dtypes.get(id(v), v.dtype)

    plan: Precision = {}
    for node in graph.nodes:
        floats_in = [v for v in node.inputs if v is not None and dtype(v) is DType.FLOAT32]
        floats_out = [v for v in node.outputs if dtype(v) is DType.FLOAT32]
        if not floats_in and not floats_out:
            continue
        precision = forced.get(id(node)) or decisions[id(node)][0]
        if precision is None:
            live = [v for v in node.inputs if v is not None and dtype(v).is_float
                    and not v.is_const]
            precision = dtype(live[0]) if live else target
        for v in floats_out:
            dtypes[id(v)] = precision
        plan[id(node)] = precision
    return plan


def input_type(node: Node, v: Value, precision: DType) -> DType:
    """The type a layer running in ``precision`` reads input ``v`` (of its planned type) in:
    float inputs take the layer's type, except a Cast's (it converts them itself)."""
    if v.dtype is DType.FLOAT32 or (v.dtype.is_float and v.dtype != precision
                                    and node.op != "Cast"):
        return precision
    return v.dtype


def retyped_attrs(node: Node, precision: DType) -> dict[str, Any]:
    """The layer's attributes in ``precision``: a Cast's target, fused programs' steps."""
    attrs = dict(node.attrs)
    if node.op == "Cast" and any(v.dtype is DType.FLOAT32 for v in node.outputs):
        attrs["to"] = int(precision)
    return _retype_programs(attrs, precision)


def apply_precisions(graph: Graph, plan: Precision) -> None:
    """Retype the planned layers, with a Cast where a tensor crosses types; network inputs
    and outputs keep their types."""
    original_outputs = [(v, v.dtype) for v in graph.outputs]
    casts: dict[tuple[int, DType], Value] = {}
    converted: dict[tuple[int, DType], Value] = {}
    new_nodes: list[Node] = []

    def cast(v: Value, dtype: DType) -> Value:
        if v.dtype is dtype:
            return v
        if v.is_const:
            key = (id(v), dtype)
            if key not in converted:
                data = to_storage(to_compute(v.const, v.dtype), dtype)  # type: ignore[arg-type]
                converted[key] = Value(graph.unique_name(f"{v.name}_{dtype.short}"), v.shape,
                                       dtype, const=data)
            return converted[key]
        key = (id(v), dtype)
        if key not in casts:
            out = Value(graph.unique_name(f"{v.name}_{dtype.short}"), v.shape, dtype)
            new_nodes.append(Node("Cast", graph.unique_node_name(f"{v.name}_to_{dtype.short}"),
                                  [v], [out], {"to": int(dtype)}))
            casts[key] = out
        return casts[key]

    for node in graph.nodes:
        precision = plan.get(id(node))
        if precision is None:
            new_nodes.append(node)
            continue
        node.attrs = retyped_attrs(node, precision)
        node.inputs = [None if v is None else cast(v, input_type(node, v, precision))
                       for v in node.inputs]
        for v in node.outputs:
            if v.dtype is DType.FLOAT32:
                v.dtype = precision
        node.precision = precision.short
        new_nodes.append(node)
    graph.nodes = new_nodes
    for i, (v, dtype) in enumerate(original_outputs):
        if v.dtype != dtype:
            back = Value(v.name, v.shape, dtype)
            v.name = graph.unique_name(f"{v.name}_{v.dtype.short}")
            graph.add_node(Node("Cast", graph.unique_node_name(f"{back.name}_to_{dtype.short}"),
                                [v], [back], {"to": int(dtype)}))
            graph.outputs[i] = back


def feed_io_types(graph: Graph, input_types: Sequence[DType | None],
                  output_types: Sequence[DType | None]) -> list[str]:
    """Let a network input or output whose I/O format names the type its layers run in be
    that type: an fp16 ``chw16`` input read only through Casts to fp16 becomes an fp16 tensor
    (the runtime's reorder writes fp16; no fp32 round trip, no Cast layer), and an output
    Cast from fp16 back to float32 goes when the output format is fp16. Returns the names
    of the Casts removed."""
    removed: list[str] = []
    for v, t in zip(graph.inputs, input_types):
        readers = [n for n in graph.nodes if any(x is v for x in n.inputs)]
        if (t is None or v.dtype is t or not t.is_float or not readers
                or not all(_is_cast_to(n, t) for n in readers)):
            continue
        v.dtype = t
        for cast_node in readers:
            out = cast_node.outputs[0]
            for n in graph.nodes:
                n.inputs = [v if x is out else x for x in n.inputs]
            graph.outputs = [v if x is out else x for x in graph.outputs]
            removed.append(cast_node.name)
        graph.nodes = [n for n in graph.nodes if n.name not in removed]
    producer = {id(x): n for n in graph.nodes for x in n.outputs}
    for i, (v, t) in enumerate(zip(list(graph.outputs), output_types)):
        cast_node = producer.get(id(v))
        if t is None or v.dtype is t or cast_node is None or cast_node.op != "Cast":
            continue
        src = cast_node.inputs[0]
        if (src is None or src.dtype is not t or src.is_const
                or any(x is v for n in graph.nodes for x in n.inputs)
                or any(x is src for x in graph.outputs) or any(x is src for x in graph.inputs)):
            continue
        src.name = v.name
        graph.outputs[i] = src
        graph.nodes = [n for n in graph.nodes if n is not cast_node]
        removed.append(cast_node.name)
    return removed


def _is_cast_to(node: Node, dtype: DType) -> bool:
    return node.op == "Cast" and int(node.attrs.get("to", -1)) == int(dtype)


def _decide(node: Node, target: DType, overrides: Mapping[str, str],
            ranges: Mapping[int, float] | None, limit: float) -> tuple[DType | None, str]:
    """The policy's type for a layer (None: its input's) and, when it keeps float32 by
    policy, why."""
    if node.op == "Loop":  # its carried tensors are its body's, built in the network's types
        return DType.FLOAT32, "a Loop's body keeps the network's types"
    for name in [node.name, *node.fused_from]:
        if name in overrides:
            try:
                return SHORT_TO_DTYPE[overrides[name]], ""
            except KeyError:
                raise BuildError(f"--layerPrecisions {name}:{overrides[name]}: precision must "
                                 "be fp32, fp16 or bf16") from None
    if ranges is not None:
        peak = max((ranges.get(id(v), 0.0) for v in [*node.inputs, *node.outputs]
                    if v is not None and not v.is_const), default=0.0)
        if peak > limit:
            return DType.FLOAT32, (f"values up to {peak:.4g} overflow {target.short} on the "
                                   "calibration data")
    if _casts_wide(node):
        # MatMulInteger's int32 sums, cast to float and scaled: the sums pass fp16's 65504
        # (a quantized BiLSTM's reached 80,601; the GPU stored inf, then NaN), the products
        # do not; float32 here and in the layer that scales them (the Cast alone where it is
        # not fused), the layers after take the target type again.
        return DType.FLOAT32, "casts wide integers to float (fp16 holds 65504 at most)"
    if any(v is not None and v.producer is not None and _casts_wide(v.producer)
           for v in node.inputs):
        return DType.FLOAT32, "reads wide integers cast to float (fp16 holds 65504 at most)"
    sensitive = _program_ops(node) & SENSITIVE
    if sensitive:
        return DType.FLOAT32, f"{', '.join(sorted(sensitive))} is numerically sensitive"
    if node.op in FOLLOW:
        return None, ""
    return target, ""


def _retype_programs(attrs: dict[str, Any], precision: DType) -> dict[str, Any]:
    """Fused programs name each step's type; float32 steps take the layer's precision."""
    def retype(program: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{**s, "dtype": precision.name.lower()} if s["dtype"] == "float32" else s
                for s in program]

    if "program" in attrs:
        attrs["program"] = retype(attrs["program"])
    if "epilogue" in attrs:
        epi = attrs["epilogue"]
        attrs["epilogue"] = {**epi, "program": retype(epi["program"])}
    return attrs


def load_calibration(path: str) -> list[dict[str, np.ndarray]]:
    """Calibration inputs: an .npz keyed by input name (one batch)."""
    with np.load(path, allow_pickle=False) as z:
        return [{k: z[k] for k in z.files}]
