"""Importers of the classic-ML domain (ai.onnx.ml): LinearClassifier, LinearRegressor,
Normalizer and ZipMap (the tree ensembles: ml_trees.py).

They lower to pydla's own layers where those are exact — a linear model is a Gemm, its
label an ArgMax and a Gather of the int64 labels, LOGISTIC a Sigmoid, SOFTMAX a Softmax;
PROBIT, SOFTMAX_ZERO and a binary model's widened scores become a ScorePostTransform layer
(pydla.backends.cpu.kernels.ml_scores, onnxruntime's semantics). A loadable holds no
string tensors, so string class labels are refused.

ZipMap turns a (N, C) probability tensor into a sequence of {label: probability} maps,
which no loadable tensor can be: the importer passes the tensor through, and the builder
(``zipmap_outputs``) records which graph output is zip-mapped with which labels in the
loadable's build metadata (``build["zipmap"]``), so that ``pydla.InferenceSession`` can
return onnxruntime's list of dicts. A ZipMap whose maps feed anything but a graph output
is refused.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx

from pydla.dtypes import DType
from pydla.errors import BuildError
from pydla.frontend.onnx.importer import ImportContext, OnnxNode
from pydla.frontend.onnx.registry import onnx_op
from pydla.ir import Value

ML_DOMAIN = "ai.onnx.ml"
ML = ML_DOMAIN + "."
TRANSFORMS = ("NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO", "PROBIT")
_NUMERIC_INPUTS = (DType.FLOAT32, DType.FLOAT64, DType.INT64, DType.INT32)


# -- attributes, read from the proto as arrays (tree ensembles carry millions of entries) --
def attr_proto(node: OnnxNode, name: str) -> onnx.AttributeProto | None:
    return next((a for a in node.proto.attribute if a.name == name), None)


def ints(node: OnnxNode, name: str) -> np.ndarray:
    a = attr_proto(node, name)
    return np.array(a.ints if a is not None else [], np.int64)


def floats(node: OnnxNode, name: str) -> np.ndarray:
    """A float list attribute, or its ``<name>_as_tensor`` form (later opsets)."""
    a = attr_proto(node, name)
    if a is not None:
        return np.array(a.floats, np.float32)
    t = node.attrs.get(name + "_as_tensor")
    return np.asarray(t, np.float32).reshape(-1) if t is not None else np.zeros(0, np.float32)


def strings(node: OnnxNode, name: str) -> list[str]:
    a = attr_proto(node, name)
    return [s.decode("utf-8") for s in a.strings] if a is not None else []


def choice(ctx: ImportContext, node: OnnxNode, name: str, options: Sequence[str],
           default: str) -> str:
    v = str(node.attr(name, default))
    if v not in options:
        raise ctx.error(f"{name} {v!r} is not one of {list(options)}")
    return v


def int_labels(ctx: ImportContext, node: OnnxNode, ints_name: str, strings_name: str
               ) -> np.ndarray:
    """The int64 class labels; string labels are refused (a loadable has no strings)."""
    if strings(node, strings_name):
        raise ctx.error(f"{strings_name}: string class labels are not supported (a loadable "
                        f"holds no string tensors); convert the model with int64 labels "
                        f"({ints_name})")
    return ints(node, ints_name)


def float_rows(ctx: ImportContext, x: Value | None, keep_double: bool = False) -> Value:
    """The (N, F) float32 input of a classic-ML model (onnxruntime casts ints and
    doubles to float too; a 1-D input is one row). ``keep_double``: a float64 input stays
    float64 (onnxruntime's trees compare doubles with their thresholds in double)."""
    if x is None:
        raise ctx.error("input X is required")
    if x.dtype not in _NUMERIC_INPUTS:
        raise ctx.error(f"input {x.name!r} is {x.dtype.name.lower()}; the op takes float, "
                        "double, int64 or int32")
    if len(x.shape) == 1:
        x = ctx.emit("Reshape", [x], {"shape": [1, x.shape[0]]},
                     out_types=[((1, x.shape[0]), x.dtype)])[0]
    if len(x.shape) != 2:
        raise ctx.error(f"input {x.name!r} has shape {x.shape}; the op takes (N, F)")
    if x.dtype is not DType.FLOAT32 and not (keep_double and x.dtype is DType.FLOAT64):
        x = ctx.emit("Cast", [x], {"to": int(DType.FLOAT32)},
                     out_types=[(x.shape, DType.FLOAT32)])[0]
    return x


def transform_scores(ctx: ImportContext, scores: Value, transform: str,
                     add_second_class: int = -1) -> Value:
    """Scores after ``transform`` as onnxruntime applies it (ml_scores.post_transform)."""
    n, c = scores.shape
    if c >= 2 and transform == "NONE":
        return scores
    if c >= 2 and transform == "LOGISTIC":
        return ctx.emit("Sigmoid", [scores], {}, out_types=[(scores.shape, DType.FLOAT32)])[0]
    if c >= 2 and transform == "SOFTMAX":
        return ctx.emit("Softmax", [scores], {"axes": [1]},
                        out_types=[(scores.shape, DType.FLOAT32)])[0]
    if c == 1 and transform != "PROBIT" and add_second_class < 0:
        return scores  # one score: onnxruntime applies only PROBIT to it
    width = 2 if c == 1 and transform != "PROBIT" and add_second_class >= 0 else c
    return ctx.emit("ScorePostTransform", [scores],
                    {"transform": transform, "add_second_class": add_second_class},
                    out_types=[((n, width), DType.FLOAT32)])[0]


def _linear(ctx: ImportContext, node: OnnxNode, x: Value, targets: int) -> Value:
    """X·Wᵀ + b as a Gemm: (N, targets) float32 scores."""
    coef = floats(node, "coefficients")
    features = x.shape[1]
    # onnxruntime reads the first targets × features coefficients as the matrix and
    # ignores any beyond (onnxruntime's own logreg_iris sample has 12 for 3 × 2)
    if targets < 1 or coef.size < targets * features:
        raise ctx.error(f"coefficients has {coef.size} values, fewer than {targets} targets "
                        f"× {features} features")
    coef = coef[:targets * features]
    intercepts = floats(node, "intercepts")
    if intercepts.size not in (0, targets):
        raise ctx.error(f"intercepts has {intercepts.size} values for {targets} targets")
    bias = ctx.const(intercepts, DType.FLOAT32, "intercepts") if intercepts.size else None
    w = ctx.const(coef.reshape(targets, features), DType.FLOAT32, "coefficients")
    return ctx.emit("Gemm", [x, w, bias],
                    {"alpha": 1.0, "beta": 1.0, "transA": 0, "transB": 1},
                    out_types=[((x.shape[0], targets), DType.FLOAT32)])[0]


@onnx_op(ML + "LinearClassifier")
def import_linear_classifier(ctx: ImportContext, node: OnnxNode) -> list[Value]:
    x = float_rows(ctx, node.input(0))
    transform = choice(ctx, node, "post_transform", TRANSFORMS, "NONE")
    labels = int_labels(ctx, node, "classlabels_ints", "classlabels_strings")
    classes = floats(node, "intercepts").size
    scores = _linear(ctx, node, x, classes)
    n = x.shape[0]
    if classes == 1:
        # one score: the label is its sign; two labels widen it to [1 - s, s]
        positive, negative = (labels[1], labels[0]) if labels.size == 2 else (1, 0)
        if labels.size == 2 and transform == "PROBIT":
            raise ctx.error("a binary LinearClassifier with PROBIT is not supported "
                            "(onnxruntime leaves its second score column unwritten)")
        above = ctx.emit("Greater", [scores, ctx.const(np.float32(0))], {},
                         out_types=[((n, 1), DType.BOOL)])[0]
        picked = ctx.emit("Where", [above, ctx.const(np.int64(positive)),
                                    ctx.const(np.int64(negative))], {},
                          out_types=[((n, 1), DType.INT64)])[0]
        label = ctx.emit("Reshape", [picked], {"shape": [n]},
                         out_types=[((n,), DType.INT64)])[0]
        return [label, transform_scores(ctx, scores, transform,
                                        1 if labels.size == 2 else -1)]
    if labels.size != classes:
        raise ctx.error(f"{labels.size} class labels for {classes} classes")
    best = ctx.emit("ArgMax", [scores], {"axis": 1, "keepdims": 0, "select_last_index": 0},
                    out_types=[((n,), DType.INT64)])[0]
    label = ctx.emit("Gather", [ctx.const(labels, DType.INT64, "classlabels"), best],
                     {"axis": 0}, out_types=[((n,), DType.INT64)])[0]
    return [label, transform_scores(ctx, scores, transform)]


@onnx_op(ML + "LinearRegressor")
def import_linear_regressor(ctx: ImportContext, node: OnnxNode) -> list[Value]:
    x = float_rows(ctx, node.input(0))
    transform = choice(ctx, node, "post_transform", TRANSFORMS, "NONE")
    targets = int(node.attr("targets", 1))
    return [transform_scores(ctx, _linear(ctx, node, x, targets), transform)]


_NORMS = {"MAX": "ReduceMax", "L1": "ReduceL1", "L2": "ReduceL2"}


@onnx_op(ML + "Normalizer")
def import_normalizer(ctx: ImportContext, node: OnnxNode) -> list[Value]:
    x = node.input(0)
    if x is None or len(x.shape) not in (1, 2) or x.dtype not in _NUMERIC_INPUTS:
        raise ctx.error(f"input {None if x is None else (x.shape, x.dtype.name)} is not a "
                        "1-D or 2-D float, double, int64 or int32 tensor")
    norm = choice(ctx, node, "norm", tuple(_NORMS), "MAX")
    if x.dtype is not DType.FLOAT32:
        x = ctx.emit("Cast", [x], {"to": int(DType.FLOAT32)},
                     out_types=[(x.shape, DType.FLOAT32)])[0]
    axis = len(x.shape) - 1
    kept = (*x.shape[:-1], 1)
    f = DType.FLOAT32
    size = ctx.emit(_NORMS[norm], [x], {"axes": [axis], "keepdims": 1},
                    out_types=[(kept, f)])[0]
    # a row whose norm is zero stays as it is (onnxruntime divides only by a non-zero norm)
    zero = ctx.emit("Equal", [size, ctx.const(np.float32(0))], {},
                    out_types=[(kept, DType.BOOL)])[0]
    safe = ctx.emit("Where", [zero, ctx.const(np.float32(1)), size], {},
                    out_types=[(kept, f)])[0]
    return ctx.emit("Div", [x, safe], {}, out_types=[(x.shape, f)])


@onnx_op(ML + "ZipMap")
def import_zipmap(ctx: ImportContext, node: OnnxNode) -> list[Value]:
    x = node.input(0)
    labels = int_labels(ctx, node, "classlabels_int64s", "classlabels_strings")
    if x is None or x.dtype is not DType.FLOAT32 or len(x.shape) != 2 \
            or x.shape[1] != labels.size:
        raise ctx.error(f"input {None if x is None else (x.shape, x.dtype.name)} is not a "
                        f"(N, {labels.size}) float tensor for {labels.size} labels")
    return [x]  # the maps exist only in the session: zipmap_outputs records them


def zipmap_outputs(graph: onnx.GraphProto) -> dict[str, list[int]]:
    """Graph outputs made by a ZipMap, with its int64 labels (build["zipmap"]).

    Raises BuildError for a ZipMap whose maps another node reads, or one inside a
    subgraph: a loadable carries tensors only, so the maps can only be made last.
    """
    outputs = {o.name for o in graph.output}
    read = {name for n in graph.node for name in n.input}
    found: dict[str, list[int]] = {}
    for n in graph.node:
        for a in n.attribute:
            if a.type == onnx.AttributeProto.GRAPH and _has_zipmap(a.g):
                raise BuildError(f"node {n.name!r} ({n.op_type}): a ZipMap inside a subgraph "
                                 "is not supported (a loadable carries tensors, not maps)")
        if n.domain != ML_DOMAIN or n.op_type != "ZipMap":
            continue
        out = n.output[0] if n.output else ""
        if out not in outputs or out in read:
            raise BuildError(f"node {n.name!r} (ZipMap): its maps {out!r} feed another node; "
                             "pydla supports a ZipMap only as the last step to a graph output "
                             "(a loadable carries tensors, not maps)")
        labels = next((list(a.ints) for a in n.attribute if a.name == "classlabels_int64s"),
                      [])
        found[out] = [int(v) for v in labels]
    return found


def _has_zipmap(g: onnx.GraphProto) -> bool:
    for n in g.node:
        if n.domain == ML_DOMAIN and n.op_type == "ZipMap":
            return True
        if any(a.type == onnx.AttributeProto.GRAPH and _has_zipmap(a.g) for a in n.attribute):
            return True
    return False
