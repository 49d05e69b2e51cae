"""ConvTranspose with overlapping taps → Conv, DepthToSpace and a crop (CPU target).

A transposed convolution of stride s whose kernel k is larger than s (the ×2 upsampling of
decoders: k = 4, s = 2, pads 1) is, per output phase r ∈ [0, s)², an ordinary convolution:
with k' = K·s ≥ k (the kernel padded with zero taps) and u = q·s + r the uncropped output
position,

    full[q·s + r] = Σ_j x[q − j] · w[r + s·j] = Σ_j' x[q − (K−1) + j'] · w[r + s·(K−1−j')]

— a cross-correlation of x, padded by K−1 on each side, with the phase's K×K sub-kernel
flipped. All s² phases are the output channels of one Conv (channel (r₁·s + r₂)·M + m, the
order DepthToSpace's DCR mode reads), DepthToSpace(s) interleaves them and a Slice crops
the transposed convolution's window [pad_begin, pad_begin + out). The Conv then runs on
the fast, autotuned convolution tactics; the CPU's ConvTranspose tactic (gemm_scatter)
takes only kernel = stride, and the reference builds its whole im2col product in memory:
an image-focus ViT decoder's three k=4 s=2 upsamplings took 1.45 of its 5.1 s at batch 8.

Contract: float32 2-D layers of one group, dilation 1, constant weights (and bias), equal
strides s on both axes and k > s on one of them (k ≤ s stays for gemm_scatter and the
reference); the result equals the transposed convolution up to float summation order.
CPU target only: the CUDA backend and the DLA rules run ConvTranspose themselves.
"""

from __future__ import annotations

import numpy as np

from pydla.dtypes import DType
from pydla.ir import Graph, Node, Value
from pydla.passes.base import PassContext
from pydla.passes.patterns import RewritePass
from pydla.passes.rewrite import Uses

_KNOWN = {"strides", "dilations", "pads", "group", "kernel_shape", "output_padding"}


def _geometry(node: Node) -> tuple[int, list[int]] | None:
    """(s, kernel sizes) of a ConvTranspose this pass lowers, else None."""
    if len(node.outputs) != 1 or len(node.inputs) not in (2, 3) or None in node.inputs[:2]:
        return None
    x, w = node.inputs[0], node.inputs[1]
    y, a = node.outputs[0], node.attrs
    assert x is not None and w is not None
    if (set(a) - _KNOWN or len(x.shape) != 4 or len(w.shape) != 4 or w.const is None
            or x.dtype is not DType.FLOAT32 or w.dtype is not DType.FLOAT32
            or y.dtype is not DType.FLOAT32 or int(a.get("group", 1)) != 1
            or any(int(d) != 1 for d in a.get("dilations") or (1, 1))):
        return None
    bias = node.inputs[2] if len(node.inputs) > 2 else None
    if bias is not None and (bias.const is None or bias.dtype is not DType.FLOAT32):
        return None
    strides = [int(s) for s in a.get("strides") or (1, 1)]
    kernel = [int(k) for k in w.shape[2:]]
    if strides[0] != strides[1] or all(k <= s for k, s in zip(kernel, strides)):
        return None  # unequal strides (one DepthToSpace), or no overlap (gemm_scatter's)
    return strides[0], kernel


def _lower(graph: Graph, node: Node, ctx: PassContext) -> bool:
    found = _geometry(node)
    if found is None:
        return False
    s, kernel = found
    x, w = node.inputs[0], node.inputs[1]
    assert x is not None and w is not None and w.const is not None
    y = node.outputs[0]
    n, c, h, wd = x.shape
    m, (oh, ow) = w.shape[1], y.shape[2:]
    pads = [int(p) for p in node.attrs.get("pads") or (0, 0, 0, 0)]
    taps = [-(-k // s) for k in kernel]  # K per axis: k' = K·s ≥ k
    # Conv output q ∈ [0, size + K − 1 + extra): its DepthToSpace must cover the crop
    # window [pad_begin, pad_begin + out) (output_padding can reach past the natural size).
    extra = [max(0, -(-(p + o - (size + t - 1) * s) // s))
             for p, o, size, t in zip(pads[:2], (oh, ow), (h, wd), taps)]
    qh, qw = h + taps[0] - 1 + extra[0], wd + taps[1] - 1 + extra[1]
    # V[(r1·s + r2)·M + m, c, j1, j2] = W[c, m, r1 + s·(K1−1−j1), r2 + s·(K2−1−j2)]
    wz = np.zeros((c, m, taps[0] * s, taps[1] * s), np.float32)
    wz[:, :, :kernel[0], :kernel[1]] = w.const
    v = wz.reshape(c, m, taps[0], s, taps[1], s)[:, :, ::-1, :, ::-1, :]
    v = np.ascontiguousarray(v.transpose(3, 5, 1, 0, 2, 4).reshape(s * s * m, c, *taps))
    base = node.name
    weight = Value(graph.unique_name(base + "_phases"), v.shape, DType.FLOAT32, const=v)
    inputs: list[Value | None] = [x, weight]
    bias = node.inputs[2] if len(node.inputs) > 2 else None
    if bias is not None:
        assert bias.const is not None
        b = np.tile(np.asarray(bias.const, np.float32).reshape(-1), s * s)
        inputs.append(Value(graph.unique_name(base + "_phase_bias"), b.shape, DType.FLOAT32,
                            const=b))
    interleave = s > 1
    crop = (n, m, qh * s, qw * s) != tuple(y.shape) or pads[0] != 0 or pads[1] != 0
    conv_shape = (n, s * s * m, qh, qw)

    def value(suffix: str, shape: tuple[int, ...], last: bool) -> Value:
        # the last layer writes the ConvTranspose's own output value (its name, its readers)
        return y if last else Value(graph.unique_name(base + suffix), shape, DType.FLOAT32)

    phases = value("_phases_out", conv_shape, not interleave and not crop)
    conv = Node("Conv", graph.unique_node_name(base + "_conv"), inputs, [phases],
                {"strides": [1, 1], "dilations": [1, 1], "group": 1,
                 "pads": [taps[0] - 1, taps[1] - 1, taps[0] - 1 + extra[0],
                          taps[1] - 1 + extra[1]],
                 "kernel_shape": list(taps)}, fused_from=list(node.fused_from))
    nodes, full = [conv], phases
    if interleave:
        full = value("_full", (n, m, qh * s, qw * s), not crop)
        nodes.append(Node("DepthToSpace", graph.unique_node_name(base + "_interleave"),
                          [phases], [full], {"blocksize": s, "mode": "DCR"},
                          fused_from=list(node.fused_from)))
    if crop:
        nodes.append(Node("Slice", graph.unique_node_name(base + "_crop"), [full], [y],
                          {"starts": [0, 0, pads[0], pads[1]],
                           "ends": [n, m, pads[0] + oh, pads[1] + ow],
                           "steps": [1, 1, 1, 1]}, fused_from=list(node.fused_from)))
    at = graph.nodes.index(node)
    graph.nodes[at:at + 1] = nodes
    ctx.note(f"lower_conv_transpose: ConvTranspose {node.name!r} (kernel {kernel}, stride {s}) "
             f"as a Conv of {s * s} phases, DepthToSpace and a crop")
    return True


class LowerConvTranspose(RewritePass):
    name = "lower_conv_transpose"

    def rewrite(self, graph: Graph, uses: Uses, node: Node, ctx: PassContext) -> bool:
        return ctx.target == "cpu" and node.op == "ConvTranspose" and _lower(graph, node, ctx)
