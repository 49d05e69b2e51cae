"""Run an IR graph on sample inputs with the CPU kernels and record every tensor's range."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from pydla.backends.cpu.backend import bind_layer
from pydla.dtypes import to_compute
from pydla.errors import BuildError
from pydla.ir import Graph
from pydla.plan.tactics import layer_spec


def evaluate(graph: Graph, feeds: Mapping[str, np.ndarray]) -> dict[int, np.ndarray]:
    """Every tensor's value (by id of its IR Value) for one set of inputs."""
    values: dict[int, np.ndarray] = {}
    for v in graph.inputs:
        if v.name not in feeds:
            raise BuildError(f"calibration data has no input {v.name!r} "
                             f"(it has {sorted(feeds)})")
        x = np.asarray(feeds[v.name])
        if x.shape != v.shape:
            raise BuildError(f"calibration input {v.name!r} has shape {x.shape}, the engine "
                             f"is built for {v.shape}")
        values[id(v)] = x.astype(v.dtype.np, copy=False)
    for node in graph.nodes:
        spec = layer_spec(node)
        ins = [None if v is None else (v.const if v.is_const else values[id(v)])
               for v in node.inputs]
        outs = [np.empty(v.shape, v.dtype.np) for v in node.outputs]
        with np.errstate(all="ignore"):
            bind_layer(spec)(ins, outs)
        for v, a in zip(node.outputs, outs):
            values[id(v)] = a
    return values


def tensor_ranges(graph: Graph, batches: list[Mapping[str, np.ndarray]]) -> dict[int, float]:
    """Largest |value| of every float tensor (by id of its Value) over the calibration
    batches; inf where a tensor overflows even in its own type."""
    dtypes = {id(v): v.dtype for v in graph.inputs}
    dtypes.update((id(v), v.dtype) for n in graph.nodes for v in n.outputs)
    ranges: dict[int, float] = {}
    for feeds in batches:
        for key, a in evaluate(graph, feeds).items():
            dt = dtypes[key]
            if not dt.is_float or a.size == 0:
                continue
            peak = float(np.max(np.abs(to_compute(a, dt))))
            ranges[key] = max(ranges.get(key, 0.0), peak)
    return ranges
