"""``--int8`` inside the builder: the float graph is cleaned up by the folding passes (so
BatchNorm is in the convolution weights that get quantized), calibrated, and given Q/DQ
pairs before the full pass list runs on it, exactly as on an explicitly quantized model."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from pydla.ir import Graph
from pydla.passes import PassContext, PassManager, default_passes
from pydla.quantization.implicit import (
    Int8Options,
    is_explicitly_quantized,
    quantize_implicitly,
)

# Fusions would hide the tensors calibration names and the layers Q/DQ go around.
FUSIONS = frozenset({"fuse_pointwise", "fuse_epilogue"})


def quantize_for_build(graph: Graph, options: Int8Options, ctx: PassContext, *,
                       opt_level: int, disabled: Iterable[str] = (),
                       overrides: Mapping[str, str] | None = None,
                       verify_each: bool = False) -> None:
    if opt_level > 0 and not is_explicitly_quantized(graph):
        folding = [p for p in default_passes() if p.name not in FUSIONS]
        known = {p.name for p in folding}
        PassManager(folding, opt_level=opt_level, verify_each=verify_each,
                    disabled=[d for d in disabled if d in known]).run(graph, ctx)
    ctx.records["int8"] = quantize_implicitly(graph, options, ctx, overrides)
