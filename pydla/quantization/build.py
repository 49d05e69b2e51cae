"""``--int8`` inside the builder: the imported float graph is calibrated, cleaned up by the
folding passes (so BatchNorm is in the convolution weights that get quantized) and given
Q/DQ pairs before the full pass list runs on it, exactly as on an explicitly quantized
model."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from pydla.ir import Graph
from pydla.passes import PassContext, PassManager, default_passes
from pydla.quantization.implicit import Int8Options, quantize_implicitly

# Fusions would hide the tensors calibration names and the layers Q/DQ go around.
FUSIONS = frozenset({"fuse_pointwise", "fuse_epilogue", "fold_qdq_pointwise"})


def quantize_for_build(graph: Graph, options: Int8Options, ctx: PassContext, *,
                       opt_level: int, disabled: Iterable[str] = (),
                       overrides: Mapping[str, str] | None = None,
                       verify_each: bool = False) -> None:
    folding = [p for p in default_passes() if p.name not in FUSIONS]
    known = {p.name for p in folding}
    manager = PassManager(folding, opt_level=opt_level, verify_each=verify_each,
                          disabled=[d for d in disabled if d in known])

    def fold(g: Graph) -> None:
        if opt_level > 0:
            manager.run(g, ctx)

    ctx.records["int8"] = quantize_implicitly(graph, options, ctx, overrides, fold)
