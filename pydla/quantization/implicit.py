"""Implicit quantization (``pydla build --int8``, TensorRT ≤ 10 style): dynamic ranges from a
calibration cache or by calibrating the float network, a precision per layer, then Q/DQ
pairs in the IR around the int8 layers.

Calibration runs on the network as imported, before any pass, and names every tensor as
the ONNX model does: as TensorRT's EntropyCalibration2 and MinMax calibrators, which
calibrate before layer fusion, so caches move between trtexec and pydla (tensors one side
lacks are ignored). The precisions are decided after the folding passes (BatchNorm in the
convolution weights that get quantized), on the layers that remain.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pydla.errors import BuildError, CalibrationError
from pydla.ir import Graph
from pydla.ops import QUANTIZED_LAYERS
from pydla.passes.base import PassContext
from pydla.quantization.cache import read_cache, write_cache
from pydla.quantization.calibrators import (
    ALGORITHMS,
    BINS,
    entropy_amax,
    percentile_amax,
)
from pydla.quantization.data import CalibrationSource, InputSpec, npz_source, script_source
from pydla.quantization.insert_qdq import activation_scale, insert_qdq
from pydla.quantization.policy import choose_precisions
from pydla.quantization.runner import FloatRunner, tensor_amax, tensor_histograms


@dataclass(frozen=True)
class Int8Options:
    calib_data: str | None = None          # --calibData: an .npz or a folder of them
    data_loader_script: str | None = None  # --data-loader-script=file.py[:func]
    algorithm: str = "entropy"             # --calibAlgo: entropy | minmax | percentile
    percentile: float = 99.99              # --calibPercentile
    cache: str | None = None               # --calib: TensorRT calibration cache
    progress: bool = True                  # a bar over calibration samples (on a terminal)

    def __post_init__(self) -> None:
        if self.algorithm not in ALGORITHMS:
            raise BuildError(f"--calibAlgo={self.algorithm}: calibrators are "
                             f"{', '.join(ALGORITHMS)}")
        if not 0.0 < self.percentile <= 100.0:
            raise BuildError(f"--calibPercentile={self.percentile} is not in (0, 100]")
        if self.calib_data and self.data_loader_script:
            raise BuildError("give --calibData or --data-loader-script, not both")


def quantize_implicitly(graph: Graph, options: Int8Options, ctx: PassContext,
                        overrides: Mapping[str, str] | None = None,
                        fold: Callable[[Graph], object] | None = None) -> dict[str, Any]:
    """Calibrate (or read the cache), ``fold`` the graph (the builder's folding passes: the
    layers that remain are the ones to decide on), decide each layer's precision, insert
    Q/DQ; returns what the loadable records (``build["int8"]``: calibrator, scales, layer
    decisions)."""
    if is_explicitly_quantized(graph):
        ctx.note("int8: the model is explicitly quantized (it has Q/DQ nodes); calibration is "
                 "skipped, as TensorRT ignores the calibrator for such networks")
        return {"calibrator": None, "explicit": True}
    algorithm = ALGORITHMS[options.algorithm]
    ranges = _ranges(graph, options, algorithm, ctx)
    if fold is not None:
        fold(graph)
    decisions = choose_precisions(graph, ranges, overrides)
    for name, d in decisions.items():
        ctx.note(f"int8: layer {name!r} {d.precision}: {d.reason}")
    count = insert_qdq(graph, decisions, ranges)
    ctx.note(f"int8: {count} of {len(decisions)} float layers quantized")
    return {"calibrator": algorithm,
            "scales": {k: float(activation_scale(r)) for k, r in ranges.items()},
            "layers": {k: [d.precision, d.reason] for k, d in decisions.items()}}


def is_explicitly_quantized(graph: Graph) -> bool:
    """Whether the model carries its own quantization (Q/DQ nodes, or int8 layers made of
    them or of QLinear* operators)."""
    ops = {"QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear"} | QUANTIZED_LAYERS
    return any(n.op in ops for n in graph.nodes)


def _ranges(graph: Graph, options: Int8Options, algorithm: str,
            ctx: PassContext) -> dict[str, float]:
    if options.cache and os.path.exists(options.cache):
        cache = read_cache(options.cache)
        if cache.algorithm == algorithm:
            ctx.note(f"int8: read {len(cache.scales)} scales from {options.cache!r} "
                     f"(TRT-{cache.version}-{cache.algorithm}); calibration skipped")
            return cache.ranges()
        ctx.note(f"int8: {options.cache!r} holds {cache.algorithm} scales, --calibAlgo="
                 f"{options.algorithm} needs {algorithm}: calibrating again")
    source = _source(graph, options)
    start = time.perf_counter()
    ranges = calibrate(graph, source, options)
    ctx.note(f"int8: {algorithm} calibration of {len(ranges)} tensors on {source.describe} "
             f"in {time.perf_counter() - start:.1f} s")
    if options.cache:
        write_cache(options.cache, algorithm, {k: float(activation_scale(r))
                                               for k, r in ranges.items()})
        ctx.note(f"int8: wrote {len(ranges)} scales to {options.cache!r}")
    return ranges


def _source(graph: Graph, options: Int8Options) -> CalibrationSource:
    inputs = [InputSpec(v.name, v.shape, v.dtype) for v in graph.inputs]
    if options.calib_data:
        return npz_source(options.calib_data, inputs)
    if options.data_loader_script:
        return script_source(options.data_loader_script, inputs)
    have = (f"the cache {options.cache!r} does not exist" if options.cache
            else "no --calib cache was given")
    raise CalibrationError(f"--int8 needs calibration data (--calibData or "
                           f"--data-loader-script): {have}")


def calibrate(graph: Graph, source: CalibrationSource, options: Int8Options
              ) -> dict[str, float]:
    """The dynamic range of every float activation of ``graph`` over ``source``."""
    from pydla.tools.progress import Progress

    runner = FloatRunner(graph)
    passes = 1 if options.algorithm == "minmax" else 2
    total = source.count * passes if source.count is not None else 0
    with Progress("Calibrating", total=total,
                  enabled=None if options.progress else False) as bar:
        amax = tensor_amax(runner, source, bar.advance)
        if options.algorithm == "minmax":
            return amax
        hists = tensor_histograms(runner, source, amax, BINS, bar.advance)
    if options.algorithm == "entropy":
        return {k: entropy_amax(hists[k], a) if k in hists else a for k, a in amax.items()}
    return {k: percentile_amax(hists[k], a, options.percentile) if k in hists else a
            for k, a in amax.items()}
