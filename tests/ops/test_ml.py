"""The classic-ML ops (ai.onnx.ml) against onnxruntime: LinearClassifier, LinearRegressor,
Normalizer, TreeEnsembleClassifier/Regressor and ZipMap, on small onnx.helper models."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import pydla
from pydla.builder import BuildOptions, build
from pydla.errors import BuildError, ModelImportError
from pydla.tools import layerwise
from tests.oracle import assert_close, run_ort, run_pydla

ML = "ai.onnx.ml"
F = TensorProto.FLOAT
RNG = np.random.default_rng(7)
TRANSFORMS = ("NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO", "PROBIT")


def ml_model(nodes: Sequence[onnx.NodeProto], inputs: dict[str, tuple[int, list[int]]],
             outputs: dict[str, tuple[int, list[int]]], default_opset: bool = True,
             ml_opset: int = 3) -> onnx.ModelProto:
    ins = [helper.make_tensor_value_info(n, t, s) for n, (t, s) in inputs.items()]
    outs = [helper.make_tensor_value_info(n, t, s) for n, (t, s) in outputs.items()]
    opsets = [helper.make_opsetid(ML, ml_opset)] + ([helper.make_opsetid("", 21)]
                                                   if default_opset else [])
    model = helper.make_model(helper.make_graph(list(nodes), "ml", ins, outs),
                              opset_imports=opsets)
    model.ir_version = 8
    return model


def check(model: onnx.ModelProto, x: np.ndarray, **tol: float) -> list[np.ndarray]:
    feeds = {"x": x}
    got, want = run_pydla(model, feeds), run_ort(model, feeds)
    for g, w, name in zip(got, want, [o.name for o in model.graph.output]):
        if np.asarray(w).dtype.kind == "f":  # PROBIT of a score outside (0, 1) is NaN
            np.testing.assert_allclose(g, w, rtol=tol.get("rtol", 1e-5),
                                       atol=tol.get("atol", 1e-5), equal_nan=True,
                                       err_msg=name)
        else:
            assert_close([g], [w], names=[name])
    return got


def linear_classifier(classes: int, features: int, transform: str, labels: list[int]
                      ) -> onnx.ModelProto:
    node = helper.make_node(
        "LinearClassifier", ["x"], ["label", "scores"], domain=ML,
        coefficients=RNG.standard_normal(classes * features).astype(np.float32).tolist(),
        intercepts=RNG.standard_normal(classes).astype(np.float32).tolist(),
        classlabels_ints=labels, post_transform=transform)
    width = 2 if classes == 1 and len(labels) == 2 else classes
    return ml_model([node], {"x": (F, [5, features])},
                    {"label": (TensorProto.INT64, [5]), "scores": (F, [5, width])})


@pytest.mark.parametrize("transform", TRANSFORMS)
def test_linear_classifier_multiclass(transform: str) -> None:
    x = (RNG.standard_normal((5, 4)) * 0.3).astype(np.float32)
    check(linear_classifier(3, 4, transform, [10, 20, 30]), x)


@pytest.mark.parametrize("transform", ["NONE", "LOGISTIC"])
def test_linear_classifier_binary(transform: str) -> None:
    """One score, two labels: the label is its sign, the scores widen to [1 - s, s]."""
    x = RNG.standard_normal((5, 3)).astype(np.float32)
    check(linear_classifier(1, 3, transform, [4, 9]), x)


@pytest.mark.parametrize("targets,transform", [(1, "NONE"), (1, "PROBIT"), (2, "LOGISTIC"),
                                               (3, "SOFTMAX")])
def test_linear_regressor(targets: int, transform: str) -> None:
    node = helper.make_node(
        "LinearRegressor", ["x"], ["y"], domain=ML, targets=targets, post_transform=transform,
        coefficients=(RNG.standard_normal(targets * 4) * 0.1).astype(np.float32).tolist(),
        intercepts=(RNG.uniform(0.2, 0.8, targets)).astype(np.float32).tolist())
    model = ml_model([node], {"x": (F, [6, 4])}, {"y": (F, [6, targets])})
    check(model, (RNG.standard_normal((6, 4)) * 0.5).astype(np.float32))


@pytest.mark.parametrize("norm", ["MAX", "L1", "L2"])
def test_normalizer(norm: str) -> None:
    """A zero row stays zero (onnxruntime divides by non-zero norms only); int64 input is
    cast to float."""
    node = helper.make_node("Normalizer", ["x"], ["y"], domain=ML, norm=norm)
    x = RNG.standard_normal((4, 5)).astype(np.float32)
    x[1] = 0
    check(ml_model([node], {"x": (F, [4, 5])}, {"y": (F, [4, 5])}), x)
    xi = RNG.integers(-5, 5, (3, 4)).astype(np.int64)
    xi[0] = 0
    check(ml_model([node], {"x": (TensorProto.INT64, [3, 4])}, {"y": (F, [3, 4])}), xi)


# -- tree ensembles -----------------------------------------------------------------------
MODES = ["BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT", "BRANCH_EQ", "BRANCH_NEQ"]


def random_trees(trees: int, depth: int, features: int, targets: int, seed: int
                 ) -> dict[str, Any]:
    """Complete binary trees of ``depth`` with every branch mode, random missing tracks,
    node ids shuffled per tree (the importer must find children by id), two weights per
    leaf."""
    rng = np.random.default_rng(seed)
    a: dict[str, list[Any]] = {k: [] for k in (
        "nodes_treeids", "nodes_nodeids", "nodes_featureids", "nodes_modes", "nodes_values",
        "nodes_truenodeids", "nodes_falsenodeids", "nodes_missing_value_tracks_true",
        "w_tree", "w_node", "w_id", "w_val")}
    count = 2 ** (depth + 1) - 1
    for t in range(trees):
        ids = rng.permutation(count)
        for i in range(count):
            leaf = i >= 2 ** depth - 1
            a["nodes_treeids"].append(t)
            a["nodes_nodeids"].append(int(ids[i]))
            a["nodes_featureids"].append(0 if leaf else int(rng.integers(features)))
            a["nodes_modes"].append("LEAF" if leaf else MODES[int(rng.integers(6))])
            # values on a grid the inputs share, so EQ and NEQ branches both happen
            a["nodes_values"].append(0.0 if leaf else float(rng.integers(-2, 3)) / 2)
            a["nodes_truenodeids"].append(0 if leaf else int(ids[2 * i + 1]))
            a["nodes_falsenodeids"].append(0 if leaf else int(ids[2 * i + 2]))
            a["nodes_missing_value_tracks_true"].append(int(rng.integers(2)))
            if leaf:
                for target in rng.choice(targets, min(2, targets), replace=False):
                    a["w_tree"].append(t)
                    a["w_node"].append(int(ids[i]))
                    a["w_id"].append(int(target))
                    a["w_val"].append(float(rng.standard_normal()))
    return a


def tree_model(op: str, a: dict[str, Any], features: int, outputs: dict[str, Any],
               **attrs: Any) -> onnx.ModelProto:
    prefix = "class" if op == "TreeEnsembleClassifier" else "target"
    weights = {f"{prefix}_treeids": a["w_tree"], f"{prefix}_nodeids": a["w_node"],
               f"{prefix}_ids": a["w_id"], f"{prefix}_weights": a["w_val"]}
    nodes = {k: v for k, v in a.items() if k.startswith("nodes_")}
    node = helper.make_node(op, ["x"], list(outputs), domain=ML, **nodes, **weights, **attrs)
    return ml_model([node], {"x": (F, [16, features])}, outputs)


def tree_input(features: int) -> np.ndarray:
    x = RNG.integers(-3, 4, (16, features)).astype(np.float32) / 2
    x[RNG.random(x.shape) < 0.15] = np.nan  # missing values take the tracked branch
    return x


@pytest.mark.parametrize("aggregate", ["SUM", "AVERAGE", "MIN", "MAX"])
def test_tree_regressor_aggregates(aggregate: str) -> None:
    a = random_trees(5, 3, 4, 2, seed=1)
    model = tree_model("TreeEnsembleRegressor", a, 4, {"y": (F, [16, 2])}, n_targets=2,
                       aggregate_function=aggregate, base_values=[0.5, -1.0])
    check(model, tree_input(4))


@pytest.mark.parametrize("transform", ["NONE", "PROBIT"])
def test_tree_regressor_one_target(transform: str) -> None:
    """One target: one base value, and onnxruntime applies PROBIT alone."""
    a = random_trees(4, 2, 3, 1, seed=2)
    a["w_val"] = [v * 0.05 for v in a["w_val"]]
    model = tree_model("TreeEnsembleRegressor", a, 3, {"y": (F, [16, 1])}, n_targets=1,
                       base_values=[0.5], post_transform=transform)
    # PROBIT: onnxruntime's ErfInv approximation, matched to ~2e-5 (not bit for bit)
    check(model, tree_input(3), atol=1e-4)


@pytest.mark.parametrize("transform", TRANSFORMS)
def test_tree_classifier_multiclass(transform: str) -> None:
    a = random_trees(6, 3, 5, 3, seed=3)
    a["w_val"] = [v * 0.1 for v in a["w_val"]]
    outs = {"label": (TensorProto.INT64, [16]), "probs": (F, [16, 3])}
    model = tree_model("TreeEnsembleClassifier", a, 5, outs, classlabels_int64s=[3, 5, 7],
                       post_transform=transform, base_values=[0.1, 0.0, -0.1])
    check(model, tree_input(5))


@pytest.mark.parametrize("transform,positive,base", [
    ("LOGISTIC", False, []), ("NONE", True, []), ("LOGISTIC", True, [0.2]),
    ("NONE", False, [0.1, 0.1])])
def test_tree_classifier_binary(transform: str, positive: bool, base: list[float]) -> None:
    """Two labels, weights on one class: onnxruntime's binary rules (sign or 0.5 threshold,
    the second column widened from the first)."""
    a = random_trees(4, 2, 3, 1, seed=4)
    a["w_val"] = [abs(v) * 0.2 if positive else v for v in a["w_val"]]
    outs = {"label": (TensorProto.INT64, [16]), "probs": (F, [16, 2])}
    extra = {"base_values": base} if base else {}
    model = tree_model("TreeEnsembleClassifier", a, 3, outs, classlabels_int64s=[0, 1],
                       post_transform=transform, **extra)
    check(model, tree_input(3))


@pytest.mark.parametrize("base", [[], [0.2, 0.2]])
def test_tree_classifier_two_class_ids(base: list[float]) -> None:
    """Two labels with weights on both classes: scored as two classes (with two base
    values onnxruntime scores the second class from the first)."""
    a = random_trees(4, 2, 3, 2, seed=5)
    outs = {"label": (TensorProto.INT64, [16]), "probs": (F, [16, 2])}
    extra = {"base_values": base} if base else {}
    model = tree_model("TreeEnsembleClassifier", a, 3, outs, classlabels_int64s=[1, 2],
                       post_transform="SOFTMAX", **extra)
    check(model, tree_input(3))


@pytest.mark.parametrize("aggregate,transform", [(1, 0), (0, 0), (2, 2), (3, 1)])
def test_tree_ensemble_opset5(aggregate: int, transform: int) -> None:
    """ai.onnx.ml opset 5's TreeEnsemble: numbered enums, leaves in their own arrays. Two
    trees over 2 targets: tree 0 splits twice (a NaN of feature 1 goes true), tree 1 is one
    split."""
    def tensor(name: str, values: list, dtype: int) -> TensorProto:
        return helper.make_tensor(name, dtype, [len(values)], values)

    node = helper.make_node(
        "TreeEnsemble", ["x"], ["y"], domain=ML, n_targets=2, aggregate_function=aggregate,
        post_transform=transform, tree_roots=[0, 2],
        nodes_modes=tensor("m", [0, 3, 4], TensorProto.UINT8),
        nodes_featureids=[0, 1, 2], nodes_splits=tensor("s", [0.5, -0.5, 1.0], F),
        nodes_truenodeids=[1, 0, 3], nodes_trueleafs=[0, 1, 1],
        nodes_falsenodeids=[2, 1, 4], nodes_falseleafs=[1, 1, 1],
        nodes_missing_value_tracks_true=[0, 1, 0],
        leaf_targetids=[0, 1, 0, 1, 0], leaf_weights=tensor("w", [1.0, -2.0, 0.5, 3.0, -1.5],
                                                            F))
    model = ml_model([node], {"x": (F, [16, 3])}, {"y": (F, [16, 2])}, ml_opset=5)
    x = tree_input(3)
    x[:, 2] = np.where(RNG.random(16) < 0.5, 1.0, x[:, 2])  # the EQ split both ways
    check(model, x)


def test_tree_double_input_compares_in_double() -> None:
    """A float64 input is compared with the (float) thresholds in double, as onnxruntime
    does: values a hair off a threshold, which a float32 cast would round onto it."""
    a = random_trees(3, 2, 2, 2, seed=8)
    for k, mode in enumerate(a["nodes_modes"]):
        if mode != "LEAF":
            a["nodes_modes"][k] = "BRANCH_LEQ"
    node = helper.make_node(
        "TreeEnsembleRegressor", ["x"], ["y"], domain=ML, n_targets=2,
        target_treeids=a["w_tree"], target_nodeids=a["w_node"], target_ids=a["w_id"],
        target_weights=a["w_val"], **{k: v for k, v in a.items() if k.startswith("nodes_")})
    model = ml_model([node], {"x": (TensorProto.DOUBLE, [16, 2])}, {"y": (F, [16, 2])})
    grid = np.array([-1.0, -0.5, 0.0, 0.5], np.float64)
    x = RNG.choice(grid, (16, 2)) + RNG.choice([-1e-12, 1e-12], (16, 2))
    check(model, x)


# -- ZipMap, labels and refusals -----------------------------------------------------------
def zipped_model(default_opset: bool = True) -> onnx.ModelProto:
    lin = helper.make_node("LinearClassifier", ["x"], ["label", "scores"], domain=ML,
                           coefficients=[0.5, -1.0, 2.0, 0.3, 1.0, -0.2],
                           intercepts=[0.1, 0.2, -0.3], classlabels_ints=[7, 8, 9],
                           post_transform="LOGISTIC")
    norm = helper.make_node("Normalizer", ["scores"], ["normed"], domain=ML, norm="L1")
    zm = helper.make_node("ZipMap", ["normed"], ["probs"], domain=ML,
                          classlabels_int64s=[7, 8, 9])
    model = ml_model([lin, norm, zm], {"x": (F, [4, 2])},
                     {"label": (TensorProto.INT64, [4])}, default_opset)
    seq = helper.make_sequence_type_proto(helper.make_map_type_proto(
        TensorProto.INT64, helper.make_tensor_type_proto(F, None)))
    model.graph.output.append(helper.make_value_info("probs", seq))
    return model


def test_zipmap_session_returns_maps(tmp_path: Any) -> None:
    """An ai.onnx.ml-only model imports; the session returns ZipMap's list of dicts as
    onnxruntime, cuDLA-style callers get the probability tensor."""
    model = zipped_model(default_opset=False)
    x = RNG.standard_normal((4, 2)).astype(np.float32)
    want = run_ort(model, {"x": x})
    sess = pydla.InferenceSession(model, cache_dir=tmp_path)
    assert [(o.name, o.type) for o in sess.get_outputs()] == [
        ("label", "tensor(int64)"), ("probs", "seq(map(int64,tensor(float)))")]
    label, maps = sess.run(None, {"x": x})
    np.testing.assert_array_equal(label, want[0])
    assert [list(m) for m in maps] == [list(m) for m in want[1]] == [[7, 8, 9]] * 4
    np.testing.assert_allclose([list(m.values()) for m in maps],
                               [list(m.values()) for m in want[1]], rtol=1e-5)
    tensor = run_pydla(model, {"x": x})[1]
    assert tensor.shape == (4, 3)
    data = build(model)
    loaded = pydla.InferenceSession(data, cache_dir=tmp_path)  # a loadable keeps the maps
    assert loaded.run(["probs"], {"x": x})[0] == maps
    # pydla compare's reference holds the maps as the tensor the loadable returns
    assert layerwise.run_ort(model, {"x": x})["probs"].shape == (4, 3)


def test_zipmap_feeding_a_node_is_refused() -> None:
    model = zipped_model()
    model.graph.node.append(helper.make_node("Identity", ["probs"], ["again"]))
    with pytest.raises(BuildError, match="ZipMap.*feed another node"):
        build(model, BuildOptions())


def test_string_labels_are_refused() -> None:
    node = helper.make_node("LinearClassifier", ["x"], ["label", "scores"], domain=ML,
                            coefficients=[1.0, 2.0, 3.0, 4.0], intercepts=[0.0, 1.0],
                            classlabels_strings=["cat", "dog"])
    model = ml_model([node], {"x": (F, [2, 2])}, {"scores": (F, [2, 2])})
    with pytest.raises(ModelImportError, match="string class labels"):
        build(model)


def test_missing_child_is_refused() -> None:
    a = random_trees(1, 1, 2, 1, seed=6)
    a["nodes_truenodeids"][0] = 99
    model = tree_model("TreeEnsembleRegressor", a, 2, {"y": (F, [16, 1])}, n_targets=1)
    with pytest.raises(ModelImportError, match="tree 0 node .* true node 99 does not exist"):
        build(model)
