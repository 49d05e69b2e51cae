"""What ``pydla inspect`` finds in an ONNX model or a loadable, as JSON-ready dicts."""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import onnx
from onnx import helper

from pydla.loadable import Program
from pydla.loadable.format import MAGIC


def is_loadable(data: bytes) -> bool:
    return data[:len(MAGIC)] == MAGIC


# -- ONNX ---------------------------------------------------------------------------------
def _dtype_name(elem_type: int) -> str:
    try:
        return np.dtype(helper.tensor_dtype_to_np_dtype(elem_type)).name
    except (KeyError, TypeError, ValueError):  # bfloat16, float8, undefined
        return onnx.TensorProto.DataType.Name(elem_type).lower()


def _value_info(vi: onnx.ValueInfoProto) -> dict[str, Any]:
    tt = vi.type.tensor_type
    dims: list[int | str] | None = None
    if tt.HasField("shape"):
        dims = [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?")
                for d in tt.shape.dim]
    return {"name": vi.name, "shape": dims, "dtype": _dtype_name(tt.elem_type)}


def _nbytes(t: onnx.TensorProto) -> int:
    itemsize = np.dtype(helper.tensor_dtype_to_np_dtype(t.data_type)).itemsize
    return int(np.prod(t.dims, dtype=np.int64)) * itemsize


def _all_nodes(graph: onnx.GraphProto) -> Iterator[onnx.NodeProto]:
    """Every node, subgraphs (If/Loop bodies) included."""
    for node in graph.node:
        yield node
        for a in node.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                yield from _all_nodes(a.g)
            for g in a.graphs:
                yield from _all_nodes(g)


def _node_name(node: onnx.NodeProto, index: int) -> str:
    return node.name or f"{node.op_type}_{index}"  # the importer's naming


def unsupported_ops(model: onnx.ModelProto, opset: int) -> list[dict[str, Any]]:
    """Ops no importer handles at the model's opset, each with the reason and its nodes."""
    from pydla.frontend.onnx import import_model  # noqa: F401  (registers every importer)
    from pydla.frontend.onnx.registry import IMPORTERS, find_importer

    nodes: dict[tuple[str, str], list[str]] = {}
    for index, node in enumerate(_all_nodes(model.graph)):
        nodes.setdefault((node.domain, node.op_type), []).append(_node_name(node, index))
    found = []
    for (domain, op), names in sorted(nodes.items()):
        if domain not in ("", "ai.onnx"):
            reason = f"custom domain {domain!r}: pydla imports the default ONNX domain only"
        elif find_importer(op, opset) is None:
            later = [since for since, _ in IMPORTERS.get(op, [])]
            reason = (f"supported from opset {min(later)}; the model imports opset {opset}"
                      if later else f"no importer for {op}")
        else:
            continue
        found.append({"op": op, "domain": domain, "nodes": names, "reason": reason})
    return found


def _fixed_shapes(model: onnx.ModelProto, shapes: Mapping[str, Sequence[int]]
                  ) -> tuple[dict[str, tuple[int, ...]], dict[str, list[int]]]:
    """--shapes, plus every input left dynamic with its open dims set to 1 (so the model can
    be inspected at all); the second dict names the inputs so fixed."""
    inits = {t.name for t in model.graph.initializer}
    out = {k: tuple(v) for k, v in shapes.items()}
    guessed: dict[str, list[int]] = {}
    for vi in model.graph.input:
        if vi.name in inits or vi.name in out:
            continue
        dims = _value_info(vi)["shape"] or []
        if any(not isinstance(d, int) or d <= 0 for d in dims):
            out[vi.name] = tuple(d if isinstance(d, int) and d > 0 else 1 for d in dims)
            guessed[vi.name] = list(out[vi.name])
    return out, guessed


def inspect_onnx(model: onnx.ModelProto, options: Any) -> dict[str, Any]:
    """Inputs, outputs, op histogram, the builder's decisions (built in memory with its
    verbose log captured) and what cannot be imported, with reasons."""
    from pydla.builder import build
    from pydla.errors import PydlaError
    from pydla.frontend.onnx.importer import model_opset
    from pydla.loadable import read_loadable

    inits = {t.name for t in model.graph.initializer}
    ops = Counter(n.op_type for n in _all_nodes(model.graph))
    info: dict[str, Any] = {
        "kind": "onnx", "ir_version": model.ir_version,
        "producer": f"{model.producer_name} {model.producer_version}".strip(),
        "opset": None,
        "inputs": [_value_info(vi) for vi in model.graph.input if vi.name not in inits],
        "outputs": [_value_info(vo) for vo in model.graph.output],
        "initializers": {"count": len(inits),
                         "bytes": sum(_nbytes(t) for t in model.graph.initializer)},
        "nodes": sum(ops.values()),
        "ops": dict(ops.most_common()),
    }
    try:
        info["opset"] = opset = model_opset(model)
    except PydlaError as e:
        info["unsupported"] = [{"op": "", "domain": "", "nodes": [], "reason": str(e)}]
        info["build"] = {"ok": False, "error": str(e)}
        return info
    info["unsupported"] = unsupported_ops(model, opset)
    shapes, guessed = _fixed_shapes(model, options.shapes)
    log: list[str] = []
    # Timing kernels would make inspecting a large model slow and says nothing about its
    # structure; the tactics show in the loadable (inspect the .bin).
    options = dataclasses.replace(options, shapes=shapes, verbose=True, log=log.append,
                                  autotune=False)
    result: dict[str, Any] = {"fixed_dynamic_inputs": guessed}
    try:
        program = read_loadable(build(model, options))
    except PydlaError as e:
        result.update(ok=False, error=str(e), node=getattr(e, "node", None),
                      op=getattr(e, "op", None), log=log)
        info["build"] = result
        return info
    result.update(ok=True, layers=len(program.layers), log=log,
                  passes=dict(Counter(line.split(":", 1)[0] for line in log if ":" in line)))
    result["folded_nodes"] = _folded_nodes(model, program)
    info["build"] = result
    return info


def _folded_nodes(model: onnx.ModelProto, program: Program) -> dict[str, list[str]]:
    """ONNX nodes (top level) that no layer runs: evaluated at build time, or removed as
    identities or dead code — by op type."""
    used = {n for lay in program.layers for n in lay.fused_from}
    out: dict[str, list[str]] = {}
    for index, node in enumerate(model.graph.node):
        name = _node_name(node, index)
        if name not in used:
            out.setdefault(node.op_type, []).append(name)
    return out


# -- loadable -----------------------------------------------------------------------------
def inspect_loadable(program: Program) -> dict[str, Any]:
    from pydla.tools.layerinfo import layer_info

    def io(entry: Any) -> dict[str, Any]:
        t = program.tensors[entry.tensor]
        return {"name": t.name, "shape": list(t.shape), "dtype": t.dtype.name.lower(),
                "format": entry.format, "buffer_dtype": entry.dtype.name.lower(),
                "descriptor": dataclasses.asdict(entry.descriptor)}

    info = layer_info(program)
    return {
        "kind": "loadable", "version": ".".join(map(str, program.version)),
        "producer": program.producer, "target": program.target, "build": program.build,
        "inputs": [io(e) for e in program.inputs], "outputs": [io(e) for e in program.outputs],
        "precisions": dict(Counter(lay.precision for lay in program.layers)),
        "tactics": dict(Counter(lay.tactic for lay in program.layers)),
        **info,
    }
