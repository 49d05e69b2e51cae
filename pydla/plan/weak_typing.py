"""Weak typing, as TensorRT's ``--fp16``/``--bf16`` mean it: reduced precision is *allowed*,
not imposed. The precision policy (pydla.plan.precision) proposes which layers may run in
fp16/bf16; this pass times each region of such layers — layers joined by reduced-precision
tensors, the unit a precision change happens at — in every allowed type on this machine,
the Casts at its edges included, and keeps the fastest. float32 wins ties (a reduced
region must be ``TIE`` faster), so ``--fp16`` never buys rounding for nothing.

Layers ``--layerPrecisions`` names keep their type: they are never timed away.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from pydla.backends.base import LayerSpec, TensorSpec
from pydla.dtypes import DType, to_compute, to_storage
from pydla.ir import Graph, Node, Value
from pydla.plan.precision import Precision, input_type, retyped_attrs
from pydla.plan.tactics import LayerTimer

# A reduced region must beat float32 by this fraction: a closer call is timing noise,
# and float32 is the more accurate of two equals.
TIE = 0.03


class WeakTyping:
    """The ``choose`` step of ``precision.autocast``: per region, the fastest allowed type.
    ``io_types`` gives the I/O type of network inputs and outputs whose
    ``--inputIOFormats``/``--outputIOFormats`` name one (by value id): a region reading an
    fp16 input in fp16 needs no Cast. ``reasons`` collects, by layer name, why each timed
    layer got its type (the layer info shows it)."""

    def __init__(self, timer: LayerTimer, allowed: Sequence[DType],
                 io_types: Mapping[int, DType] | None = None) -> None:
        self.timer = timer
        self.allowed = tuple(allowed)
        self.io_types = dict(io_types or {})
        self.reasons: dict[str, str] = {}

    def __call__(self, graph: Graph, plan: Precision, fixed: set[int]) -> Precision:
        plan = dict(plan)
        producer = {id(v): n for n in graph.nodes for v in n.outputs}
        consumers: dict[int, list[Node]] = {}
        for n in graph.nodes:
            for v in n.inputs:
                if v is not None:
                    consumers.setdefault(id(v), []).append(n)
        outputs = {id(v): v.dtype for v in graph.outputs}
        regions = _regions(graph, plan, fixed, producer)
        # The reduced-precision kernels compile in parallel workers first, as tactic
        # choice does for the final layers.
        self.timer.precompile([(_spec_in(n, q)[0], [v is not None and v.is_const
                                                    for v in n.inputs])
                               for region in regions for n in region for q in self.allowed])
        for region in regions:
            costs = {q: self._cost(region, q, plan, producer, consumers, outputs)
                     for q in (DType.FLOAT32, *self.allowed)}
            fp32 = costs[DType.FLOAT32]
            fastest = min(self.allowed, key=costs.__getitem__)
            chosen = fastest if costs[fastest] < (1 - TIE) * fp32 else DType.FLOAT32
            where = (f"{len(region)} layers timed as one region" if len(region) > 1
                     else "timed")
            if chosen is DType.FLOAT32:
                why = (f"fp32: {costs[fastest] / fp32:.2g}× faster than {fastest.short} here "
                       f"({fp32:.3g} vs {costs[fastest]:.3g} ms with casts, {where})"
                       if costs[fastest] >= fp32 else
                       f"fp32: {fastest.short} is not {TIE:.0%} faster here "
                       f"({costs[fastest]:.3g} vs {fp32:.3g} ms with casts, {where})")
            else:
                why = (f"{chosen.short}: allowed and {fp32 / costs[chosen]:.2g}× faster than "
                       f"fp32 here ({costs[chosen]:.3g} vs {fp32:.3g} ms with casts, {where})")
            for n in region:
                plan[id(n)] = chosen
                self.reasons[n.name] = why
        return plan

    def _cost(self, region: list[Node], q: DType, plan: Precision,
              producer: Mapping[int, Node], consumers: Mapping[int, list[Node]],
              outputs: Mapping[int, DType]) -> float:
        """Milliseconds of the region's layers in ``q`` and of the Casts its edges need."""
        inside = {id(n) for n in region}
        total = 0.0
        casts: set[tuple[int, DType]] = set()
        for n in region:
            spec, consts = _spec_in(n, q)
            total += self.timer.best_ms(spec, consts)
            for v in n.inputs:
                if v is None or v.is_const or not v.dtype.is_float:
                    continue
                p = producer.get(id(v))
                if p is not None and id(p) in inside:
                    continue
                have = (self.io_types.get(id(v), v.dtype) if p is None
                        else plan.get(id(p), v.dtype) if v.dtype is DType.FLOAT32 else v.dtype)
                need = have if n.op == "Cast" else q
                if need != have and (id(v), need) not in casts:
                    casts.add((id(v), need))
                    total += self._cast_ms(v, have, need)
            for v in n.outputs:
                if v.dtype is not DType.FLOAT32:
                    continue
                needs = {plan[id(c)] for c in consumers.get(id(v), [])
                         if id(c) not in inside and id(c) in plan and c.op != "Cast"}
                if id(v) in outputs:
                    needs.add(self.io_types.get(id(v), outputs[id(v)]))
                for need in needs - {q}:
                    total += self._cast_ms(v, q, need)
        return total

    def _cast_ms(self, v: Value, src: DType, dst: DType) -> float:
        spec = LayerSpec(f"{v.name}_to_{dst.short}", "Cast", {"to": int(dst)},
                         (TensorSpec(v.shape, src),), (TensorSpec(v.shape, dst),))
        return self.timer.best_ms(spec, [None])


def _spec_in(node: Node, q: DType) -> tuple[LayerSpec, list[np.ndarray | None]]:
    """The layer as it would run in ``q`` (the types precision.apply_precisions gives it),
    with its constants converted."""
    ins: list[TensorSpec | None] = []
    consts: list[np.ndarray | None] = []
    for v in node.inputs:
        if v is None:
            ins.append(None)
            consts.append(None)
            continue
        t = input_type(node, v, q)
        ins.append(TensorSpec(v.shape, t))
        if not v.is_const:
            consts.append(None)
        elif t is v.dtype:
            consts.append(np.asarray(v.const))
        else:
            consts.append(to_storage(to_compute(np.asarray(v.const), v.dtype), t))
    outs = tuple(TensorSpec(v.shape, q if v.dtype is DType.FLOAT32 else v.dtype)
                 for v in node.outputs)
    return LayerSpec(node.name, node.op, retyped_attrs(node, q), tuple(ins), outs), consts


def _regions(graph: Graph, plan: Precision, fixed: set[int],
             producer: Mapping[int, Node]) -> list[list[Node]]:
    """Connected groups of reduced-precision layers (not fixed by --layerPrecisions),
    joined where one reads another's output in the same type; in graph order."""
    reduced = [n for n in graph.nodes
               if id(n) in plan and plan[id(n)] is not DType.FLOAT32 and id(n) not in fixed]
    parent = {id(n): id(n) for n in reduced}

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for n in reduced:
        for v in n.inputs:
            p = None if v is None or v.is_const else producer.get(id(v))
            if p is not None and id(p) in parent and plan[id(p)] is plan[id(n)]:
                parent[root(id(n))] = root(id(p))
    groups: dict[int, list[Node]] = {}
    for n in reduced:
        groups.setdefault(root(id(n)), []).append(n)
    return list(groups.values())
