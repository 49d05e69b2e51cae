"""Shape rules of the classic-ML layers TreeEnsemble and ScorePostTransform (canonical
attributes: pydla.frontend.onnx.ops.ml_trees and ml).

A tree ensemble's node arrays must fit one another here: n nodes of four int32 fields, n
thresholds, n + 1 leaf offsets, as many leaf targets as leaf weights, at least one root.
The ids inside them — children, features, targets, offsets, roots — are data: the kernel
checks every one when the layer is bound and bounds each index it follows
(pydla.backends.cpu.kernels.tree_ensemble).
"""

from __future__ import annotations

from pydla.dtypes import DType
from pydla.loadable.validate import Expected, LayerCheck, rule

_TRANSFORMS = ("NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO", "PROBIT")
_AGGREGATES = ("SUM", "AVERAGE", "MIN", "MAX")
_TARGETS = 1 << 20


def _float_list(check: LayerCheck, name: str, sizes: tuple[int, ...]) -> list[float]:
    v = check.attrs.get(name, [])
    if (not isinstance(v, list) or len(v) not in sizes
            or any(isinstance(e, bool) or not isinstance(e, (int, float)) for e in v)):
        raise check.fail(f".attrs.{name}", f"{v!r} is not a list of {sizes} numbers")
    return v


@rule("TreeEnsemble")
def _tree_ensemble(check: LayerCheck) -> Expected:
    kind = check.choice("kind", ("classifier", "regressor"))
    check.arity(7, 7, 2 if kind == "classifier" else 1)
    x = check.x(0, 2)
    check.need(x.dtype in (DType.FLOAT32, DType.FLOAT64), 0, f"{x.name!r} is "
               f"{x.dtype.name.lower()}, the features are float32 or float64")
    nodes = check.x(1, 2)
    n = nodes.shape[0]
    check.need(nodes.shape == (n, 4) and n >= 1 and nodes.dtype is DType.INT32, 1,
               f"nodes {nodes.shape} {nodes.dtype.name.lower()} are not (n, 4) int32")
    expected = {2: ((n,), DType.FLOAT32), 3: ((n + 1,), DType.INT32)}
    for k, (shape, dtype) in expected.items():
        t = check.x(k)
        check.need(t.shape == shape and t.dtype is dtype, k, f"{t.name!r} {t.shape} "
                   f"{t.dtype.name.lower()} is not {shape} {dtype.name.lower()} for {n} nodes")
    targets, weights, roots = check.x(4, 1), check.x(5, 1), check.x(6, 1)
    check.need(targets.dtype is DType.INT32, 4, "leaf targets are int32")
    check.need(weights.shape == targets.shape and weights.dtype is DType.FLOAT32, 5,
               f"leaf weights {weights.shape} do not match leaf targets {targets.shape}")
    check.need(roots.dtype is DType.INT32 and roots.shape[0] >= 1, 6,
               f"roots {roots.shape} are not one or more int32 node indices")
    n_t = check.int_("n_targets", None, 1, _TARGETS)
    check.choice("post_transform", _TRANSFORMS)
    rows = x.shape[0]
    if kind == "regressor":
        check.choice("aggregate", _AGGREGATES)
        _float_list(check, "base_values", (0, 1, n_t))
        return [((rows, n_t), DType.FLOAT32)]
    check.choice("aggregate", ("SUM",))
    check.need(n_t >= 2, 0, f"a classifier of {n_t} classes")
    _float_list(check, "base_values", (0, 1, 2) if n_t == 2 else (0, n_t))
    labels = check.ints("class_labels")
    if len(labels) != n_t:
        raise check.fail(".attrs.class_labels", f"{len(labels)} labels for {n_t} classes")
    for flag in ("binary_case", "weights_all_positive"):
        if not isinstance(check.attrs.get(flag), bool):
            raise check.fail(f".attrs.{flag}", f"{check.attrs.get(flag)!r} is not a boolean")
    return [((rows,), DType.INT64), ((rows, n_t), DType.FLOAT32)]


@rule("ScorePostTransform")
def _score_post_transform(check: LayerCheck) -> Expected:
    check.arity(1, 1)
    x = check.x(0, 2)
    check.need(x.dtype is DType.FLOAT32, 0, f"{x.name!r} is {x.dtype.name.lower()}, scores "
               "are float32")
    transform = check.choice("transform", _TRANSFORMS)
    second = check.int_("add_second_class", -1, -1, 3)
    rows, classes = x.shape
    widened = classes == 1 and transform != "PROBIT" and second >= 0
    return [((rows, 2 if widened else classes), DType.FLOAT32)]
