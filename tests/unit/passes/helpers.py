"""Shared helpers of the pass tests: import a small ONNX graph, run passes with the IR
verifier after each, and compare the rewritten graph against onnxruntime on the original."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx
from onnx import helper

from pydla.engine import LoadedModule
from pydla.frontend.onnx import import_model
from pydla.ir import Graph, verify
from pydla.loadable import write_loadable
from pydla.passes import Pass, PassContext
from pydla.plan.lower import lower
from tests.oracle import assert_close, make_model, run_ort

F32 = np.float32
Shape = Sequence[int]


def node(op: str, inputs: Sequence[str], output: str | Sequence[str], **attrs: Any
         ) -> onnx.NodeProto:
    outs = [output] if isinstance(output, str) else list(output)
    return helper.make_node(op, list(inputs), outs, name=f"{op}_{outs[0]}", **attrs)


def model(nodes: Sequence[onnx.NodeProto], inputs: Mapping[str, Shape],
          outputs: Sequence[str], inits: Mapping[str, np.ndarray] | None = None,
          opset: int = 17) -> onnx.ModelProto:
    """A float32 model (the usual case of every pass test)."""
    return make_model(nodes, {k: (F32, v) for k, v in inputs.items()}, outputs,
                      {k: np.asarray(v) for k, v in (inits or {}).items()}, opset)


def imported(m: onnx.ModelProto) -> Graph:
    g = import_model(m)
    g.remove_dead()
    verify(g)
    return g


def apply(graph: Graph, *passes: Pass, ctx: PassContext | None = None) -> bool:
    """Run each pass once, in order, verifying the IR after each; whether any changed it."""
    ctx = ctx or PassContext()
    changed = False
    for p in passes:
        changed = p.run(graph, ctx) or changed
        verify(graph)
    return changed


def ops(graph: Graph) -> list[str]:
    return [n.op for n in graph.nodes]


def feeds_for(m: onnx.ModelProto, seed: int = 0, scale: float = 1.0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    out = {}
    for vi in m.graph.input:
        shape = [d.dim_value for d in vi.type.tensor_type.shape.dim]
        out[vi.name] = (scale * rng.standard_normal(shape)).astype(F32)
    return out


def run_graph(graph: Graph, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    """Lower the (rewritten) graph to a loadable and run it on the CPU backend."""
    meta, weights = lower(graph)
    module = LoadedModule(write_loadable(meta, weights))
    return module.run({k: v for k, v in feeds.items() if k in module.input_names})


def assert_matches_ort(m: onnx.ModelProto, graph: Graph, feeds: Mapping[str, np.ndarray]
                       | None = None, rtol: float = 1e-4, atol: float = 1e-5) -> None:
    """The rewritten graph computes what onnxruntime computes for the original model."""
    feeds = feeds if feeds is not None else feeds_for(m)
    assert_close(run_graph(graph, feeds), run_ort(m, feeds), rtol, atol,
                 [o.name for o in m.graph.output])
