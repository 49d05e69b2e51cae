"""Graph, Node and Value: every tensor has a fixed shape and a dtype.

Nodes use pydla's canonical op set: ONNX op names whose build-time parameter inputs (shapes,
axes, pads, …) have been folded into attributes, plus fused ops the passes create. A Value
with ``const`` set is a weight; no node produces it.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pydla.dtypes import DType


@dataclass(eq=False)
class Value:
    name: str
    shape: tuple[int, ...]
    dtype: DType
    const: np.ndarray | None = None
    producer: Node | None = field(default=None, repr=False)
    # Storage layout of the tensor inside the engine ("linear" unless a pass chose another).
    layout: str = "linear"

    @property
    def is_const(self) -> bool:
        return self.const is not None

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    def __repr__(self) -> str:
        kind = "const " if self.is_const else ""
        return f"Value({kind}{self.name!r}, {self.shape}, {self.dtype.name.lower()})"


@dataclass(eq=False)
class Node:
    op: str
    name: str
    inputs: list[Value | None]
    outputs: list[Value]
    attrs: dict[str, Any] = field(default_factory=dict)
    # ONNX node names this layer was built from (grows as passes fuse nodes).
    fused_from: list[str] = field(default_factory=list)
    precision: str | None = None
    tactic: str | None = None

    def __post_init__(self) -> None:
        for out in self.outputs:
            out.producer = self
        if not self.fused_from:
            self.fused_from = [self.name]

    def __repr__(self) -> str:
        ins = ", ".join("-" if v is None else v.name for v in self.inputs)
        outs = ", ".join(v.name for v in self.outputs)
        return f"Node({self.op} {self.name!r}: {ins} -> {outs})"


class Graph:
    """Nodes in topological order, with graph inputs and outputs."""

    def __init__(self, name: str = "graph") -> None:
        self.name = name
        self.inputs: list[Value] = []
        self.outputs: list[Value] = []
        self.nodes: list[Node] = []
        self.opset: int = 0
        # Loop bodies: a Loop node's attrs["body"] indexes this list (pydla.frontend.onnx.ops.
        # loop_layer); each is a graph of its own, optimized and lowered as a sub-program.
        self.bodies: list[Graph] = []
        self._names: set[str] = set()
        self._node_names: set[str] = set()
        self._counter = itertools.count()

    def unique_name(self, base: str) -> str:
        """A tensor name not used yet in this graph."""
        return self._unique(base or "t", self._names)

    def unique_node_name(self, base: str) -> str:
        """A layer name not used yet in this graph (layers and tensors have separate names)."""
        return self._unique(base or "node", self._node_names)

    def _unique(self, base: str, used: set[str]) -> str:
        name = base
        while name in used:
            name = f"{base}_{next(self._counter)}"
        used.add(name)
        return name

    def reserve_name(self, name: str) -> None:
        self._names.add(name)

    def add_node(self, node: Node) -> Node:
        self.nodes.append(node)
        return node

    def constants(self) -> Iterator[Value]:
        seen: set[int] = set()
        for node in self.nodes:
            for v in node.inputs:
                if v is not None and v.is_const and id(v) not in seen:
                    seen.add(id(v))
                    yield v
        for v in self.outputs:
            if v.is_const and id(v) not in seen:
                seen.add(id(v))
                yield v

    def consumers(self) -> dict[int, list[Node]]:
        """Map id(value) → nodes that read it."""
        users: dict[int, list[Node]] = {}
        for node in self.nodes:
            for v in node.inputs:
                if v is not None:
                    users.setdefault(id(v), []).append(node)
        return users

    def add_output(self, name: str, value: Value) -> Value:
        """Make ``value`` a graph output called ``name`` (its ONNX name: the interface).

        Importers alias tensors (an ONNX Identity returns its input), so the value bound to
        an output name may carry another name. An internal tensor takes the output's name;
        a graph input, a constant or a tensor that is already an output is copied by an
        Identity layer whose result has the name, so every output is a distinct tensor
        written by a layer under the name the model gave it.
        """
        if value.name == name and self._owns_name(value):
            out = value
        elif value.name != name and self._can_take_name(value):
            value.name = name
            out = value
        else:
            out = Value(name, value.shape, value.dtype)
            self.add_node(Node("Identity", self.unique_node_name(f"{name}_copy"), [value], [out]))
        self.reserve_name(name)
        self.outputs.append(out)
        return out

    def _owns_name(self, v: Value) -> bool:
        """``v`` can be an output under its own name: a layer writes it, no output has it."""
        return (v.producer is not None and not v.is_const
                and not any(o is v for o in self.outputs))

    def _can_take_name(self, v: Value) -> bool:
        return self._owns_name(v) and not any(i is v for i in self.inputs)

    def replace_uses(self, old: Value, new: Value, nodes: Iterable[Node] | None = None) -> bool:
        """Make the readers of ``old`` read ``new``; returns whether anything changed.

        A graph output never changes its name: when ``old`` is one, ``new`` takes over the
        output and its name if a layer writes it and it is no graph input or output yet;
        otherwise nothing changes and False tells the caller to keep ``old``'s producer.
        """
        if old is new:
            return False
        if any(v is old for v in self.outputs):
            if not self._can_take_name(new):
                return False
            new.name = old.name
            self.outputs = [new if v is old else v for v in self.outputs]
        for node in self.nodes if nodes is None else nodes:
            node.inputs = [new if v is old else v for v in node.inputs]
        return True

    def remove_dead(self) -> bool:
        """Drop nodes whose outputs nobody reads; returns whether anything changed."""
        live: set[int] = {id(v) for v in self.outputs}
        kept: list[Node] = []
        for node in reversed(self.nodes):
            if any(id(o) in live for o in node.outputs):
                kept.append(node)
                live.update(id(v) for v in node.inputs if v is not None)
        changed = len(kept) != len(self.nodes)
        self.nodes = kept[::-1]
        return changed

    def __repr__(self) -> str:
        lines = [f"Graph {self.name!r}"]
        lines += [f"  input {v}" for v in self.inputs]
        lines += [f"  {n}" for n in self.nodes]
        lines += [f"  output {v}" for v in self.outputs]
        return "\n".join(lines)
