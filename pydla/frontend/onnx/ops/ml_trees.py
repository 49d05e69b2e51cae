"""Importers of ai.onnx.ml's TreeEnsembleClassifier and TreeEnsembleRegressor: every tree
flattened into the node arrays of one TreeEnsemble layer (the layout and the semantics:
pydla.backends.cpu.kernels.tree_ensemble).

Nodes are keyed by (tree id, node id) and sorted; each branch's children are found by key
(a child that does not exist is refused here, naming the tree and node), each tree's root
is its one node no branch points to, and the leaf weights are grouped per node as offsets
into two weight arrays.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pydla.backends.cpu.kernels.tree_ensemble import AGGREGATES, LEAF, MISSING_TRUE, MODES
from pydla.dtypes import DType
from pydla.frontend.onnx.importer import ImportContext, OnnxNode
from pydla.frontend.onnx.ops.ml import (
    ML,
    TRANSFORMS,
    attr_proto,
    choice,
    float_rows,
    floats,
    int_labels,
    ints,
)
from pydla.frontend.onnx.registry import onnx_op
from pydla.ir import Value

_I32 = np.iinfo(np.int32).max


@dataclass
class FlatTrees:
    nodes: np.ndarray  # (n, 4) int32: feature, true child, false child, flags
    thresholds: np.ndarray  # (n,) float32
    offsets: np.ndarray  # (n + 1,) int32
    targets: np.ndarray  # (W,) int32
    weights: np.ndarray  # (W,) float32
    roots: np.ndarray  # (trees,) int32


def _modes(node: OnnxNode) -> np.ndarray:
    """nodes_modes as a bytes array (millions of entries: no str per node)."""
    a = attr_proto(node, "nodes_modes")
    return np.array(list(a.strings) if a is not None else [], dtype=bytes)


def flatten(ctx: ImportContext, node: OnnxNode, prefix: str, n_targets: int,
            features: int) -> FlatTrees:
    tree, nid = ints(node, "nodes_treeids"), ints(node, "nodes_nodeids")
    n = tree.size
    feature = ints(node, "nodes_featureids")
    true_id, false_id = ints(node, "nodes_truenodeids"), ints(node, "nodes_falsenodeids")
    values = floats(node, "nodes_values")
    names = _modes(node)
    missing = ints(node, "nodes_missing_value_tracks_true")
    if missing.size == 0:
        missing = np.zeros(n, np.int64)
    sizes = {"nodes_nodeids": nid.size, "nodes_featureids": feature.size,
             "nodes_truenodeids": true_id.size, "nodes_falsenodeids": false_id.size,
             "nodes_values": values.size, "nodes_modes": names.size,
             "nodes_missing_value_tracks_true": missing.size}
    wrong = {k: v for k, v in sizes.items() if v != n}
    if n == 0 or wrong:
        raise ctx.error(f"the node attributes must all have one entry per node "
                        f"({n} nodes_treeids): {wrong or 'no nodes'}")
    if n > _I32 // 2 or min(tree.min(), nid.min()) < 0:
        raise ctx.error("tree and node ids must be non-negative (and below 2**30 nodes)")
    kinds, which = np.unique(names, return_inverse=True)
    unknown = sorted(k.decode("utf-8", "replace") for k in kinds if k.decode() not in MODES)
    if unknown:
        raise ctx.error(f"nodes_modes {unknown} are not among {list(MODES)}")
    mode = np.array([MODES.index(k.decode()) for k in kinds], np.int64)[which.reshape(-1)]
    span = int(nid.max()) + 1
    keys = tree * span + nid
    order = np.argsort(keys, kind="stable")
    keys, tree, nid = keys[order], tree[order], nid[order]
    feature, true_id, false_id = feature[order], true_id[order], false_id[order]
    values, mode, missing = values[order], mode[order], missing[order]
    dup = np.flatnonzero(keys[1:] == keys[:-1])
    if dup.size:
        raise ctx.error(f"tree {tree[dup[0]]} has node {nid[dup[0]]} twice")
    branch = mode != LEAF

    def child(ids: np.ndarray, which: str) -> np.ndarray:
        bad = branch & ((ids < 0) | (ids >= span))
        pos = np.searchsorted(keys, tree * span + np.clip(ids, 0, span - 1))
        pos = np.minimum(pos, n - 1)
        bad |= branch & (keys[pos] != tree * span + ids)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise ctx.error(f"tree {tree[i]} node {nid[i]}: its {which} node {ids[i]} "
                            "does not exist")
        return np.where(branch, pos, np.arange(n))

    t_child, f_child = child(true_id, "true"), child(false_id, "false")
    bad_feature = branch & ((feature < 0) | (feature >= features))
    if bad_feature.any():
        i = int(np.flatnonzero(bad_feature)[0])
        raise ctx.error(f"tree {tree[i]} node {nid[i]} reads feature {feature[i]}; the "
                        f"input has {features}")
    pointed = np.zeros(n, bool)
    pointed[t_child[branch]] = True
    pointed[f_child[branch]] = True
    roots = np.flatnonzero(~pointed)
    trees = np.unique(tree)
    if roots.size != trees.size or not np.array_equal(tree[roots], trees):
        raise ctx.error(f"{trees.size} trees but {roots.size} nodes no branch points to: "
                        "every tree needs exactly one root")
    flags = mode + np.where(missing != 0, MISSING_TRUE, 0)
    nodes = np.stack([np.where(branch, feature, 0), t_child, f_child, flags], axis=1)
    return FlatTrees(nodes.astype(np.int32), values.astype(np.float32),
                     *_leaf_weights(ctx, node, prefix, keys, span, n_targets),
                     roots.astype(np.int32))


def _leaf_weights(ctx: ImportContext, node: OnnxNode, prefix: str, keys: np.ndarray,
                  span: int, n_targets: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    w_tree, w_node = ints(node, f"{prefix}_treeids"), ints(node, f"{prefix}_nodeids")
    w_id, w_val = ints(node, f"{prefix}_ids"), floats(node, f"{prefix}_weights")
    if not w_tree.size == w_node.size == w_id.size == w_val.size:
        raise ctx.error(f"the {prefix}_* attributes must have one entry per weight")
    wk = w_tree * span + w_node
    pos = np.minimum(np.searchsorted(keys, wk), keys.size - 1)
    bad = (w_node < 0) | (w_node >= span) | (keys[pos] != wk)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ctx.error(f"weight {i} is for tree {w_tree[i]} node {w_node[i]}, which does "
                        "not exist")
    bad_t = (w_id < 0) | (w_id >= n_targets)
    if bad_t.any():
        i = int(np.flatnonzero(bad_t)[0])
        raise ctx.error(f"weight {i} is for {prefix} {w_id[i]}; there are {n_targets}")
    order = np.argsort(pos, kind="stable")
    offsets = np.concatenate([[0], np.cumsum(np.bincount(pos, minlength=keys.size))])
    return (offsets.astype(np.int32), w_id[order].astype(np.int32),
            w_val[order].astype(np.float32))


@onnx_op(ML + "TreeEnsembleClassifier", ML + "TreeEnsembleRegressor")
def import_tree_ensemble(ctx: ImportContext, node: OnnxNode) -> list[Value]:
    x = float_rows(ctx, node.input(0), keep_double=True)
    regressor = node.op_type == "TreeEnsembleRegressor"
    transform = choice(ctx, node, "post_transform", TRANSFORMS, "NONE")
    base = floats(node, "base_values")
    attrs: dict[str, object] = {"kind": "regressor" if regressor else "classifier",
                                "post_transform": transform}
    if regressor:
        n_t = int(node.attr("n_targets", 1))
        attrs["aggregate"] = choice(ctx, node, "aggregate_function", AGGREGATES, "SUM")
        prefix, allowed_base = "target", {0, 1, n_t}
    else:
        labels = int_labels(ctx, node, "classlabels_int64s", "classlabels_strings")
        n_t = labels.size
        if n_t < 2:
            raise ctx.error(f"{n_t} class labels: a classifier needs two or more")
        class_ids, class_w = ints(node, "class_ids"), floats(node, "class_weights")
        attrs.update(aggregate="SUM", class_labels=[int(v) for v in labels],
                     binary_case=bool(n_t == 2 and np.unique(class_ids).size == 1),
                     weights_all_positive=bool(np.all(class_w >= 0)))
        prefix, allowed_base = "class", ({0, 1, 2} if n_t == 2 else {0, n_t})
    if n_t < 1:
        raise ctx.error(f"{n_t} targets")
    if base.size not in allowed_base:
        raise ctx.error(f"base_values has {base.size} values for {n_t} "
                        f"{'targets' if regressor else 'classes'}")
    attrs.update(n_targets=n_t, base_values=[float(v) for v in base])
    flat = flatten(ctx, node, prefix, n_t, x.shape[1])
    n = x.shape[0]
    types = [((n, n_t), DType.FLOAT32)] if regressor else [((n,), DType.INT64),
                                                           ((n, n_t), DType.FLOAT32)]
    return emit_ensemble(ctx, x, flat, attrs, types)


def emit_ensemble(ctx: ImportContext, x: Value, flat: FlatTrees, attrs: dict[str, object],
                  types: list[tuple[tuple[int, ...], DType]]) -> list[Value]:
    arrays = [ctx.const(flat.nodes, DType.INT32, "tree_nodes"),
              ctx.const(flat.thresholds, DType.FLOAT32, "tree_thresholds"),
              ctx.const(flat.offsets, DType.INT32, "tree_leaf_offsets"),
              ctx.const(flat.targets, DType.INT32, "tree_leaf_targets"),
              ctx.const(flat.weights, DType.FLOAT32, "tree_leaf_weights"),
              ctx.const(flat.roots, DType.INT32, "tree_roots")]
    return ctx.emit("TreeEnsemble", [x, *arrays], attrs, out_types=types)


# ai.onnx.ml opset 5's TreeEnsemble numbers its enums. post_transform in onnxruntime's
# order (1.32 casts the number into its own enum: 1 LOGISTIC, 2 SOFTMAX; measured), which
# the ONNX text lists as 1 SOFTMAX, 2 LOGISTIC: pydla follows the runtime models are
# checked against.
_V5_MODES = ("BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT", "BRANCH_EQ", "BRANCH_NEQ")
_V5_AGGREGATES = ("AVERAGE", "SUM", "MIN", "MAX")
_V5_TRANSFORMS = ("NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO", "PROBIT")


def _enum(ctx: ImportContext, node: OnnxNode, name: str, names: tuple[str, ...],
          default: int) -> str:
    v = int(node.attr(name, default))
    if not 0 <= v < len(names):
        raise ctx.error(f"{name} {v} is not one of 0..{len(names) - 1}")
    return names[v]


@onnx_op(ML + "TreeEnsemble")
def import_tree_ensemble_v5(ctx: ImportContext, node: OnnxNode) -> list[Value]:
    """Opset 5's one tree op (a regressor): branch nodes 0..n-1, leaves in their own
    arrays, each child flagged as a node or a leaf. Leaves become LEAF nodes n.. with one
    weight each; BRANCH_MEMBER (set membership) is refused."""
    x = float_rows(ctx, node.input(0), keep_double=True)
    n_t = int(node.attr("n_targets", 1))
    modes = np.asarray(node.attr("nodes_modes", np.zeros(0)), np.int64).reshape(-1)
    splits = np.asarray(node.attr("nodes_splits", np.zeros(0)), np.float32).reshape(-1)
    feature, missing = ints(node, "nodes_featureids"), ints(node, "nodes_missing_value_tracks_true")
    kids = [(ints(node, f"nodes_{side}nodeids"), ints(node, f"nodes_{side}leafs"))
            for side in ("true", "false")]
    leaf_t = ints(node, "leaf_targetids")
    leaf_w = np.asarray(node.attr("leaf_weights", np.zeros(0)), np.float32).reshape(-1)
    roots = ints(node, "tree_roots")
    n, leaves = modes.size, leaf_t.size
    if missing.size == 0:
        missing = np.zeros(n, np.int64)
    sizes = [splits.size, feature.size, missing.size] + [a.size for k in kids for a in k]
    if n == 0 or any(v != n for v in sizes) or leaf_w.size != leaves or roots.size == 0:
        raise ctx.error(f"the nodes_* attributes must have one entry per node ({n}), the "
                        f"leaf_* ones one per leaf ({leaves}), and tree_roots one or more")
    if np.any((modes < 0) | (modes >= len(_V5_MODES))):
        raise ctx.error("nodes_modes: only BRANCH_LEQ..BRANCH_NEQ (0..5) are supported; "
                        "BRANCH_MEMBER (6) is not")
    if np.any((feature < 0) | (feature >= x.shape[1])):
        raise ctx.error(f"nodes_featureids reads outside the input's {x.shape[1]} features")
    if np.any((leaf_t < 0) | (leaf_t >= n_t)) or np.any((roots < 0) | (roots >= n)):
        raise ctx.error("leaf_targetids or tree_roots is out of range")
    children = []
    for ids, is_leaf in kids:
        bound = np.where(is_leaf != 0, leaves, n)
        if np.any((ids < 0) | (ids >= bound)):
            raise ctx.error("a child id is out of range")
        children.append(np.where(is_leaf != 0, n + ids, ids))
    flags = np.concatenate([modes + np.where(missing != 0, MISSING_TRUE, 0),
                            np.full(leaves, LEAF)])
    own = np.arange(n, n + leaves)
    nodes = np.stack([np.concatenate([feature, np.zeros(leaves, np.int64)]),
                      np.concatenate([children[0], own]),
                      np.concatenate([children[1], own]), flags], axis=1)
    offsets = np.concatenate([np.zeros(n + 1, np.int64), np.arange(1, leaves + 1)])
    flat = FlatTrees(nodes.astype(np.int32),
                     np.concatenate([splits, np.zeros(leaves, np.float32)]),
                     offsets.astype(np.int32), leaf_t.astype(np.int32), leaf_w,
                     roots.astype(np.int32))
    attrs: dict[str, object] = {
        "kind": "regressor", "n_targets": n_t, "base_values": [],
        "aggregate": _enum(ctx, node, "aggregate_function", _V5_AGGREGATES, 1),
        "post_transform": _enum(ctx, node, "post_transform", _V5_TRANSFORMS, 0)}
    return emit_ensemble(ctx, x, flat, attrs, [((x.shape[0], n_t), DType.FLOAT32)])
