"""TreeEnsemble: classic-ML tree ensembles (TreeEnsembleClassifier/Regressor) as a numba
walk over flattened node arrays, finished as onnxruntime finishes them.

Inputs (the importer, pydla.frontend.onnx.ops.ml_trees, flattens every tree into them):
``x`` (N, F) float32 or float64 (compared with the thresholds in its precision);
``nodes`` (n, 4) int32 rows [feature, true child, false child,
flags] with flags = mode (0 LEQ, 1 LT, 2 GTE, 3 GT, 4 EQ, 5 NEQ, 6 LEAF) | missing-track-true
<< 3; ``thresholds`` (n,) float32; ``leaf_offsets`` (n + 1,) int32 and ``leaf_targets``,
``leaf_weights`` (W,): node i's weights are entries offsets[i]..offsets[i+1]; ``roots``
(trees,) int32. A branch goes to its true child when ``x[f] <mode> threshold`` holds, or
when x[f] is NaN and the node's missing values track true (onnxruntime's rule).

Canonical attributes: ``kind`` (classifier/regressor), ``n_targets``, ``aggregate`` (SUM,
AVERAGE, MIN, MAX), ``post_transform``, ``base_values`` (floats), and for a classifier
``class_labels`` (int64s), ``binary_case`` and ``weights_all_positive`` (what onnxruntime
derives from the class weights). Outputs: a classifier's (N,) int64 labels and (N, C)
scores; a regressor's (N, T) values.

The arrays come from a loadable, so nothing in them is trusted: they are checked once when
the layer is bound to its buffers (every child, feature and target id in range, offsets
ascending), and the walk still bounds each index it follows and gives up on a path longer
than the node count (a cycle) — each failure a KernelError naming the tree and node.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
from numba import njit, prange

from pydla.backends.base import LayerSpec, RunFn
from pydla.backends.cpu import threads
from pydla.backends.cpu.kernels.ml_scores import post_transform
from pydla.backends.cpu.registry import kernel
from pydla.backends.cpu.steps import PreboundKernel
from pydla.errors import KernelError

Thunk = Callable[[], None]

MODES = ("BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT", "BRANCH_EQ", "BRANCH_NEQ",
         "LEAF")
LEAF = 6
MISSING_TRUE = 8
AGGREGATES = ("SUM", "AVERAGE", "MIN", "MAX")
_SUM, _MIN, _MAX = 0, 2, 3
# Rows a job walks through each of its trees (a tree's nodes stay in cache meanwhile).
_BLOCK = 64
# Failures the numba code reports (kind, tree, node): the caller raises them.
_BAD_NODE, _CYCLE, _BAD_FEATURE, _BAD_LEAF = 1, 2, 3, 4


@njit(cache=True, nogil=True, error_model="numpy")
def check_arrays(nodes: np.ndarray, offsets: np.ndarray, targets: np.ndarray,
                 roots: np.ndarray, features: int, n_targets: int) -> np.ndarray:
    """[kind, index, value] of the first inconsistent entry, or kind 0."""
    n = nodes.shape[0]
    for i in range(n):
        mode = nodes[i, 3] & 7
        if nodes[i, 3] < 0 or nodes[i, 3] > 15 or mode > LEAF:
            return np.array([1, i, nodes[i, 3]], np.int64)
        if mode != LEAF:
            if nodes[i, 0] < 0 or nodes[i, 0] >= features:
                return np.array([2, i, nodes[i, 0]], np.int64)
            for k in (1, 2):
                if nodes[i, k] < 0 or nodes[i, k] >= n:
                    return np.array([3, i, nodes[i, k]], np.int64)
        if offsets[i] < 0 or offsets[i] > offsets[i + 1]:
            return np.array([4, i, offsets[i]], np.int64)
    if offsets[0] != 0 or offsets[n] != targets.size:
        return np.array([5, n, offsets[n]], np.int64)
    for k in range(targets.size):
        if targets[k] < 0 or targets[k] >= n_targets:
            return np.array([6, k, targets[k]], np.int64)
    for t in range(roots.size):
        if roots[t] < 0 or roots[t] >= n:
            return np.array([7, t, roots[t]], np.int64)
    return np.array([0, 0, 0], np.int64)


@njit(cache=True, nogil=True, error_model="numpy", inline="always")
def walk_tree(x: np.ndarray, r: int, root: int, nodes: np.ndarray, thr: np.ndarray,
              offsets: np.ndarray, targets: np.ndarray, weights: np.ndarray, agg: int,
              acc: np.ndarray, has: np.ndarray, c: int) -> tuple[int, int]:
    """Walk row r down one tree into acc[c, r]; (0, 0) or (failure kind, node)."""
    n_nodes, n_feat, n_t, n_w = nodes.shape[0], x.shape[1], acc.shape[2], targets.size
    i = root
    for _ in range(n_nodes):  # a path longer than the node count is a cycle
        if i < 0 or i >= n_nodes:
            return _BAD_NODE, i
        flags = nodes[i, 3]
        mode = flags & 7
        if mode == LEAF:
            lo, hi = offsets[i], offsets[i + 1]
            if lo < 0 or hi < lo or hi > n_w:
                return _BAD_LEAF, i
            for k in range(lo, hi):
                j = targets[k]
                if j < 0 or j >= n_t:
                    return _BAD_LEAF, i
                w = weights[k]
                if agg == _MIN:
                    if has[c, r, j] == 0 or w < acc[c, r, j]:
                        acc[c, r, j] = w
                elif agg == _MAX:
                    if has[c, r, j] == 0 or w > acc[c, r, j]:
                        acc[c, r, j] = w
                else:
                    acc[c, r, j] += w
                has[c, r, j] = 1
            return 0, 0
        f = nodes[i, 0]
        if f < 0 or f >= n_feat:
            return _BAD_FEATURE, i
        v, th = x[r, f], thr[i]
        if mode == 0:
            go = v <= th
        elif mode == 1:
            go = v < th
        elif mode == 2:
            go = v >= th
        elif mode == 3:
            go = v > th
        elif mode == 4:
            go = v == th
        else:
            go = v != th
        if not go and (flags & MISSING_TRUE) != 0 and np.isnan(v):
            go = True
        i = nodes[i, 1] if go else nodes[i, 2]
    return _CYCLE, i


@njit(parallel=True, cache=True, nogil=True, error_model="numpy")
def walk(x: np.ndarray, nodes: np.ndarray, thr: np.ndarray, offsets: np.ndarray,
         targets: np.ndarray, weights: np.ndarray, roots: np.ndarray, agg: int, block: int,
         acc: np.ndarray, has: np.ndarray, err: np.ndarray) -> None:
    """acc[c, r, :] aggregates the leaves row r reaches in chunk c of the trees; has marks
    the targets some leaf wrote. A job is one chunk of trees over one block of rows, trees
    outside and rows inside, so that a tree's nodes stay in cache for the whole block.
    err[job] = [kind, tree, node] of a failure."""
    chunks, n_rows, n_trees = acc.shape[0], acc.shape[1], roots.size
    blocks = (n_rows + block - 1) // block
    for job in prange(chunks * blocks):
        c, b = job // blocks, job % blocks
        r_lo, r_hi = b * block, min(n_rows, (b + 1) * block)
        for t in range(n_trees * c // chunks, n_trees * (c + 1) // chunks):
            for r in range(r_lo, r_hi):
                kind, node = walk_tree(x, r, roots[t], nodes, thr, offsets, targets,
                                       weights, agg, acc, has, c)
                if kind != 0:
                    err[job, 0], err[job, 1], err[job, 2] = kind, t, node
                    break
            if err[job, 0] != 0:
                break


def merge_chunks(acc: np.ndarray, has: np.ndarray, agg: int) -> tuple[np.ndarray, np.ndarray]:
    """Combine the per-chunk aggregates (chunk-major) into (N, T) values and flags."""
    seen = has.any(axis=0)
    if acc.shape[0] == 1:
        return acc[0], seen
    if agg == _MIN:
        return np.where(has, acc, np.inf).min(axis=0), seen
    if agg == _MAX:
        return np.where(has, acc, -np.inf).max(axis=0), seen
    return acc.sum(axis=0), seen


def _finish_regressor(spec: LayerSpec, score: np.ndarray, seen: np.ndarray,
                      n_trees: int) -> np.ndarray:
    a = spec.attrs
    base = np.asarray(a.get("base_values", []), np.float32)
    agg, transform = a["aggregate"], a["post_transform"]
    s = score.astype(np.float32)
    if agg == "AVERAGE":
        s = s / np.float32(n_trees)
    if agg in ("MIN", "MAX"):
        s = np.where(seen, s, np.float32(0))
    n_t = s.shape[1]
    if n_t == 1:  # onnxruntime's single-target path: one base value, PROBIT only
        if base.size == 1:
            s = s + base[0]
        return post_transform(s, "PROBIT") if transform == "PROBIT" else s
    if base.size == n_t:
        s = s + base
    return post_transform(s, transform)


def _finish_classifier(spec: LayerSpec, score: np.ndarray, seen: np.ndarray
                       ) -> tuple[np.ndarray, np.ndarray]:
    a = spec.attrs
    base = np.asarray(a.get("base_values", []), np.float32)
    labels = np.asarray(a["class_labels"], np.int64)
    transform = a["post_transform"]
    s = score.astype(np.float32)
    if s.shape[1] > 2:
        if base.size:
            s = s + base[:s.shape[1]]
            seen = seen | (np.arange(s.shape[1]) < base.size)
        # the first of the highest scores among the classes some leaf (or base) scored
        best = np.argmax(np.where(seen, s, -np.inf), axis=1)
        return labels[best], post_transform(s, transform)
    return _finish_binary(spec, s, seen, base, labels, transform)


def _finish_binary(spec: LayerSpec, s: np.ndarray, seen: np.ndarray, base: np.ndarray,
                   labels: np.ndarray, transform: str) -> tuple[np.ndarray, np.ndarray]:
    """onnxruntime's two-class rules (TreeAggregatorClassifier::FinalizeScores), row by
    row: which scores exist decides between one widened score and two transformed ones."""
    n = s.shape[0]
    out_labels = np.empty(n, np.int64)
    out = np.zeros((n, 2), np.float32)
    binary = bool(spec.attrs.get("binary_case", False))
    positive = bool(spec.attrs.get("weights_all_positive", False))
    for r in range(n):
        s0, s1 = s[r, 0], s[r, 1]
        h0, h1 = bool(seen[r, 0]), bool(seen[r, 1])
        two, extra, plain = True, -1, False
        if base.size == 2:
            if h1:
                s1 = base[1] + s0
                s0 = -s1
            else:
                # onnxruntime 1.32 (measured): one score s0 + base[0], written unwidened
                s0, two, plain = s0 + base[0], False, True
        elif base.size == 1:
            s0 = s0 + base[0]
            two = h1
        else:
            extra = 3
            two = h1
        pos = s1 if two and h1 else (s0 if h0 else np.float32(0))
        if binary:
            if positive:
                extra = 0 if pos > 0.5 else 1
                label = labels[1] if pos > 0.5 else labels[0]
            else:
                extra = 2 if pos > 0 else 3
                label = labels[1] if pos > 0 else labels[0]
        else:
            label = 1 if pos > 0 else 0
        out_labels[r] = label
        if plain:
            out[r, 0] = s0
        elif two:
            out[r] = post_transform(np.array([[s0, s1]], np.float32), transform)[0]
        else:
            row = post_transform(np.array([[s0]], np.float32), transform, extra)[0]
            out[r, :row.size] = row
    return out_labels, out


def _failure(spec: LayerSpec, kind: int, tree: int, node: int) -> KernelError:
    what = {_BAD_NODE: f"reaches node index {node}, outside the node arrays",
            _CYCLE: f"does not reach a leaf within the node count (a cycle at node {node})",
            _BAD_FEATURE: f"node {node} reads a feature outside the input",
            _BAD_LEAF: f"leaf {node} has weights outside the weight arrays"}[kind]
    return KernelError(spec.name, spec.op, f"tree {tree} {what}")


_CHECKS = ("node {i} has flags {v} (mode 0..6, missing track bit 8)",
           "node {i} reads feature {v}, outside the input's {f} features",
           "node {i} has child index {v}, outside the node arrays",
           "node {i} has leaf offset {v}, not ascending",
           "the leaf offsets end at {v}, not at the weight count",
           "leaf weight {i} targets {v}, outside the {t} targets",
           "tree {i} has root {v}, outside the node arrays")


def bind_tree_ensemble(spec: LayerSpec) -> RunFn:
    kind, agg_name = spec.attrs["kind"], spec.attrs["aggregate"]
    agg = AGGREGATES.index(agg_name)
    n_t = int(spec.attrs["n_targets"])

    def prebind(ins: Sequence[np.ndarray | None], outs: Sequence[np.ndarray]) -> Thunk:
        # x is read in place (a copy would freeze this run's features); the node arrays
        # are constant weights
        x = ins[0]
        nodes, thr, offsets, targets, weights, roots = (
            np.ascontiguousarray(a) for a in ins[1:])  # type: ignore[arg-type]
        assert x is not None
        n_rows, features = x.shape
        bad = check_arrays(nodes, offsets, targets, roots, features, n_t)
        if bad[0]:
            raise KernelError(spec.name, spec.op, _CHECKS[int(bad[0]) - 1].format(
                i=int(bad[1]), v=int(bad[2]), f=features, t=n_t))
        workers = max(1, threads.configure())
        blocks = -(-n_rows // _BLOCK)
        # enough row blocks keep every thread busy; else the trees are split as well
        chunks = 1 if blocks >= 2 * workers else max(1, min(workers, roots.size))

        def run() -> None:
            acc = np.zeros((chunks, n_rows, n_t), np.float64)
            has = np.zeros((chunks, n_rows, n_t), np.uint8)
            err = np.zeros((chunks * blocks, 3), np.int64)
            walk(x, nodes, thr, offsets, targets, weights, roots, agg, _BLOCK, acc, has, err)
            failed = np.flatnonzero(err[:, 0])
            if failed.size:
                raise _failure(spec, *(int(v) for v in err[failed[0]]))
            score, seen = merge_chunks(acc, has.astype(bool), agg)
            if kind == "classifier":
                labels, probs = _finish_classifier(spec, score, seen)
                outs[0][...] = labels
                outs[1][...] = probs
            else:
                outs[0][...] = _finish_regressor(spec, score, seen, roots.size)

        return run

    return PreboundKernel(prebind)


kernel("TreeEnsemble")(bind_tree_ensemble)
