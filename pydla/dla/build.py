"""trtexec's DLA build semantics: ``--useDLACore=N`` with ``--buildDLAStandalone`` (every
layer on the DLA, or the build fails naming the layer and the rule) or
``--allowGPUFallback`` (DLA-capable subgraphs on the DLA, the rest on the GPU).

pydla runs every layer on its own device either way; what the flags decide is which
layers a Jetson would run on its DLA, which the loadable records (``build["dla"]``: core,
mode, precision, subgraphs, each layer's device) and ``inspect``, ``--dumpLayerInfo`` and
the HTML report show.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydla.dla.checker import DlaReport, DlaRuleError, check_graph
from pydla.dla.rules import DLA_CORES, RULE_SET
from pydla.dtypes import DType
from pydla.errors import BuildError
from pydla.ir import Graph

# trtexec: "I/O formats for safe DLA capability are restricted to dla_linear, hwc4, chw16,
# or chw32" (hwc4 for inputs only).
STANDALONE_FORMATS = {"input": {"dla_linear", "dla_hwc4", "chw4", "chw16", "chw32"},
                      "output": {"dla_linear", "chw16", "chw32"}}


def check_flags(core: int | None, standalone: bool, gpu_fallback: bool,
                input_formats: Sequence[Any] | None,
                output_formats: Sequence[Any] | None) -> None:
    """trtexec's refusals of DLA flag combinations, one line each."""
    if core is None:
        if standalone:
            raise BuildError("--buildDLAStandalone needs a DLA core: add --useDLACore=0 or 1")
        if gpu_fallback:
            raise BuildError("--allowGPUFallback needs a DLA core: add --useDLACore=0 or 1")
        return
    if not 0 <= core < DLA_CORES:
        raise BuildError(f"Cannot create DLA engine, {core} not available (Orin has DLA cores "
                         f"0 and 1: --useDLACore=0 or --useDLACore=1)")
    if not standalone:
        return
    if gpu_fallback:
        raise BuildError("GPU fallback (--allowGPUFallback) not allowed for DLA standalone mode")
    for side, formats in (("input", input_formats), ("output", output_formats)):
        bad = [f for f in formats or () if getattr(f, "format", None) not in
               STANDALONE_FORMATS[side]]
        if not formats or bad:
            raise BuildError("I/O formats for safe DLA capability are restricted to dla_linear, "
                             "hwc4, chw16, or chw32: pass --inputIOFormats and "
                             "--outputIOFormats (e.g. fp16:chw16)")


def build_precision(graph: Graph, autocast: DType | None, int8: bool) -> str:
    """The precision the DLA layers would run in: INT8 when asked, FP16 when autocast or
    the model's own float tensors are FP16, else FP32 (which the DLA refuses)."""
    if int8:
        return "int8"
    if autocast in (DType.FLOAT16,):
        return "fp16"
    floats = [v.dtype for n in graph.nodes for v in n.outputs if v.dtype.is_float]
    return "fp16" if floats and all(t == DType.FLOAT16 for t in floats) else "fp32"


def place(dla_graph: Graph, precision: str, gpu_fallback: bool) -> DlaReport:
    """Check the DLA graph. Without GPU fallback (standalone or not) every layer must run
    on the DLA: the first that cannot fails the build, as TensorRT's builder does."""
    report = check_graph(dla_graph, precision)
    refused = [v for v in report.layers if not v.supported]
    if not gpu_fallback and refused:
        first = refused[0]
        more = f" (and {len(refused) - 1} more layers: pydla check --dla lists them)" \
            if len(refused) > 1 else ""
        raise DlaRuleError(f"layer {first.name!r} ({first.op}) cannot run on DLA: "
                           f"{first.refusal.reason}{more}; --allowGPUFallback runs such "
                           "layers on the GPU")
    return report


def record(report: DlaReport, built: Graph, core: int, standalone: bool,
           gpu_fallback: bool) -> dict[str, Any]:
    """What the loadable records: each built layer's device (DLA when every ONNX node fused
    into it runs on the DLA), the subgraphs, the mode."""
    on_dla = {name for v in report.layers if v.supported for name in v.onnx_nodes}
    checked = {name for v in report.layers for name in v.onnx_nodes}
    devices: dict[str, str] = {}
    made_by: dict[int, str] = {}
    consumers: dict[int, list[str]] = {}
    for n in built.nodes:
        for v in n.inputs:
            if v is not None:
                consumers.setdefault(id(v), []).append(n.name)
    for n in built.nodes:
        if any(f in checked for f in n.fused_from):
            devices[n.name] = "DLA" if all(f in on_dla for f in n.fused_from
                                           if f in checked) else "GPU"
        for o in n.outputs:
            made_by[id(o)] = n.name
    # Layers the builder made (casts and reorders for pydla's own formats) run where the
    # layer they convert for runs: after their producer, or before their first consumer.
    for n in built.nodes:
        if n.name in devices:
            continue
        near = [made_by.get(id(v)) for v in n.inputs if v is not None]
        near += [c for o in n.outputs for c in consumers.get(id(o), [])]
        devices[n.name] = next((devices[m] for m in near if m in devices), "GPU")
    return {"core": core, "mode": "standalone" if standalone else
            "gpu_fallback" if gpu_fallback else "dla", "rule_set": RULE_SET,
            "precision": report.precision, "subgraphs": len(report.segments),
            "supported_layers": report.supported_layers, "checked_layers": len(report.layers),
            "devices": devices}


def plan(proto: Any, options: Any) -> DlaReport | None:
    """The DLA placement a build with ``options`` (pydla.builder.BuildOptions) asks for, or
    None without --useDLACore; refuses trtexec's bad flag combinations first."""
    from pydla.dla import dla_graph

    check_flags(options.dla_core, options.dla_standalone, options.gpu_fallback,
                options.input_formats, options.output_formats)
    if options.dla_core is None:
        return None
    graph = dla_graph(proto, options.shapes, options.input_values)
    # trtexec's DLA builds say --fp16: the DLA runs what it takes in fp16 (the CPU copy of
    # the engine still times its layers: weak typing).
    half = DType.FLOAT16 if DType.FLOAT16 in options.allow else None
    precision = build_precision(graph, options.autocast or half,
                                int8=options.int8 is not None)
    return place(graph, precision, options.gpu_fallback)
