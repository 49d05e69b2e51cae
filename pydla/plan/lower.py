"""Lower a finished IR graph into loadable metadata: tensor table, layers, I/O, arena plan."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from pydla import __version__, formats
from pydla.dtypes import DType
from pydla.errors import BuildError
from pydla.ir import Graph, Node, Value
from pydla.plan.aliasing import plan_aliases
from pydla.plan.memory import Lifetime, plan_memory


@dataclass(frozen=True)
class IOFormat:
    """One --inputIOFormats/--outputIOFormats entry; dtype None takes the tensor's type."""

    dtype: DType | None
    format: str


def finalize_outputs(graph: Graph) -> None:
    """Every graph output must be a distinct tensor written by a layer: copy the others."""
    seen: set[int] = set()
    inputs = {id(v) for v in graph.inputs}
    for i, v in enumerate(graph.outputs):
        if v.is_const or id(v) in inputs or id(v) in seen:
            out = Value(graph.unique_name(f"{v.name}_copy"), v.shape, v.dtype)
            graph.add_node(Node("Identity", graph.unique_node_name(f"{v.name}_copy"), [v], [out]))
            graph.outputs[i] = out
            v = out
        seen.add(id(v))


def _io_entries(values: Sequence[Value], fmts: Sequence[IOFormat] | None, kind: str,
                index: dict[int, int]) -> list[dict[str, Any]]:
    if fmts is not None and len(fmts) not in (0, len(values)):
        raise BuildError(f"--{kind}IOFormats has {len(fmts)} entries, the network has "
                         f"{len(values)} {kind}s (one entry per {kind}, in order)")
    entries = []
    for i, v in enumerate(values):
        f = fmts[i] if fmts else IOFormat(None, "chw")
        dtype = f.dtype or v.dtype
        try:
            formats.check_format(f.format, v.shape, dtype)
            desc = formats.describe(v.name, f.format, v.shape, dtype)
        except formats.FormatError as e:
            raise BuildError(f"{kind} {v.name!r} {v.shape} {dtype.short}: {e}") from None
        if dtype is not v.dtype and not (dtype.is_float and v.dtype.is_float):
            raise BuildError(f"{kind} {v.name!r} is {v.dtype.short}; an I/O type of "
                             f"{dtype.short} would need a lossy cast")
        d = dict(desc.__dict__)
        d["stride"] = list(d["stride"])
        entries.append({"tensor": index[id(v)], "format": f.format,
                        "dtype": dtype.name.lower(), "descriptor": d})
    return entries


def lower(graph: Graph, *, input_formats: Sequence[IOFormat] | None = None,
          output_formats: Sequence[IOFormat] | None = None, target: dict[str, Any] | None = None,
          build: dict[str, Any] | None = None) -> tuple[dict[str, Any], dict[Any, np.ndarray]]:
    """Return (metadata, weights by tensor index) for ``write_loadable``."""
    finalize_outputs(graph)
    tensors: list[dict[str, Any]] = []
    index: dict[int, int] = {}
    weights: dict[Any, np.ndarray] = {}
    outputs = {id(v) for v in graph.outputs}

    def add(v: Value, kind: str) -> int:
        if id(v) in index:
            return index[id(v)]
        index[id(v)] = len(tensors)
        tensors.append({"name": v.name, "shape": list(v.shape), "dtype": v.dtype.name.lower(),
                        "kind": kind, "offset": 0, "nbytes": v.nbytes})
        if kind == "weight":
            weights[index[id(v)]] = v.const  # type: ignore[assignment]
        return index[id(v)]

    for v in graph.inputs:
        add(v, "input")
    aliases = plan_aliases(graph)
    layers = []
    subprograms: list[dict[str, Any]] = []
    for node in graph.nodes:
        ins = [-1 if v is None else add(v, "weight" if v.is_const else "activation")
               for v in node.inputs]
        outs = [add(v, "output" if id(v) in outputs else "activation") for v in node.outputs]
        attrs = node.attrs
        if node.op == "Loop":  # its body becomes a sub-program (pydla.loadable.rules_control)
            attrs = {**attrs, "body": _lower_body(graph.bodies[attrs["body"]], subprograms,
                                                  weights)}
        layers.append({"name": node.name, "op": node.op, "inputs": ins, "outputs": outs,
                       "attrs": attrs, "fused_from": list(node.fused_from),
                       "precision": node.precision or _precision(node),
                       "tactic": node.tactic or "reference"})

    # Lifetimes: network I/O live for the whole run; activations from writer to last reader.
    end = len(layers)
    first = {i: -1 for i, t in enumerate(tensors) if t["kind"] in ("input", "output")}
    last = {i: end for i in first}
    for li, lay in enumerate(layers):
        for ref in lay["outputs"]:
            first.setdefault(ref, li)
            last.setdefault(ref, li)
        for ref in lay["inputs"]:
            if ref >= 0 and tensors[ref]["kind"] == "activation":
                last[ref] = max(last.get(ref, li), li)
    # One buffer per alias group, alive from its first member's write to its last read.
    parent = {index[k]: (index[id(a.parent)], a) for k, a in aliases.items()}

    def root(i: int) -> tuple[int, int]:
        rel = 0
        while i in parent:
            i, a = parent[i]
            rel += a.offset
        return i, rel

    arena_ids = [i for i, t in enumerate(tensors) if t["kind"] != "weight"]
    roots = [i for i in arena_ids if i not in parent]
    span = {r: [first[r], last[r]] for r in roots}
    for i in arena_ids:
        r, _ = root(i)
        span[r][0] = min(span[r][0], first[i])
        span[r][1] = max(span[r][1], last[i])
    offsets, arena = plan_memory([Lifetime(tensors[r]["nbytes"], *span[r]) for r in roots])
    placed = dict(zip(roots, offsets))
    for i in arena_ids:
        r, rel = root(i)
        tensors[i]["offset"] = placed[r] + rel
        if i in parent:
            p, a = parent[i]
            tensors[i]["alias"] = {"tensor": p, "offset": a.offset, "kind": a.kind}

    meta = {
        "producer": {"name": "pydla", "version": __version__},
        "target": target or {"backend": "cpu"},
        "build": build or {},
        "tensors": tensors,
        "layers": layers,
        "inputs": _io_entries(graph.inputs, input_formats, "input", index),
        "outputs": _io_entries(graph.outputs, output_formats, "output", index),
        "arena_bytes": arena,
    }
    if subprograms:
        meta["subprograms"] = subprograms
    return meta, weights


def _lower_body(body: Graph, subprograms: list[dict[str, Any]],
                weights: dict[Any, np.ndarray]) -> int:
    """Lower a Loop body as sub-program ``len(subprograms)``; its weights join ``weights``
    under ``(k, tensor index)`` (write_loadable puts them in the one weights section)."""
    meta, body_weights = lower(body)
    k = len(subprograms)
    subprograms.append({key: meta[key] for key in
                        ("tensors", "layers", "inputs", "outputs", "arena_bytes")})
    weights.update({(k, i): w for i, w in body_weights.items()})
    return k


def _precision(node: Node) -> str:
    floats = [v.dtype for v in node.outputs if v.dtype.is_float]
    return floats[0].short if floats else node.outputs[0].dtype.short if node.outputs else "fp32"
