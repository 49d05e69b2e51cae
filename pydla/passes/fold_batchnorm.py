"""Fold BatchNormalization (and per-channel Mul/Add scales) into the preceding Conv,
ConvTranspose or Gemm by rewriting its weights and bias.

``LowerBatchNorm``, after it: a float32 BatchNormalization that nothing took in (after a
pooling, a concatenation, or a DequantizeLinear: onnxruntime's QDQ models keep one after
every convolution of PP-LCNet) becomes a per-channel Mul and Add of constants — the
reference kernel's own arithmetic, scale and shift computed once instead of at every run —
which fuse_pointwise then runs in one pass with its neighbours, and which a host found
later still folds. Not in the DLA check's passes: TensorRT gives the DLA a Scale layer."""

from __future__ import annotations

import numpy as np

from pydla.dtypes import DType, to_compute, to_storage
from pydla.ir import Graph, Node, Value
from pydla.passes.base import PassContext
from pydla.passes.patterns import RewritePass
from pydla.passes.rewrite import Uses, forward, merge_provenance

_HOSTS = ("Conv", "ConvTranspose", "Gemm")


def _f32(v: Value) -> np.ndarray:
    assert v.const is not None
    return to_compute(v.const, v.dtype).astype(np.float32)


def _channels(node: Node) -> int:
    return node.outputs[0].shape[1]


def _affine_of(node: Node, channels: int) -> tuple[np.ndarray, np.ndarray] | None:
    """(scale, shift) per output channel if ``node`` is a foldable BatchNorm/Mul/Add."""
    if node.op == "BatchNormalization" and len(node.outputs) == 1:
        params = node.inputs[1:5]
        if len(params) != 4 or not all(p is not None and p.is_const for p in params):
            return None
        if any(p.shape != (channels,) for p in params):  # type: ignore[union-attr]
            return None
        scale, bias, mean, var = (_f32(p) for p in params)  # type: ignore[arg-type]
        s = scale / np.sqrt(var + np.float32(node.attrs.get("epsilon", 1e-5)))
        return s.astype(np.float32), (bias - mean * s).astype(np.float32)
    if node.op in ("Mul", "Add") and len(node.inputs) == 2:
        c = next((v for v in node.inputs if v is not None and v.is_const), None)
        if c is None:
            return None
        vec = _per_channel(_f32(c), channels, node.outputs[0].shape)
        if vec is None:
            return None
        if node.op == "Mul":
            return vec, np.zeros(channels, np.float32)
        return np.ones(channels, np.float32), vec
    return None


def _per_channel(c: np.ndarray, channels: int, out_shape: tuple[int, ...]) -> np.ndarray | None:
    """A constant that broadcasts along dim 1 only, as a vector of ``channels``."""
    if c.size == 1:
        return np.full(channels, c.reshape(-1)[0], np.float32)
    rank = len(out_shape)
    if c.ndim > rank:
        return None
    shape = (1,) * (rank - c.ndim) + c.shape
    if len(shape) < 2 or shape[1] != channels or any(d != 1 for i, d in enumerate(shape)
                                                      if i != 1):
        return None
    return c.reshape(channels)


class FoldBatchNorm(RewritePass):
    name = "fold_batchnorm"
    ensures = ("batchnorm_folded",)

    def rewrite(self, graph: Graph, uses: Uses, host: Node, ctx: PassContext) -> bool:
        if host.op not in _HOSTS or "epilogue" in host.attrs:
            return False
        w = host.inputs[1] if len(host.inputs) > 1 else None
        if w is None or not w.is_const or not w.dtype.is_float:
            return False
        if host.op == "Gemm" and len(host.outputs[0].shape) != 2:
            return False
        nxt = uses.only_user(host.outputs[0])
        if nxt is None or (nxt.op == "BatchNormalization" and nxt.inputs[0] is not host.outputs[0]):
            return False
        affine = _affine_of(nxt, _channels(host))
        if affine is None or nxt.outputs[0].dtype != host.outputs[0].dtype:
            return False
        if not self._fold(graph, host, *affine):
            return False
        # The host's output has a single reader and is no graph output, so it can always
        # take over the folded layer's output (and its name, if that is a graph output).
        folded_name = nxt.outputs[0].name
        forward(graph, nxt.outputs[0], host.outputs[0])
        host.outputs[0].name = folded_name  # the tensor now holds what that node computed
        graph.nodes.remove(nxt)
        merge_provenance(host, nxt)
        ctx.note(f"fold_batchnorm: folded {nxt.op} {nxt.name!r} into {host.op} {host.name!r}")
        return True

    @staticmethod
    def _fold(graph: Graph, host: Node, scale: np.ndarray, shift: np.ndarray) -> bool:
        w = host.inputs[1]
        assert w is not None
        wf = _f32(w)
        cout = scale.size
        if host.op == "Conv":
            wf = wf * scale.reshape((cout,) + (1,) * (wf.ndim - 1))
        elif host.op == "ConvTranspose":
            groups = int(host.attrs.get("group", 1))
            cin, cout_g = wf.shape[0], wf.shape[1]
            g = wf.reshape((groups, cin // groups, cout_g) + wf.shape[2:])
            g = g * scale.reshape((groups, 1, cout_g) + (1,) * (wf.ndim - 2))
            wf = g.reshape(wf.shape)
        else:  # Gemm: Y = alpha·A·B' + beta·C, channels are B' columns
            if host.attrs.get("transB", 0):
                wf = wf * scale[:, None]
            else:
                wf = wf * scale[None, :]
        b = host.inputs[2] if len(host.inputs) > 2 else None
        if host.op == "Gemm":
            alpha = float(host.attrs.get("alpha", 1.0))
            beta = float(host.attrs.get("beta", 1.0))
            if b is not None and not b.is_const:
                return False
            c = np.zeros(cout, np.float32) if b is None else np.broadcast_to(
                _f32(b) * beta, host.outputs[0].shape)
            if b is not None and c.ndim == 2 and not np.all(c == c[:1]):
                return False  # a per-row C cannot become a bias vector
            bias = (c.reshape(-1, cout)[0] if b is not None else c) * scale + shift
            wf = wf * np.float32(alpha)
            host.attrs = {**host.attrs, "alpha": 1.0, "beta": 1.0}
        else:
            if b is not None and not b.is_const:
                return False
            base = np.zeros(cout, np.float32) if b is None else _f32(b)
            bias = base * scale + shift
        dt = w.dtype
        new_w = Value(graph.unique_name(w.name + "_folded"), w.shape, dt,
                      const=to_storage(wf.astype(np.float32), dt))
        bdt = b.dtype if b is not None else (dt if dt.is_float else DType.FLOAT32)
        new_b = Value(graph.unique_name(host.name + "_bias"), (cout,), bdt,
                      const=to_storage(bias.astype(np.float32), bdt))
        host.inputs = [host.inputs[0], new_w, new_b] + list(host.inputs[3:])
        return True


class LowerBatchNorm(RewritePass):
    # After fold_batchnorm where both run (it takes what it can first); correct alone too.
    name = "lower_batchnorm"

    def rewrite(self, graph: Graph, uses: Uses, node: Node, ctx: PassContext) -> bool:
        return node.op == "BatchNormalization" and lower_to_affine(graph, node, ctx)


def lower_to_affine(graph: Graph, bn: Node, ctx: PassContext) -> bool:
    """BatchNormalization → Mul(x, scale) → Add(·, shift), per-channel float32 constants."""
    x, y = bn.inputs[0], bn.outputs[0]
    if x is None or x.dtype is not DType.FLOAT32 or y.dtype is not DType.FLOAT32 or \
            len(x.shape) < 2:
        return False
    affine = _affine_of(bn, x.shape[1])
    if affine is None:
        return False
    shape = (x.shape[1],) + (1,) * (len(x.shape) - 2)
    scale = Value(graph.unique_name(bn.name + "_scale"), shape, DType.FLOAT32,
                  const=affine[0].reshape(shape))
    shift = Value(graph.unique_name(bn.name + "_shift"), shape, DType.FLOAT32,
                  const=affine[1].reshape(shape))
    scaled = Value(graph.unique_name(bn.name + "_scaled"), y.shape, DType.FLOAT32)
    mul = Node("Mul", graph.unique_node_name(bn.name + "_mul"), [x, scale], [scaled],
               fused_from=list(bn.fused_from))
    add = Node("Add", graph.unique_node_name(bn.name + "_add"), [scaled, shift], [y],
               fused_from=list(bn.fused_from))
    at = graph.nodes.index(bn)
    graph.nodes[at:at + 1] = [mul, add]
    ctx.note(f"fold_batchnorm: BatchNormalization {bn.name!r} as a per-channel Mul and Add")
    return True
