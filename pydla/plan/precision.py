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

from collections.abc import Mapping
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
SHORT_TO_DTYPE = {"fp32": DType.FLOAT32, "fp16": DType.FLOAT16, "bf16": DType.BFLOAT16}


def _program_ops(node: Node) -> set[str]:
    ops = {node.op}
    for key in ("program",):
        ops |= {s["op"] for s in node.attrs.get(key, [])}
    if "epilogue" in node.attrs:
        ops |= {s["op"] for s in node.attrs["epilogue"]["program"]}
    return ops


def _is_float32(v: Value | None) -> bool:
    return v is not None and v.dtype is DType.FLOAT32


def autocast(graph: Graph, target: DType, ctx: PassContext,
             overrides: Mapping[str, str] | None = None,
             ranges: Mapping[int, float] | None = None) -> None:
    if target not in LIMITS:
        raise BuildError(f"--autocast takes fp16 or bf16, not {target.short}")
    overrides = dict(overrides or {})
    names = {n.name for n in graph.nodes} | {f for n in graph.nodes for f in n.fused_from}
    unknown = sorted(set(overrides) - names)
    if unknown:
        raise BuildError(f"--layerPrecisions names unknown layers {unknown}")
    limit = LIMITS[target]
    original_outputs = [(v, v.dtype) for v in graph.outputs]
    casts: dict[tuple[int, DType], Value] = {}
    converted: dict[tuple[int, DType], Value] = {}
    new_nodes: list[Node] = []

    def cast(v: Value, dtype: DType) -> Value:
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
        floats_in = [v for v in node.inputs if _is_float32(v)]
        floats_out = [v for v in node.outputs if _is_float32(v)]
        if not floats_in and not floats_out:
            new_nodes.append(node)
            continue
        precision = _decide(node, target, overrides, ranges, limit, ctx)
        if precision is None:  # follow the first non-constant float input
            live = [v for v in node.inputs if v is not None and v.dtype.is_float
                    and not v.is_const]
            precision = live[0].dtype if live else target
        node.inputs = [cast(v, precision) if _is_float32(v) or (
            v is not None and v.dtype.is_float and v.dtype != precision
            and node.op not in ("Cast",)) else v for v in node.inputs]
        for v in floats_out:
            v.dtype = precision
        if node.op == "Cast" and floats_out:
            node.attrs = {**node.attrs, "to": int(precision)}
        _retype_programs(node, precision)
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


def _decide(node: Node, target: DType, overrides: Mapping[str, str],
            ranges: Mapping[int, float] | None, limit: float, ctx: PassContext
            ) -> DType | None:
    for name in [node.name, *node.fused_from]:
        if name in overrides:
            try:
                return SHORT_TO_DTYPE[overrides[name]]
            except KeyError:
                raise BuildError(f"--layerPrecisions {name}:{overrides[name]}: precision must "
                                 "be fp32, fp16 or bf16") from None
    if ranges is not None:
        peak = max((ranges.get(id(v), 0.0) for v in [*node.inputs, *node.outputs]
                    if v is not None and not v.is_const), default=0.0)
        if peak > limit:
            ctx.note(f"autocast: kept {node.op} {node.name!r} in fp32: values up to "
                     f"{peak:.4g} overflow {target.short} on the calibration data")
            return DType.FLOAT32
    ops = _program_ops(node)
    sensitive = ops & SENSITIVE
    if sensitive:
        ctx.note(f"autocast: kept {node.op} {node.name!r} in fp32 ({', '.join(sorted(sensitive))}"
                 " is numerically sensitive)")
        return DType.FLOAT32
    if node.op in FOLLOW:
        return None
    return target


def _retype_programs(node: Node, precision: DType) -> None:
    """Fused programs name each step's type; float32 steps take the layer's precision."""
    def retype(program: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{**s, "dtype": precision.name.lower()} if s["dtype"] == "float32" else s
                for s in program]

    if "program" in node.attrs:
        node.attrs = {**node.attrs, "program": retype(node.attrs["program"])}
    if "epilogue" in node.attrs:
        epi = node.attrs["epilogue"]
        node.attrs = {**node.attrs, "epilogue": {**epi, "program": retype(epi["program"])}}


def load_calibration(path: str) -> list[dict[str, np.ndarray]]:
    """Calibration inputs: an .npz keyed by input name (one batch)."""
    with np.load(path, allow_pickle=False) as z:
        return [{k: z[k] for k in z.files}]
