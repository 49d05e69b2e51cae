"""Which layers run int8 under ``--int8``, and why (docs/int8.md).

TensorRT's implicit quantization keeps no layer float by rule (not the first, not the last)
and picks int8 wherever an int8 kernel is faster. pydla's int8 kernels are the convolution
and matrix product (QConv/QGemm), so the rule is:

- a 2-D Conv, a Gemm (no transposed A, alpha 1) or a MatMul whose weights are constant runs
  int8 when its input tensor has a calibrated range;
- it stays float when its input has no range (missing from the cache, always zero, or not
  a float32 tensor), or when ``--layerPrecisions`` says fp32;
- a *head* stays float unless ``--layerPrecisions`` names it int8: a layer of those kinds
  with no other one after it on the way to the outputs (a classifier's last Gemm, a
  detector's output convolutions). Nothing after it absorbs the clipping of its input: an
  entropy-calibrated range cut OriNet's last Gemm input to ±18.7, and its outputs' cosine
  against fp32 fell to 0.948 on one test page (0.998 with the head float, whose cost is
  one small layer);
- every other layer (pooling, Add, Concat, Softmax, a MatMul of two activations, …) has no
  int8 kernel: it runs float on the dequantized tensors.

``--layerPrecisions=name:int8,other:fp32`` overrides by layer name (an ONNX node name, also
one fused into a layer); ``*`` and other shell wildcards match many: an exact name wins over
a pattern, and the first matching pattern in the order given wins. Naming a layer that has no
int8 kernel as int8 is an error; a pattern simply skips such layers.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping
from dataclasses import dataclass

from pydla.dtypes import DType
from pydla.errors import BuildError
from pydla.ir import Graph, Node

PRECISIONS = ("int8", "fp32")


@dataclass(frozen=True)
class Decision:
    precision: str  # "int8" | "fp32"
    reason: str


def int8_kernel(node: Node) -> str | None:
    """None if the layer has an int8 kernel, else why not."""
    x = node.inputs[0] if node.inputs else None
    w = node.inputs[1] if len(node.inputs) > 1 else None
    if node.op not in ("Conv", "Gemm", "MatMul"):
        return f"no int8 kernel for {node.op}"
    if x is None or x.dtype is not DType.FLOAT32 or x.is_const:
        return f"{node.op} input is not a float32 activation"
    if w is None or not w.is_const:
        return f"no int8 kernel for a {node.op} of two activations"
    if w.dtype is not DType.FLOAT32:
        return f"{node.op} weights are {w.dtype.name.lower()}, not float32"
    if node.op == "Conv" and len(w.shape) != 4:
        return f"no int8 kernel for a {len(w.shape) - 2}-D convolution (2-D only)"
    if node.op == "Gemm" and (node.attrs.get("transA") or node.attrs.get("alpha", 1.0) != 1.0):
        return "no int8 kernel for a Gemm with transposed A or alpha != 1"
    if node.op == "MatMul" and len(w.shape) != 2:
        return "no int8 kernel for a MatMul with batched weights"
    return None


def _override(node: Node, exact: Mapping[str, str],
              patterns: list[tuple[str, str]]) -> tuple[str, str, bool] | None:
    """(precision, the flag entry that set it, whether by exact name) for this layer, if
    --layerPrecisions names it."""
    names = [node.name, *node.fused_from]
    for name in names:
        if name in exact:
            return exact[name], f"{name}:{exact[name]}", True
    for pattern, precision in patterns:
        if any(fnmatch.fnmatchcase(n, pattern) for n in names):
            return precision, f"{pattern}:{precision}", False
    return None


def choose_precisions(graph: Graph, ranges: Mapping[str, float],
                      overrides: Mapping[str, str] | None = None) -> dict[str, Decision]:
    """A decision for every layer with a float input or output, by layer name."""
    overrides = dict(overrides or {})
    for name, precision in overrides.items():
        if precision not in PRECISIONS:
            raise BuildError(f"--layerPrecisions {name}:{precision}: with --int8 a layer's "
                             f"precision is {' or '.join(PRECISIONS)}")
    is_pattern = {n: any(c in n for c in "*?[") for n in overrides}
    exact = {n: p for n, p in overrides.items() if not is_pattern[n]}
    patterns = [(n, p) for n, p in overrides.items() if is_pattern[n]]
    names = {n.name for n in graph.nodes} | {f for n in graph.nodes for f in n.fused_from}
    unknown = sorted(set(exact) - names)
    if unknown:
        raise BuildError(f"--layerPrecisions names unknown layers {unknown}")
    unmatched = [p for p, _ in patterns if not any(fnmatch.fnmatchcase(n, p) for n in names)]
    if unmatched:
        raise BuildError(f"--layerPrecisions pattern {unmatched[0]!r} matches no layer")

    heads = _heads(graph)
    decisions: dict[str, Decision] = {}
    for node in graph.nodes:
        if not any(v is not None and v.dtype.is_float for v in [*node.inputs, *node.outputs]):
            continue
        why_not = int8_kernel(node)
        chosen = _override(node, exact, patterns)
        if chosen and chosen[0] == "int8" and why_not and chosen[2]:
            raise BuildError(f"--layerPrecisions {chosen[1]}: layer {node.name!r} cannot run "
                             f"int8 ({why_not})")
        if why_not:
            decisions[node.name] = Decision("fp32", why_not)
        elif chosen and chosen[0] == "fp32":
            decisions[node.name] = Decision("fp32", f"--layerPrecisions {chosen[1]}")
        else:
            decision = _by_range(node, ranges)
            if decision.precision == "int8" and not chosen and id(node) in heads:
                decision = Decision("fp32", HEAD_REASON)
            decisions[node.name] = decision
    return decisions


HEAD_REASON = ("a head: no int8-capable layer follows it to the outputs, so its input's "
               "clipping would show in them (--layerPrecisions NAME:int8 quantizes it)")


def _heads(graph: Graph) -> set[int]:
    """ids of the int8-capable layers that no other int8-capable layer follows."""
    users = graph.consumers()
    feeds: dict[int, bool] = {}  # node → an int8-capable layer is downstream of it
    for node in reversed(graph.nodes):  # topological order reversed: consumers first
        feeds[id(node)] = any(int8_kernel(c) is None or feeds.get(id(c), False)
                              for v in node.outputs for c in users.get(id(v), []))
    return {id(n) for n in graph.nodes if int8_kernel(n) is None and not feeds[id(n)]}


def _by_range(node: Node, ranges: Mapping[str, float]) -> Decision:
    x = node.inputs[0]
    assert x is not None
    amax = ranges.get(x.name)
    if amax is None:
        return Decision("fp32", f"input {x.name!r} has no calibrated range")
    if not amax > 0:
        return Decision("fp32", f"input {x.name!r} was always zero on the calibration data")
    return Decision("int8", f"input {x.name!r} calibrated to +-{amax:.6g}")
