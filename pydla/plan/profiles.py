"""Optimization profiles (--minShapes/--optShapes/--maxShapes): which plans one loadable holds.

A profile gives each input a range of shapes. The DLA has no dynamic shapes, so the loadable
holds a fixed-shape plan per shape set, all sharing one weights section:

* profile 0 is the opt shapes (the top-level program, what ``pydla.cudla`` exposes);
* when the model's batch rows are proven independent (``batch_rows_independent``: every
  layer maps row i of its inputs' axis 0 to row i of its outputs), the plans are min, opt,
  max and the powers of two between; a batch without a plan of its own runs padded in the
  smallest plan holding it, its outputs sliced;
* otherwise every value of every varying dimension gets a plan of its own (exact), refused
  at once when that is more than ``BuildOptions.max_profile_plans``.

Either way every shape in [min, max] runs, with the answer of a fixed-shape build.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from pydla.errors import BuildError
from pydla.ir import Graph, Node

Shape = tuple[int, ...]
# The keys of one executable program in the loadable's metadata (a plan's entry).
PROGRAM_KEYS = ("arena_bytes", "tensors", "layers", "inputs", "outputs")


@dataclass(frozen=True)
class InputProfile:
    name: str
    min: Shape
    opt: Shape
    max: Shape

    def varying(self) -> list[int]:
        return [a for a, (lo, hi) in enumerate(zip(self.min, self.max)) if lo != hi]


@dataclass(frozen=True)
class PlanSet:
    """The shape sets to build, opt first, and whether batches run padded."""

    shapes: tuple[dict[str, Shape], ...]
    pad_batch: bool
    why_exact: str | None  # why padding was not proven (None: padded, or nothing varies)


def parse_profile(min_shapes: Mapping[str, Sequence[int]],
                  opt_shapes: Mapping[str, Sequence[int]],
                  max_shapes: Mapping[str, Sequence[int]],
                  fixed: Mapping[str, Sequence[int]]) -> list[InputProfile]:
    """Check the three flags' shapes against each other (as trtexec does) and --shapes."""
    names = list(dict.fromkeys([*opt_shapes, *min_shapes, *max_shapes]))
    profiles = []
    for name in names:
        given = {flag: m.get(name) for flag, m in (("--minShapes", min_shapes),
                                                   ("--optShapes", opt_shapes),
                                                   ("--maxShapes", max_shapes))}
        missing = [flag for flag, shape in given.items() if shape is None]
        if missing:
            raise BuildError(f"input {name!r}: the optimization profile needs --minShapes, "
                             f"--optShapes and --maxShapes; {', '.join(missing)} not given")
        if name in fixed:
            raise BuildError(f"input {name!r} is given both --shapes and an optimization "
                             "profile (--minShapes/--optShapes/--maxShapes): give one (trtexec "
                             "refuses the mix too)")
        lo, opt, hi = (tuple(int(d) for d in s) for s in given.values())  # type: ignore[union-attr]
        if not len(lo) == len(opt) == len(hi):
            raise BuildError(f"input {name!r}: min {list(lo)}, opt {list(opt)} and max "
                             f"{list(hi)} differ in rank")
        if not all(0 < a <= b <= c for a, b, c in zip(lo, opt, hi)):
            raise BuildError(f"input {name!r}: min {list(lo)} <= opt {list(opt)} <= max "
                             f"{list(hi)} must hold, every dimension at least 1")
        profiles.append(InputProfile(name, lo, opt, hi))
    return profiles


def plan_shapes(profiles: Sequence[InputProfile], symbols: Mapping[tuple[str, int], str],
                prove: Callable[[int, int], str | None], limit: int) -> PlanSet:
    """The plans to build. ``symbols`` names the model's symbolic dims ((input, axis) →
    dim_param): dims of one symbol vary together. ``prove(b1, b2)`` is None when the model's
    batch rows are independent at batch sizes b1 and b2, else the reason they may not be."""
    groups: dict[str, list[tuple[InputProfile, int]]] = {}
    for p in profiles:
        for axis in p.varying():
            key = symbols.get((p.name, axis)) or f"{p.name}[{axis}]"
            groups.setdefault(key, []).append((p, axis))
    ranges: dict[str, tuple[int, int, int]] = {}
    for key, members in groups.items():
        spans = {(p.min[a], p.opt[a], p.max[a]) for p, a in members}
        if len(spans) > 1:
            dims = ", ".join(f"{p.name}[{a}]" for p, a in members)
            raise BuildError(f"dimensions {dims} are one symbol {key!r} in the model but "
                             f"their profiles give different min/opt/max {sorted(spans)}")
        ranges[key] = spans.pop()
    opt = {p.name: p.opt for p in profiles}
    if not groups:
        return PlanSet((opt,), False, None)
    why = _padding_refused(groups)
    if why is None:
        (lo, mid, hi), = ranges.values()
        why = prove(hi, hi - 1 if hi - 1 >= lo else lo)
        if why is None:
            batches = sorted({lo, mid, hi} | {1 << k for k in range(hi.bit_length())
                                              if lo < 1 << k < hi})
            return PlanSet(_expand(profiles, groups, opt, [[b] for b in batches]), True, None)
    count = int(np.prod([hi - lo + 1 for lo, _, hi in ranges.values()], dtype=object))
    if count > limit:
        dims = "; ".join(f"{key} in [{lo}, {hi}]" for key, (lo, _, hi) in ranges.items())
        raise BuildError(f"the optimization profile needs {count} plans ({dims}), more than "
                         f"the limit {limit} (BuildOptions.max_profile_plans, "
                         f"--maxProfilePlans): batch padding is not possible because {why}; "
                         "narrow the ranges or raise the limit")
    values = [list(range(lo, hi + 1)) for lo, _, hi in ranges.values()]
    return PlanSet(_expand(profiles, groups, opt, [list(v) for v in itertools.product(*values)]),
                   False, why)


def _padding_refused(groups: Mapping[str, list[tuple[InputProfile, int]]]) -> str | None:
    if len(groups) > 1:
        return f"{len(groups)} dimensions vary ({', '.join(groups)}), padding takes a batch only"
    (key, members), = groups.items()
    if any(a != 0 for _, a in members):
        return f"the varying dimension {key!r} is not axis 0 (the batch)"
    return None


def _expand(profiles: Sequence[InputProfile], groups: Mapping[str, list[tuple[InputProfile, int]]],
            opt: dict[str, Shape], combos: list[list[int]]) -> tuple[dict[str, Shape], ...]:
    plans = [opt]
    for combo in combos:
        shapes = {p.name: list(p.opt) for p in profiles}
        for value, members in zip(combo, groups.values()):
            for p, axis in members:
                shapes[p.name][axis] = value
        plan = {k: tuple(v) for k, v in shapes.items()}
        if plan != opt:
            plans.append(plan)
    return tuple(plans)


# -- proving batch rows independent ------------------------------------------------------------
# Ops computing each element from the same element of their inputs (broadcasting).
_ELEMENTWISE = frozenset({
    "Abs", "Acos", "Acosh", "Add", "And", "Asin", "Asinh", "Atan", "Atanh", "BitShift",
    "Cast", "CastLike", "Ceil", "Celu", "Clip", "Cos", "Cosh", "Div", "Dropout", "Elu",
    "Equal", "Erf", "Exp", "Floor", "Gelu", "Greater", "GreaterOrEqual", "HardSigmoid",
    "HardSwish", "Identity", "IsInf", "IsNaN", "LeakyRelu", "Less", "LessOrEqual", "Log",
    "Max", "Mean", "Min", "Mish", "Mod", "Mul", "Neg", "Not", "Or", "Pow", "PRelu",
    "Reciprocal", "Relu", "Round", "Selu", "Shrink", "Sigmoid", "Sign", "Sin", "Sinh",
    "Softplus", "Softsign", "Sqrt", "Sub", "Sum", "Tan", "Tanh", "ThresholdedRelu", "Where",
    "Xor",
})
# Ops whose first input alone carries the batch and which work on each row (axis-0 item)
# by itself, given the attribute condition checked in _row_rule.
_ROW_OPS = frozenset({
    "Conv", "ConvTranspose", "MaxPool", "AveragePool", "LpPool", "GlobalAveragePool",
    "GlobalMaxPool", "GlobalLpPool", "BatchNormalization", "InstanceNormalization", "LRN",
    "Gemm", "MatMul", "Flatten", "Reshape", "Squeeze", "Unsqueeze", "Softmax", "LogSoftmax",
    "Hardmax", "ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd",
    "ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare", "ArgMax",
    "ArgMin", "Transpose", "LayerNormalization", "Split", "Gather", "Slice", "Pad", "Resize",
    "DepthToSpace", "SpaceToDepth", "CumSum", "LpNormalization", "MeanVarianceNormalization",
})
# Row-major reshapes: keeping axis 0's length keeps every row's elements in that row.
_RESHAPES = frozenset({"Flatten", "Reshape", "Squeeze", "Unsqueeze"})


def batch_rows_independent(graphs: Sequence[tuple[Graph, int]], inputs: set[str]) -> str | None:
    """None when, in every graph (the model imported at a batch size), each layer maps row
    i of its inputs' axis 0 to row i of its outputs, and the graphs are the same layers
    with the same constants (a constant that changes with the batch, a folded Shape, is
    batch-dependent arithmetic). Otherwise the first reason, naming the layer."""
    (first, _), *others = graphs
    for other, _ in others:
        why = _same_constants(first, other)
        if why is not None:
            return why
    for graph, batch in graphs:
        why = _rows_independent(graph, inputs, batch)
        if why is not None:
            return why
    return None


def _same_constants(a: Graph, b: Graph) -> str | None:
    if [n.op for n in a.nodes] != [n.op for n in b.nodes]:
        return "the model's layers differ between batch sizes"
    for na, nb in zip(a.nodes, b.nodes):
        for va, vb in zip(na.inputs, nb.inputs):
            if va is None or vb is None or va.const is None or vb.const is None:
                if (va is None) != (vb is None) or (va is not None and vb is not None
                                                     and va.is_const != vb.is_const):
                    return f"layer {na.name!r} ({na.op}) differs between batch sizes"
                continue
            if va.const.shape != vb.const.shape or not np.array_equal(va.const, vb.const):
                return (f"layer {na.name!r} ({na.op}) reads a constant {va.name!r} that "
                        "changes with the batch size (batch-dependent arithmetic)")
        sized = ("shape", "ends", "sizes") if na.op in ("Reshape", "Slice", "Resize") else ()
        if not _same({k: v for k, v in na.attrs.items() if k not in sized},
                     {k: v for k, v in nb.attrs.items() if k not in sized}):
            return f"layer {na.name!r} ({na.op}) has attributes that change with the batch"
    return None


def _same(a: Any, b: Any) -> bool:
    """Attribute values equal (arrays by content: ``==`` on them is elementwise)."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return np.shape(a) == np.shape(b) and bool(np.array_equal(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and bool(a == b)


def _rows_independent(graph: Graph, inputs: set[str], batch: int) -> str | None:
    carries: set[int] = set()
    for v in graph.inputs:
        if v.name in inputs:
            if not v.shape or v.shape[0] != batch:
                return f"input {v.name!r} of shape {v.shape} has no batch {batch} on axis 0"
            carries.add(id(v))
    for node in graph.nodes:
        flags = [v is not None and id(v) in carries for v in node.inputs]
        if not any(flags):
            continue  # computed from constants alone (the same at every batch size)
        why = _rule(node, flags, batch)
        if why is not None:
            return f"layer {node.name!r} ({node.op}): {why}"
        for out in node.outputs:
            if not out.shape or out.shape[0] != batch:
                return (f"layer {node.name!r} ({node.op}): output {out.name!r} of shape "
                        f"{out.shape} does not keep the batch {batch} on axis 0")
            carries.add(id(out))
    for v in graph.outputs:
        if id(v) not in carries:
            return f"output {v.name!r} does not carry the batch on axis 0"
    return None


def _rule(node: Node, flags: list[bool], batch: int) -> str | None:
    op, attrs = node.op, node.attrs
    rank = len(node.outputs[0].shape) if node.outputs else 0
    if op in _ELEMENTWISE:
        for v, has in zip(node.inputs, flags):
            if v is None:
                continue
            if has and len(v.shape) != rank:
                return f"{v.name!r} broadcasts its batch off axis 0"
            if not has and len(v.shape) == rank and v.shape[0] != 1:
                return f"{v.name!r} has {v.shape[0]} rows without the batch"
        return None
    if op == "Concat":
        if not all(flags) or _axis(attrs.get("axis", 0), rank) == 0:
            return "concatenates along the batch or with a tensor without it"
        return None
    if op == "MatMul" and all(flags) and all(len(v.shape) == rank >= 3  # type: ignore[union-attr]
                                             for v in node.inputs):
        return None  # a batched product (attention's q·kᵀ): row i of both operands makes row i
    if op == "Gather" and flags == [False, True] and \
            _axis(attrs.get("axis", 0), len(node.inputs[0].shape)) == 0:  # type: ignore[union-attr]
        return None  # an embedding lookup: row i of the indices picks row i of the output
    if op not in _ROW_OPS:
        return "no rule proves its rows independent"
    if not flags[0] or any(flags[1:]):
        return "the batch reaches an input other than the first"
    shape = node.inputs[0].shape  # type: ignore[union-attr]
    return _row_rule(op, attrs, len(shape), batch)


def _axis(a: Any, rank: int) -> int:
    return int(a) + rank if int(a) < 0 else int(a)


def _row_rule(op: str, attrs: Mapping[str, Any], rank: int, batch: int) -> str | None:
    if op in _RESHAPES or op in ("Conv", "ConvTranspose", "MaxPool", "AveragePool", "LpPool",
                                 "GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool",
                                 "BatchNormalization", "InstanceNormalization", "LRN",
                                 "DepthToSpace", "SpaceToDepth"):
        return None  # NC… layers work per image; reshapes keep axis 0 (checked by shape)
    if op == "Gemm":
        return "transA reads the batch as columns" if attrs.get("transA", 0) else None
    if op == "MatMul":
        return None if rank >= 2 else "a vector operand has no rows"
    if op in ("Softmax", "LogSoftmax", "Hardmax", "LpNormalization", "MeanVarianceNormalization"
              ) or op.startswith("Reduce"):
        axes = attrs.get("axes")
        if axes is None and "axis" in attrs:
            axes = [attrs["axis"]]
        if not axes or 0 in {_axis(a, rank) for a in axes}:
            return f"it reduces over axis 0 (axes {axes})"
        return None
    if op in ("ArgMax", "ArgMin", "Split", "Gather", "CumSum"):
        return "it works along axis 0" if _axis(attrs.get("axis", 0), rank) == 0 else None
    if op == "LayerNormalization":
        return "it normalizes over axis 0" if _axis(attrs.get("axis", -1), rank) == 0 else None
    if op == "Transpose":
        perm = attrs.get("perm") or list(range(rank))[::-1]
        return None if perm and perm[0] == 0 else f"perm {perm} moves axis 0"
    if op == "Slice":
        starts, ends, steps = attrs.get("starts"), attrs.get("ends"), attrs.get("steps")
        if not (starts and ends and steps) or (starts[0], steps[0]) != (0, 1) \
                or ends[0] < batch:
            return "it slices axis 0"
        return None
    if op == "Pad":
        pads = attrs.get("pads") or []
        if len(pads) != 2 * rank or pads[0] or pads[rank] or attrs.get("mode", "constant") \
                not in ("constant", "reflect", "edge", "wrap"):
            return "it pads axis 0"
        return None
    if op == "Resize":
        scales, roi = attrs.get("scales"), attrs.get("roi") or []
        if not scales or float(scales[0]) != 1.0 or attrs.get(
                "coordinate_transformation_mode") == "tf_crop_and_resize" or (
                roi and (roi[0], roi[len(roi) // 2]) != (0.0, 1.0)):
            return "it resizes or crops axis 0"
        return None
    return "no rule proves its rows independent"


def merge_plans(plans: Sequence[tuple[dict[str, Any], dict[int, np.ndarray]]],
                profiles: Sequence[InputProfile], pad_batch: bool
                ) -> tuple[dict[str, Any], dict[int, np.ndarray], list[dict[int, np.ndarray]]]:
    """One loadable's metadata from the plans' lowered (meta, weights), opt first: the opt
    plan is the top level, the others' programs go under "profiles" (docs/loadable-format.md).
    Returns the top level's weights and each further plan's (the writer stores equal weights
    once)."""
    by_name = {p.name: p for p in profiles}
    (meta, weights), *rest = plans
    if any(m.get("subprograms") for m, _ in plans):
        raise BuildError("a model with Loop layers cannot be built with an optimization "
                         "profile: give fixed --shapes")

    def shapes_of(m: dict[str, Any]) -> list[list[int]]:
        return [list(m["tensors"][io["tensor"]]["shape"]) for io in m["inputs"]]

    ranges = []
    for shape, io in zip(shapes_of(meta), meta["inputs"]):
        name = meta["tensors"][io["tensor"]]["name"]
        p = by_name.get(name)
        lo, opt, hi = (p.min, p.opt, p.max) if p else (shape, shape, shape)
        ranges.append({"name": name, "min": list(lo), "opt": list(opt), "max": list(hi)})
    meta["shape_range"] = {"inputs": ranges, "pad_batch": pad_batch}
    meta["profiles"] = [{"shapes": shapes_of(meta)}] + [
        {"shapes": shapes_of(m), **{k: m[k] for k in PROGRAM_KEYS}} for m, _ in rest]
    return meta, weights, [w for _, w in rest]
