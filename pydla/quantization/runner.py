"""Run the float network on pydla's CPU kernels, one sample at a time, and hand every float
activation to an observer as it is produced.

Layers are bound once and run in order; a tensor is dropped as soon as its last reader has
run, so memory stays that of one inference (what the observers accumulate is a number or a
histogram per tensor, never the activations).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

import numpy as np

from pydla.backends.cpu.backend import bind_layer
from pydla.errors import CalibrationError
from pydla.ir import Graph, Value
from pydla.plan.tactics import layer_spec

Observer = Callable[[Value, np.ndarray], None]


class FloatRunner:
    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.layers = [(node, bind_layer(layer_spec(node))) for node in graph.nodes]
        keep = {id(v) for v in graph.outputs}
        last: dict[int, int] = {}
        for i, node in enumerate(graph.nodes):
            for v in node.inputs:
                if v is not None and not v.is_const:
                    last[id(v)] = i
        # After layer i, the tensors nobody reads any more.
        self.release: list[list[int]] = [[] for _ in graph.nodes]
        for key, i in last.items():
            if key not in keep:
                self.release[i].append(key)

    def run(self, feed: Mapping[str, np.ndarray], observe: Observer) -> None:
        values: dict[int, np.ndarray] = {}
        for v in self.graph.inputs:
            values[id(v)] = feed[v.name]
            observe(v, values[id(v)])
        for i, (node, fn) in enumerate(self.layers):
            ins = [None if v is None else (v.const if v.is_const else values[id(v)])
                   for v in node.inputs]
            outs = [np.empty(v.shape, v.dtype.np) for v in node.outputs]
            with np.errstate(all="ignore"):
                fn(ins, outs)
            for v, a in zip(node.outputs, outs):
                values[id(v)] = a
                observe(v, a)
            for key in self.release[i]:
                del values[key]


def observed(v: Value) -> bool:
    """Tensors that get a dynamic range: float activations (weights are quantized from
    their own values, per channel)."""
    return v.dtype.is_float and not v.is_const and v.size > 0


def tensor_amax(runner: FloatRunner, samples: Iterable[Mapping[str, np.ndarray]],
                tick: Callable[[], None]) -> dict[str, float]:
    """max |x| per float activation over every sample; a non-finite value is an error (a
    float network that overflows on its own calibration data has no range to quantize)."""
    amax: dict[str, float] = {}

    def observe(v: Value, a: np.ndarray) -> None:
        if not observed(v):
            return
        peak = float(np.max(np.abs(a)))
        if not np.isfinite(peak):
            raise CalibrationError(f"tensor {v.name!r} is not finite on the calibration data "
                                   "(the float network overflows or divides by zero)")
        amax[v.name] = max(amax.get(v.name, 0.0), peak)

    for feed in samples:
        runner.run(feed, observe)
        tick()
    return amax


def tensor_histograms(runner: FloatRunner, samples: Iterable[Mapping[str, np.ndarray]],
                      amax: Mapping[str, float], bins: int,
                      tick: Callable[[], None]) -> dict[str, np.ndarray]:
    """A histogram of |x| in ``bins`` bins over [0, amax] per tensor with a positive amax."""
    from pydla.quantization.calibrators import accumulate_histogram

    hists = {name: np.zeros(bins, np.int64) for name, peak in amax.items() if peak > 0}

    def observe(v: Value, a: np.ndarray) -> None:
        if v.name in hists:
            accumulate_histogram(a, amax[v.name], hists[v.name])

    for feed in samples:
        runner.run(feed, observe)
        tick()
    return hists
