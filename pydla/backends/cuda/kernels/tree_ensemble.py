"""TreeEnsemble (classic-ML tree ensembles) on the GPU: the CPU backend's flattened node
arrays (``pydla.backends.cpu.kernels.tree_ensemble`` documents them), checked once on the
host when the layer is bound (every child, feature, target and offset in range, as the CPU
kernel checks them), then three kernels per run: a reset of the float64 accumulators, a
thread per (row, tree) walking its tree and adding its leaf weights with float64 atomics
(the CPU also sums in float64, in another order), and a thread per row finishing as the
CPU backend does: float32 scores (AVERAGE divides by the tree count), base values, the
label of the first highest score among the classes some leaf scored, and the post-transform
(NONE, LOGISTIC, SOFTMAX).

Supported: SUM and AVERAGE aggregates; classifiers of three or more classes; regressors
(a single target takes no transform, as onnxruntime's single-target path). Refused at bind
with the reason: MIN/MAX, two-class classifiers (onnxruntime's binary rules), PROBIT and
SOFTMAX_ZERO. A path longer than the node count (a cycle) is flagged and raised at sync.
"""

from __future__ import annotations

import numpy as np

from pydla.backends.cuda.codegen import defines
from pydla.backends.cuda.context import BindContext
from pydla.backends.cuda.registry import Candidate, chain, kernel
from pydla.backends.cuda.tree_rules import TRANSFORMS, tree_ensemble_refusal
from pydla.dtypes import DType
from pydla.errors import KernelError
from pydla.loadable.program import LayerInfo

_LEAF, _MISSING_TRUE = 6, 8

_TREES = r"""
extern "C" __global__ void te_reset(double* __restrict__ acc, unsigned char* __restrict__ seen) {
  for (i64 i = blockIdx.x * (i64)blockDim.x + threadIdx.x; i < (i64)N * NT;
       i += (i64)gridDim.x * blockDim.x) { acc[i] = 0.0; seen[i] = 0; }
}
extern "C" __global__ void te_walk(const float* __restrict__ x, const int* __restrict__ nodes,
    const float* __restrict__ thr, const int* __restrict__ offsets,
    const int* __restrict__ targets, const float* __restrict__ weights,
    const int* __restrict__ roots, double* __restrict__ acc, unsigned char* __restrict__ seen,
    long long* __restrict__ flag) {
  for (i64 idx = blockIdx.x * (i64)blockDim.x + threadIdx.x; idx < (i64)N * TREES;
       idx += (i64)gridDim.x * blockDim.x) {
    const i64 r = idx / TREES;
    int i = roots[idx % TREES];
    bool leaf = false;
    for (int step = 0; step < NODES && !leaf; ++step) {
      const int* node = nodes + (i64)i * 4;
      const int mode = node[3] & 7;
      if (mode == 6) { leaf = true; break; }
      const float v = x[r * F + node[0]], th = thr[i];
      bool go = mode == 0 ? v <= th : mode == 1 ? v < th : mode == 2 ? v >= th
              : mode == 3 ? v > th : mode == 4 ? v == th : v != th;
      if (!go && (node[3] & 8) && v != v) go = true;
      i = go ? node[1] : node[2];
    }
    if (!leaf) { flag[0] = 1; flag[1] = idx % TREES; continue; }  /* a cycle */
    for (int k = offsets[i]; k < offsets[i + 1]; ++k) {
      atomicAdd(acc + r * NT + targets[k], (double)weights[k]);
      seen[r * NT + targets[k]] = 1;
    }
  }
}
extern "C" __global__ void te_finish(const double* __restrict__ acc,
    const unsigned char* __restrict__ seen, const float* __restrict__ base,
    const long long* __restrict__ labels, long long* __restrict__ y_label,
    float* __restrict__ y) {
  for (i64 r = blockIdx.x * (i64)blockDim.x + threadIdx.x; r < N;
       r += (i64)gridDim.x * blockDim.x) {
    float* s = y + r * NT;
    int best = -1;
    for (int j = 0; j < NT; ++j) {
      float v = (float)acc[r * NT + j];
      if (AVERAGE) v = v / (float)TREES;
      if (j < NBASE) v = v + base[j];
      s[j] = v;
      /* the first highest score among the classes a leaf (or a base value) scored */
      if (CLASSIFIER && (seen[r * NT + j] || j < NBASE) && (best < 0 || v > s[best])) best = j;
    }
    if (CLASSIFIER) y_label[r] = labels[best < 0 ? 0 : best];
    if (TRANSFORM == 1) {
      for (int j = 0; j < NT; ++j) {
        const float v = 1.f / (1.f + expf(-fabsf(s[j])));
        s[j] = s[j] < 0.f ? 1.f - v : v;
      }
    } else if (TRANSFORM == 2) {
      float top = s[0];
      for (int j = 1; j < NT; ++j) top = s[j] > top ? s[j] : top;
      float total = 0.f;
      for (int j = 0; j < NT; ++j) { s[j] = expf(s[j] - top); total += s[j]; }
      for (int j = 0; j < NT; ++j) s[j] = s[j] / total;
    }
  }
}
"""


def _constant(ctx: BindContext, layer: LayerInfo, i: int, what: str) -> np.ndarray:
    index = layer.inputs[i]
    if not ctx.is_weight(index):
        raise KernelError(layer.name, layer.op, f"the CUDA TreeEnsemble needs constant {what}")
    return np.ascontiguousarray(ctx.host(index))


def _check(layer: LayerInfo, nodes: np.ndarray, offsets: np.ndarray, targets: np.ndarray,
           roots: np.ndarray, features: int, n_targets: int) -> None:
    """The CPU kernel's checks of the node arrays, vectorized: the first bad entry named."""
    n = nodes.shape[0]
    flags = nodes[:, 3]
    mode = flags & 7
    inner = mode != _LEAF
    problems = [
        ((flags < 0) | (flags > 15) | (mode > _LEAF), "node {i} has flags {v}", flags),
        (inner & ((nodes[:, 0] < 0) | (nodes[:, 0] >= features)),
         f"node {{i}} reads feature {{v}}, outside the input's {features} features",
         nodes[:, 0]),
        (inner & ((nodes[:, 1] < 0) | (nodes[:, 1] >= n)),
         "node {i} has child index {v}, outside the node arrays", nodes[:, 1]),
        (inner & ((nodes[:, 2] < 0) | (nodes[:, 2] >= n)),
         "node {i} has child index {v}, outside the node arrays", nodes[:, 2]),
        ((offsets[:-1] < 0) | (offsets[:-1] > offsets[1:]),
         "node {i} has leaf offset {v}, not ascending", offsets[:-1]),
        ((targets < 0) | (targets >= n_targets),
         f"leaf weight {{i}} targets {{v}}, outside the {n_targets} targets", targets),
        ((roots < 0) | (roots >= n), "tree {i} has root {v}, outside the node arrays", roots)]
    for bad, text, values in problems:
        hits = np.flatnonzero(bad)
        if hits.size:
            i = int(hits[0])
            raise KernelError(layer.name, layer.op, text.format(i=i, v=int(values[i])))
    if offsets[0] != 0 or offsets[-1] != targets.size:
        raise KernelError(layer.name, layer.op, f"the leaf offsets run {int(offsets[0])}.."
                          f"{int(offsets[-1])}, not 0..{targets.size}")


@kernel("TreeEnsemble")
def bind_tree_ensemble(ctx: BindContext, layer: LayerInfo) -> list[Candidate]:
    a = layer.attrs
    why = tree_ensemble_refusal(a)
    if why is not None:
        raise KernelError(layer.name, layer.op, why)
    x = ctx.place(layer.inputs[0])
    if x.dtype is not DType.FLOAT32 or len(x.shape) != 2:
        raise KernelError(layer.name, layer.op, f"reads float32 (N, F) features, not "
                          f"{x.dtype.name.lower()} {x.shape}")
    nodes, thr, offsets, targets, weights, roots = (
        _constant(ctx, layer, i, what) for i, what in enumerate(
            ("nodes", "thresholds", "leaf offsets", "leaf targets", "leaf weights", "roots"),
            start=1))
    classifier = a["kind"] == "classifier"
    n_targets = int(a["n_targets"])
    rows, features = x.shape
    _check(layer, nodes, offsets, targets, roots, features, n_targets)
    outs = [ctx.place(o) for o in layer.outputs]
    scores = outs[1] if classifier else outs[0]
    if scores.dtype is not DType.FLOAT32 or scores.shape != (rows, n_targets):
        raise KernelError(layer.name, layer.op, f"writes float32 ({rows}, {n_targets}) "
                          f"scores, not {scores.dtype.name.lower()} {scores.shape}")
    base = np.asarray(a.get("base_values") or [], np.float32)
    if not classifier and base.size not in (0, n_targets):
        base = base[:0]  # onnxruntime adds base values only when there is one per target
    base = base[:n_targets]
    labels = np.asarray(a.get("class_labels") or [0], np.int64)
    values = {"N": rows, "F": features, "NT": n_targets, "TREES": roots.size,
              "NODES": nodes.shape[0],
              # as the CPU backend (and onnxruntime): a classifier's AVERAGE is its SUM
              "AVERAGE": int(a["aggregate"] == "AVERAGE" and not classifier),
              "NBASE": base.size, "CLASSIFIER": int(classifier),
              "TRANSFORM": TRANSFORMS[a.get("post_transform", "NONE")]}
    source = defines(values) + _TREES
    acc = np.uint64(ctx.scratch(rows * n_targets * 8))
    seen = np.uint64(ctx.scratch(rows * n_targets))
    flag = ctx.index_check(layer.name, layer.op, "the trees (a cycle: no leaf within the "
                           f"node count {nodes.shape[0]})", roots.size,
                           "trees whose paths end in leaves")
    up = [np.uint64(ctx.upload(v)) for v in (nodes, thr, offsets, targets, weights, roots)]
    base_ptr = np.uint64(ctx.upload(base if base.size else np.zeros(1, np.float32)))
    label_ptr = np.uint64(outs[0].ptr if classifier else 0)
    run = chain(
        ctx.kernel_launch(source, "te_reset", rows * n_targets, [acc, seen]),
        ctx.kernel_launch(source, "te_walk", rows * roots.size,
                          [np.uint64(x.ptr), *up, acc, seen, np.uint64(flag)]),
        ctx.kernel_launch(source, "te_finish", rows,
                          [acc, seen, base_ptr, np.uint64(ctx.upload(labels)), label_ptr,
                           np.uint64(scores.ptr)]))
    return [Candidate("nvrtc", run)]
