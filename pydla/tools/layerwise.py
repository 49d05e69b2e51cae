"""Both sides of a layer-by-layer comparison.

pydla's side: every layer output, copied right after its layer runs (the arena reuses the
bytes later). onnxruntime's side: every intermediate ONNX value, made a graph output of a
copy of the model. ``reference_names`` pairs them: a layer output usually carries the name of
the ONNX tensor it stands for, but a fused layer may keep the name of a value *inside* the
group (a Conv with its BatchNormalization folded in keeps the Conv's output name while it
computes the BatchNormalization's), so a name that the layer's own fused nodes consume is
replaced by the output of the group's last node. Values that fusion removed from the engine
have no counterpart and are not compared.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np
import onnx
from onnx import helper

from pydla.dtypes import to_compute
from pydla.engine import LoadedModule
from pydla.engine.inputs import check_input
from pydla.errors import PydlaError
from pydla.loadable import Program

if TYPE_CHECKING:
    import onnxruntime


def ort_session(model: onnx.ModelProto) -> onnxruntime.InferenceSession:
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), opts,
                                providers=["CPUExecutionProvider"])


def run_ort(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    sess = ort_session(model)
    names = [o.name for o in sess.get_outputs()]
    return {n: _as_tensor(v) for n, v in zip(names, sess.run(names, dict(feeds)))}


def _as_tensor(value: object) -> np.ndarray:
    """A ZipMap output (onnxruntime's list of {label: probability}) as the (N, C) tensor a
    loadable holds for it (docs/builder.md, "ZipMap"); any other output as it is."""
    if isinstance(value, list):
        return np.array([list(row.values()) for row in value], np.float32)
    return np.asarray(value)


def with_all_outputs(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``model`` whose graph outputs include every typed intermediate value."""
    inferred = onnx.shape_inference.infer_shapes(model)
    types = {vi.name: vi.type.tensor_type.elem_type
             for vi in (*inferred.graph.value_info, *inferred.graph.output)}
    out = onnx.ModelProto()
    out.CopyFrom(model)
    have = {o.name for o in out.graph.output}
    for node in out.graph.node:
        for name in node.output:
            if name and name not in have and types.get(name):
                out.graph.output.append(helper.make_tensor_value_info(name, types[name], None))
                have.add(name)
    return out


def capture_layers(module: LoadedModule, inputs: Sequence[np.ndarray]) -> dict[int, np.ndarray]:
    """Run once; tensor index → a copy of every layer output (as the kernels computed it:
    half types widened to float32 for comparison)."""
    bound = module.bound
    views = getattr(bound, "views", None)
    if views is None:
        raise PydlaError(f"layerwise capture needs arena views; {type(bound).__name__} has none")
    prog = module.program
    captured: dict[int, np.ndarray] = {}

    def hook(index: int, start_ns: int, end_ns: int) -> None:
        for t in prog.layers[index].outputs:
            captured[t] = np.array(to_compute(views[t], prog.tensors[t].dtype), copy=True)

    tensors = [prog.tensors[io.tensor] for io in prog.inputs]
    in_arrays = [check_input(t.name, x, t.shape, t.dtype, PydlaError)
                 for x, t in zip(inputs, tensors)]
    out_arrays = [np.empty(prog.tensors[io.tensor].shape, prog.tensors[io.tensor].dtype.np)
                  for io in prog.outputs]
    bound.execute(in_arrays, out_arrays, hook)
    return captured


def reference_names(program: Program, model: onnx.ModelProto) -> dict[int, str]:
    """Tensor index of each layer output → the ONNX value holding the same numbers."""
    producer: dict[str, str] = {}
    outputs: dict[str, list[str]] = {}
    consumers: dict[str, set[str]] = {}
    for index, node in enumerate(model.graph.node):
        name = node.name or f"{node.op_type}_{index}"  # the importer's naming
        outputs[name] = [o for o in node.output if o]
        for o in outputs[name]:
            producer[o] = name
        for i in node.input:
            consumers.setdefault(i, set()).add(name)
    found: dict[int, str] = {}
    for lay in program.layers:
        group = set(lay.fused_from)
        for t in lay.outputs:
            name = program.tensors[t].name
            inside = consumers.get(name, set()) & group - {producer.get(name)}
            if name in producer and not inside:
                found[t] = name
            elif len(lay.outputs) == 1:
                last = [o for n in group for o in outputs.get(n, [])
                        if not consumers.get(o, set()) & group]
                if len(last) == 1:
                    found[t] = last[0]
    return found
