"""Split an ONNX model into DLA-capable parts and the rest, tensor names kept.

Each ONNX node takes the device of the checked layer it became part of (a batch norm folded
into a convolution goes with the convolution). Nodes the folding removed (constants, shape
arithmetic, identities) have no layer: each part that needs one of their results gets its
own copy of them, with their own inputs — they are pure functions, so copies agree. Parts
are runs of one device in the model's (topological) node order, so running the parts in
order, each fed from the model's inputs and earlier parts' outputs, computes the model.

The manifest (``manifest.json``) lists the model's inputs and outputs and the parts in
execution order: ``{"file", "device": "dla"|"gpu", "inputs", "outputs"}``. On a Jetson each
DLA part builds with ``trtexec --useDLACore=N --buildDLAStandalone``; the application
stitches the loadables (cuDLA) and the GPU parts (TensorRT or CUDA) in that order.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import helper

from pydla.dla.checker import DlaReport


@dataclass(frozen=True)
class Part:
    device: str
    nodes: tuple[int, ...]  # indices into the model's nodes, in order
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]


def node_devices(model: onnx.ModelProto, report: DlaReport) -> list[str | None]:
    """Per ONNX node: "dla", "gpu", or None where no layer holds it (folded away)."""
    device_of: dict[str, str] = {}
    for verdict in report.layers:
        for name in verdict.onnx_nodes:
            if device_of.get(name) != "gpu":  # a node in two layers runs where the GPU one does
                device_of[name] = "dla" if verdict.supported else "gpu"
    return [device_of.get(n.name) if n.name else None for n in model.graph.node]


def plan_parts(model: onnx.ModelProto, devices: Sequence[str | None]) -> list[Part]:
    graph = model.graph
    nodes = list(graph.node)
    producer = {out: i for i, n in enumerate(nodes) for out in n.output if out}
    initializers = {t.name for t in graph.initializer}
    graph_outputs = [v.name for v in graph.output]

    runs: list[tuple[str, list[int]]] = []
    for i, device in enumerate(devices):
        if device is None:
            continue
        if runs and runs[-1][0] == device:
            runs[-1][1].append(i)
        else:
            runs.append((device, [i]))
    # Graph outputs computed by folded nodes only (constants) go with the last part.
    if not runs:
        runs.append(("gpu", []))
    needed_free = [producer[o] for o in graph_outputs
                   if o in producer and devices[producer[o]] is None]
    runs[-1][1].extend(needed_free)

    members: list[set[int]] = []
    for _, assigned in runs:
        chosen = set(assigned)
        stack = [j for i in assigned for j in _producers(nodes[i], producer)]
        while stack:  # pull in the folded ancestors this part needs
            j = stack.pop()
            if devices[j] is None and j not in chosen:
                chosen.add(j)
                stack.extend(_producers(nodes[j], producer))
        members.append(chosen)

    consumed_later: list[set[str]] = [set() for _ in runs]
    for p in range(len(runs) - 2, -1, -1):
        later = consumed_later[p + 1] | {x for i in members[p + 1] for x in node_inputs(nodes[i])}
        consumed_later[p] = later
    parts = []
    for p, (device, _) in enumerate(runs):
        order = sorted(members[p])
        made = {o for i in order for o in nodes[i].output if o}
        used = [x for i in order for x in node_inputs(nodes[i])]
        inputs = _unique(x for x in used if x not in made and x not in initializers)
        wanted = consumed_later[p] | set(graph_outputs)
        outputs = _unique(o for i in order for o in nodes[i].output
                          if o and o in wanted and not (devices[i] is None
                                                        and o not in graph_outputs))
        parts.append(Part(device, tuple(order), tuple(inputs), tuple(outputs)))
    return parts


def _producers(node: onnx.NodeProto, producer: Mapping[str, int]) -> list[int]:
    return [producer[x] for x in node_inputs(node) if x in producer]


def node_inputs(node: onnx.NodeProto) -> list[str]:
    """The tensors a node reads: its inputs, and the outer-scope names its subgraphs (an
    If's branches, a Loop's body) use without defining — a part holding the node must
    receive those too."""
    names = [x for x in node.input if x]
    for attr in node.attribute:
        graphs = [attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)
        for g in graphs:
            names.extend(_captured(g))
    return names


def _captured(g: onnx.GraphProto) -> list[str]:
    defined = {v.name for v in g.input} | {t.name for t in g.initializer}
    out = []
    for n in g.node:
        out.extend(x for x in node_inputs(n) if x not in defined)
        defined.update(n.output)
    return out


def _unique(names: Any) -> list[str]:
    seen: dict[str, None] = {}
    for n in names:
        seen.setdefault(n, None)
    return list(seen)


def _value_infos(model: onnx.ModelProto,
                 shapes: Mapping[str, Sequence[int]] | None) -> dict[str, onnx.ValueInfoProto]:
    """Every tensor's type (and static shape where known), after fixing the input shapes."""
    fixed = onnx.ModelProto()
    fixed.CopyFrom(model)
    for v in fixed.graph.input:
        if shapes and v.name in shapes:
            dims = v.type.tensor_type.shape.dim
            del dims[:]
            for d in shapes[v.name]:
                dims.add().dim_value = int(d)
    try:
        fixed = onnx.shape_inference.infer_shapes(fixed, data_prop=True)
    except Exception:  # noqa: BLE001  (an op onnx cannot infer: types stay unknown there)
        pass
    infos = {v.name: v for v in fixed.graph.value_info}
    infos.update({v.name: v for v in fixed.graph.input})
    infos.update({v.name: v for v in fixed.graph.output})
    return infos


def write_parts(model: onnx.ModelProto, parts: Sequence[Part], out_dir: str | os.PathLike[str],
                shapes: Mapping[str, Sequence[int]] | None = None) -> dict[str, Any]:
    """Write one ONNX file per part and ``manifest.json``; returns the manifest."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    infos = _value_infos(model, shapes)
    inits = {t.name: t for t in model.graph.initializer}
    nodes = list(model.graph.node)
    initializers = set(inits)
    manifest: dict[str, Any] = {
        "inputs": [v.name for v in model.graph.input if v.name not in initializers],
        "outputs": [v.name for v in model.graph.output], "parts": []}
    for index, part in enumerate(parts):
        chosen = [nodes[i] for i in part.nodes]
        used = {x for n in chosen for x in node_inputs(n)}
        graph = helper.make_graph(
            chosen, f"{model.graph.name or 'model'}_part{index}_{part.device}",
            [_info(infos, name) for name in part.inputs],
            [_info(infos, name) for name in part.outputs],
            [inits[name] for name in sorted(used & initializers)])
        sub = helper.make_model(graph, opset_imports=list(model.opset_import),
                                ir_version=model.ir_version,
                                producer_name="pydla partition")
        name = f"part_{index:02d}_{part.device}.onnx"
        onnx.save(sub, out / name)
        manifest["parts"].append({"file": name, "device": part.device,
                                  "inputs": list(part.inputs), "outputs": list(part.outputs)})
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest


def _info(infos: Mapping[str, onnx.ValueInfoProto], name: str) -> onnx.ValueInfoProto:
    found = infos.get(name)
    if found is not None:
        return found
    return helper.make_tensor_value_info(name, onnx.TensorProto.UNDEFINED, None)


def run_parts(manifest: Mapping[str, Any], out_dir: str | os.PathLike[str],
              feeds: Mapping[str, np.ndarray], session: Any) -> dict[str, np.ndarray]:
    """Run the parts in order with ``session(path) -> object with .run(names, feeds)`` (an
    onnxruntime InferenceSession factory); returns the model's outputs by name."""
    tensors = dict(feeds)
    for part in manifest["parts"]:
        sess = session(str(Path(out_dir) / part["file"]))
        got = sess.run(part["outputs"], {k: tensors[k] for k in part["inputs"]})
        tensors.update(zip(part["outputs"], got))
    return {name: tensors[name] for name in manifest["outputs"]}


def named_copy(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model with every node named (``Op_index`` where it had no name), so that layers
    map back to their nodes."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    taken = {n.name for n in copy.graph.node if n.name}
    for index, node in enumerate(copy.graph.node):
        if not node.name:
            name = f"{node.op_type}_{index}"
            while name in taken:
                name += "_"
            node.name = name
            taken.add(name)
    return copy


def partition_model(model: onnx.ModelProto | str | os.PathLike[str] | bytes,
                    out_dir: str | os.PathLike[str], precision: str = "fp16",
                    shapes: Mapping[str, Sequence[int]] | None = None,
                    input_values: Mapping[str, np.ndarray] | None = None,
                    adjust: bool = False) -> tuple[dict[str, Any], DlaReport]:
    """Check ``model`` for the DLA and write its parts and manifest into ``out_dir``
    (``adjust``: of the model as ``--adjust`` rewrites it)."""
    from pydla.builder import load_model
    from pydla.dla import check_model
    from pydla.dla.adjust import adjust_for_dla

    proto = load_model(model)
    rewrites: list[str] = []
    if adjust:
        proto, rewrites = adjust_for_dla(proto)
    named = named_copy(proto)
    report = check_model(named, precision, shapes, input_values)
    report.notes[:0] = [f"adjusted: {line}" for line in rewrites]
    parts = plan_parts(named, node_devices(named, report))
    return write_parts(named, parts, out_dir, shapes), report
