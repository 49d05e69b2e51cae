"""Activation memory planning as a pure function of sizes and lifetimes."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pydla.engine.memory import format_bytes, tensor_bytes
from pydla.errors import ResourceLimitError
from pydla.ir import Graph, Value
from pydla.loadable.format import MAX_DIM


@dataclass(frozen=True)
class Lifetime:
    size: int
    first: int  # index of the step that writes it (-1: alive before the first step)
    last: int  # index of the last step that reads it


def plan_memory(lifetimes: Sequence[Lifetime], alignment: int = 64) -> tuple[list[int], int]:
    """Assign arena offsets so that tensors alive at the same time never share bytes.

    Greedy by size (largest first), each tensor placed at the lowest aligned offset that does
    not collide with an already placed tensor whose lifetime overlaps. Returns
    (offsets, arena_bytes).
    """
    order = sorted(range(len(lifetimes)), key=lambda i: (-lifetimes[i].size, lifetimes[i].first))
    placed: list[tuple[int, int, int]] = []  # (offset, end, index)
    offsets = [0] * len(lifetimes)
    arena = 0
    for i in order:
        lt = lifetimes[i]
        size = -(-lt.size // alignment) * alignment
        busy = sorted((o, e) for o, e, j in placed
                      if not (lifetimes[j].last < lt.first or lt.last < lifetimes[j].first))
        offset = 0
        for o, e in busy:
            if offset + size <= o:
                break
            offset = max(offset, -(-e // alignment) * alignment)
        offsets[i] = offset
        placed.append((offset, offset + size, i))
        arena = max(arena, offset + size)
    return offsets, arena


# -- the build's memory estimate --------------------------------------------------------
# A model is untrusted input: before the builder allocates anything that scales with a
# tensor (autotuning samples, calibration runs, folded constants), it adds up what the
# graph will need and refuses one line naming the tensor, instead of dying in numpy.


@dataclass(frozen=True)
class BuildMemory:
    """What a build holds at its peak, in bytes (an estimate, rounded up)."""

    weights: int  # constants, including those constant folding may still create
    activations: int  # the most activation bytes alive at one step (no arena reuse lost)
    autotune: int  # the largest layer's sample inputs and candidate outputs
    calibration: int  # every activation of one calibration run (kept for the ranges)

    @property
    def total(self) -> int:
        return self.weights + self.activations + self.autotune + self.calibration


def _bytes(v: Value) -> int:
    return tensor_bytes(v.shape, v.dtype.itemsize)


def estimate_build_memory(graph: Graph, *, autotune: bool, calibration: bool,
                          fold_limit: int) -> BuildMemory:
    weights = sum(_bytes(v) for v in _consts(graph))
    # Nodes that read only constants, directly or through other such nodes, are what
    # constant folding may evaluate (each output up to its size limit).
    foldable: set[int] = set()
    folded = 0
    for node in graph.nodes:
        if all(v is None or v.is_const or id(v) in foldable for v in node.inputs):
            foldable.update(id(v) for v in node.outputs)
            folded += sum(b for b in map(_bytes, node.outputs) if b <= fold_limit)
    last: dict[int, int] = {}
    for i, node in enumerate(graph.nodes):
        for v in node.inputs:
            if v is not None and not v.is_const:
                last[id(v)] = i
    end = len(graph.nodes)
    for v in graph.outputs:
        last[id(v)] = end
    delta = [0] * (end + 3)  # bytes born at step i+1 (inputs: 0) and freed after their last
    for first, values in ((-1, graph.inputs),
                          *((i, n.outputs) for i, n in enumerate(graph.nodes))):
        for v in values:
            b = _bytes(v)
            delta[first + 1] += b
            delta[max(last.get(id(v), first), first) + 2] -= b
    live = peak = 0
    for d in delta:
        live += d
        peak = max(peak, live)
    tune = 0
    if autotune:
        for node in graph.nodes:
            # float inputs are drawn in float64, then cast; candidates write their own outputs
            ins = sum(_bytes(v) * (1 + 8 // v.dtype.itemsize) for v in node.inputs
                      if v is not None and not v.is_const)
            tune = max(tune, ins + 2 * sum(map(_bytes, node.outputs)))
    calib = (sum(_bytes(v) for n in graph.nodes for v in n.outputs) + sum(map(_bytes, graph.inputs))
             if calibration else 0)
    return BuildMemory(weights + folded, peak, tune, calib)


def check_build_memory(graph: Graph, limit: int, how_to_raise: str, *, autotune: bool,
                       calibration: bool, fold_limit: int) -> BuildMemory:
    """Refuse (ResourceLimitError) a graph with a tensor, or a total estimate, beyond
    ``limit`` bytes; ``how_to_raise`` ends the message."""
    tail = f"the build memory limit is {format_bytes(limit)}; {how_to_raise}"
    values = [("input", v) for v in graph.inputs] + [("weight", v) for v in _consts(graph)]
    values += [(f"output of {n.op} {n.name!r}", v) for n in graph.nodes for v in n.outputs]
    for role, v in values:
        b = _bytes(v)
        if b > limit:
            raise ResourceLimitError(f"tensor {v.name!r} ({role}, {list(v.shape)} "
                                     f"{v.dtype.name.lower()}) needs {format_bytes(b)}; {tail}")
        if any(d > MAX_DIM for d in v.shape):
            # the reader's bound (pydla.loadable.format): the builder writes nothing it refuses
            raise ResourceLimitError(f"tensor {v.name!r} ({role}, {list(v.shape)}) has a "
                                     f"dimension over {MAX_DIM:,} (2**31 - 1)")
    need = estimate_build_memory(graph, autotune=autotune, calibration=calibration,
                                 fold_limit=fold_limit)
    if need.total > limit:
        largest = max((v for _, v in values), key=_bytes)
        raise ResourceLimitError(
            f"the build needs about {format_bytes(need.total)} (weights {need.weights:,}, "
            f"activations {need.activations:,}, autotuning {need.autotune:,}, calibration "
            f"{need.calibration:,}; largest tensor {largest.name!r} {list(largest.shape)}); "
            f"{tail}")
    return need


def _consts(graph: Graph) -> list[Value]:
    seen: dict[int, Value] = {}
    for node in graph.nodes:
        for v in node.inputs:
            if v is not None and v.is_const:
                seen.setdefault(id(v), v)
    return list(seen.values())
