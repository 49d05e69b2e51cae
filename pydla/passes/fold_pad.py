"""Fold an explicit Pad into the pads of the Conv or pooling layer it feeds.

Only when the layer's own padding would produce exactly what the Pad wrote: zeros for a
Conv and for an AveragePool that counts padded cells (count_include_pad=1), −∞ for a
MaxPool. The Pad must be constant-mode, non-negative (no crop) and spatial-only.
"""

from __future__ import annotations

import math

from pydla.ir import Graph, Node
from pydla.passes.base import PassContext
from pydla.passes.patterns import RewritePass, refuse
from pydla.passes.rewrite import Uses, merge_provenance

_HOSTS = ("Conv", "AveragePool", "MaxPool")


def _fill_needed(host: Node) -> tuple[float | None, str]:
    """The pad value the host's own padding stands for (None: it cannot absorb a Pad)."""
    if host.op == "Conv":
        return 0.0, "a Conv pads with zeros"
    if host.op == "AveragePool":
        if int(host.attrs.get("count_include_pad", 0)):
            return 0.0, "an AveragePool counting padded cells pads with zeros"
        return None, "an AveragePool with count_include_pad=0 leaves padded cells out"
    if len(host.outputs) > 1:
        return None, "a MaxPool's Indices would count the padded input"
    return -math.inf, "a MaxPool pads with -inf"


def _folded_pads(pad: Node, host: Node) -> list[int]:
    """The host's pads plus the Pad's spatial pads, in the host's [begins…, ends…] order."""
    extra = [int(p) for p in pad.attrs["pads"]]
    rank = len(extra) // 2
    nd = rank - 2
    own = [int(p) for p in host.attrs.get("pads") or [0] * (2 * nd)]
    return [own[i] + extra[2 + i] for i in range(nd)] + \
        [own[nd + i] + extra[rank + 2 + i] for i in range(nd)]


def _kernel(host: Node) -> list[int]:
    if host.op == "Conv":
        w = host.inputs[1]
        assert w is not None
        return list(w.shape[2:])
    return [int(k) for k in host.attrs["kernel_shape"]]


class FoldPad(RewritePass):
    name = "fold_pad"
    ensures = ("pads_folded",)

    def rewrite(self, graph: Graph, uses: Uses, pad: Node, ctx: PassContext) -> bool:
        if pad.op != "Pad" or pad.inputs[0] is None:
            return False
        host = uses.only_user(pad.outputs[0])
        if host is None or host.op not in _HOSTS or host.inputs[0] is not pad.outputs[0]:
            return False
        why = self._refusal(pad, host)
        if why is not None:
            refuse(ctx, f"{self.name}: kept Pad {pad.name!r} before {host.op} "
                        f"{host.name!r}: {why}")
            return False
        own = host.attrs.get("pads")
        pads = _folded_pads(pad, host)
        host.inputs = [pad.inputs[0], *host.inputs[1:]]
        host.attrs = {**host.attrs, "pads": pads}
        graph.nodes.remove(pad)
        merge_provenance(host, pad)
        ctx.note(f"{self.name}: folded Pad {pad.name!r} into {host.op} {host.name!r} "
                 f"(pads {own} -> {pads})")
        return True

    @staticmethod
    def _refusal(pad: Node, host: Node) -> str | None:
        x = pad.inputs[0]
        assert x is not None
        rank = len(x.shape)
        pads = [int(p) for p in pad.attrs["pads"]]
        if pad.attrs.get("mode", "constant") != "constant":
            return f"mode {pad.attrs.get('mode')!r} is not constant"
        if len(pad.inputs) > 1 and pad.inputs[1] is not None:
            return "its fill value is only known at run time"
        if min(pads) < 0:
            return f"pads {pads} crop"
        if rank < 3 or pads[0] or pads[1] or pads[rank] or pads[rank + 1]:
            return f"pads {pads} touch the batch or channel axis"
        if host.attrs.get("auto_pad", "NOTSET") != "NOTSET":
            return f"{host.op} uses auto_pad"
        want, rule = _fill_needed(host)
        value = float(pad.attrs.get("value", 0))
        if want is None or value != want:
            return f"{rule}, the Pad fills {value:g}"
        total, kernel = _folded_pads(pad, host), _kernel(host)
        if any(p >= kernel[i % len(kernel)] for i, p in enumerate(total)):
            # ONNX pooling and DLA convolution both need pads smaller than the kernel.
            return f"the folded pads {total} would not stay smaller than the kernel {kernel}"
        return None
