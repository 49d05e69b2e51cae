"""Jetson DLA readiness: which layers Orin's DLA can run, by TensorRT's documented rules.

``check_model(model, precision="fp16", shapes=...)`` returns a ``DlaReport`` (per layer:
supported, the rule it breaks, its ONNX nodes; DLA subgraphs; FLOPs share). The rules are
data in ``pydla.dla.rules``; docs/dla.md lists them with their sources.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

import numpy as np
import onnx

from pydla.dla.checker import DlaReport, DlaRuleError, LayerVerdict, check_graph
from pydla.ir import Graph

__all__ = ["DlaReport", "DlaRuleError", "LayerVerdict", "check_model", "dla_graph"]


def dla_graph(model: onnx.ModelProto | str | os.PathLike[str] | bytes,
              shapes: Mapping[str, Sequence[int]] | None = None,
              input_values: Mapping[str, np.ndarray] | None = None) -> Graph:
    """The model's layers as TensorRT's parser sees them: imported with fixed shapes,
    constants and shapes folded, batch norms and pads folded into convolutions, no
    pointwise fusion (TensorRT checks DLA support before fusing)."""
    from pydla.builder import load_model
    from pydla.frontend.onnx import import_model
    from pydla.passes import PassContext, PassManager
    from pydla.passes.cancel_transposes import CancelTransposes
    from pydla.passes.cse import EliminateCommonSubexpressions
    from pydla.passes.eliminate_dead import EliminateDead
    from pydla.passes.eliminate_identity import EliminateIdentity
    from pydla.passes.fold_batchnorm import FoldBatchNorm
    from pydla.passes.fold_constants import FoldConstants
    from pydla.passes.fold_pad import FoldPad

    graph = import_model(load_model(model), shapes or {}, input_values or {})
    graph.remove_dead()
    passes = [EliminateDead(), EliminateIdentity(), FoldConstants(),
              EliminateCommonSubexpressions(), CancelTransposes(), FoldPad(), FoldBatchNorm()]
    PassManager(passes).run(graph, PassContext())
    return graph


def check_model(model: onnx.ModelProto | str | os.PathLike[str] | bytes,
                precision: str = "fp16",
                shapes: Mapping[str, Sequence[int]] | None = None,
                input_values: Mapping[str, np.ndarray] | None = None,
                adjust: bool = False) -> DlaReport:
    """Check every layer of ``model`` against Orin's DLA rules at ``precision``
    ("fp16" or "int8"; anything else is refused layer by layer, as the DLA would);
    ``adjust``: check the model as ``--adjust`` rewrites it (the rewrites are the report's
    first notes)."""
    rewrites: list[str] = []
    if adjust:
        from pydla.builder import load_model
        from pydla.dla.adjust import adjust_for_dla

        model, rewrites = adjust_for_dla(load_model(model))
    report = check_graph(dla_graph(model, shapes, input_values), precision)
    report.notes[:0] = [f"adjusted: {line}" for line in rewrites]
    return report
