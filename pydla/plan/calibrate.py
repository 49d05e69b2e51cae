"""Every float tensor's largest |value| on sample inputs (``--autocast``'s range check), on
the CPU kernels through pydla.quantization's runner: one sample at a time, each tensor freed
after its last reader."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from pydla.dtypes import to_compute
from pydla.errors import BuildError
from pydla.ir import Graph, Value
from pydla.quantization.runner import FloatRunner


def tensor_ranges(graph: Graph, batches: list[Mapping[str, np.ndarray]]) -> dict[int, float]:
    """Largest |value| of every float tensor (by id of its Value) over the calibration
    batches; inf where a tensor overflows even in its own type."""
    runner = FloatRunner(graph)
    ranges: dict[int, float] = {}

    def observe(v: Value, a: np.ndarray) -> None:
        if v.dtype.is_float and a.size:
            peak = float(np.max(np.abs(to_compute(a, v.dtype))))
            ranges[id(v)] = max(ranges.get(id(v), 0.0), peak)

    for feeds in batches:
        runner.run(_inputs(graph, feeds), observe)
    return ranges


def _inputs(graph: Graph, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    out = {}
    for v in graph.inputs:
        if v.name not in feeds:
            raise BuildError(f"calibration data has no input {v.name!r} "
                             f"(it has {sorted(feeds)})")
        x = np.asarray(feeds[v.name])
        if x.shape != v.shape:
            raise BuildError(f"calibration input {v.name!r} has shape {x.shape}, the engine "
                             f"is built for {v.shape}")
        out[v.name] = x.astype(v.dtype.np, copy=False)
    return out
