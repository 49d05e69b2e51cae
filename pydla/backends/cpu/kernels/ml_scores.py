"""Post-transforms of the classic-ML (ai.onnx.ml) scores, as onnxruntime computes them.

``post_transform`` is the one implementation: the ScorePostTransform layer (what a
LinearClassifier's PROBIT, SOFTMAX_ZERO or binary scores lower to) and the TreeEnsemble
kernel's finalisation both call it. Semantics follow onnxruntime's ``ml_common.h``
(``write_scores``, ``batched_update_scores_inplace``): a row of two or more scores is
transformed as a whole; a single score (a binary model) is PROBIT-transformed alone or
widened to two columns by the ``add_second_class`` rule.

Canonical attributes of ScorePostTransform: ``transform`` (NONE, LOGISTIC, SOFTMAX,
SOFTMAX_ZERO, PROBIT) and ``add_second_class`` (-1: none; 0/1: [1-p, p] with p the score,
or its logistic under LOGISTIC; 2/3: [-s, s], or [logistic(-s), logistic(s)] under LOGISTIC).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from pydla.backends.base import LayerSpec
from pydla.backends.cpu.registry import reference

TRANSFORMS = ("NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO", "PROBIT")
_F = np.float32


def _erfinv(x: np.ndarray) -> np.ndarray:
    """onnxruntime's ErfInv (Winitzki's approximation, a = 0.147) in float32, so PROBIT
    agrees with it to the last bits rather than to the approximation's 2e-3."""
    with np.errstate(divide="ignore", invalid="ignore"):
        sgn = np.where(x < 0, _F(-1), _F(1)).astype(_F)
        t = (_F(1) - x) * (_F(1) + x)
        log = np.log(t)
        v = _F(2) / (_F(3.14159) * _F(0.147)) + _F(0.5) * log
        v2 = _F(1) / _F(0.147) * log
        v3 = -v + np.sqrt(v * v - v2)
        return (sgn * np.sqrt(v3)).astype(_F)


def probit(s: np.ndarray) -> np.ndarray:
    return (_F(1.41421356) * _erfinv(_F(2) * s - _F(1))).astype(_F)


def logistic(s: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        v = _F(1) / (_F(1) + np.exp(-np.abs(s)))
    return np.where(s < 0, _F(1) - v, v).astype(_F)


def _softmax(s: np.ndarray) -> np.ndarray:
    e = np.exp(s - np.max(s, axis=1, keepdims=True))
    return (e / np.sum(e, axis=1, keepdims=True)).astype(_F)


def _softmax_zero(s: np.ndarray) -> np.ndarray:
    """Softmax over the non-zero scores; a zero score stays (almost) zero."""
    vmax = np.max(s, axis=1, keepdims=True)
    nonzero = (s > _F(1e-7)) | (s < _F(-1e-7))
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        e = np.where(nonzero, np.exp(s - vmax), s * np.exp(-vmax))
        total = np.sum(np.where(nonzero, e, _F(0)), axis=1, keepdims=True)
        return (e / total).astype(_F)


def post_transform(scores: np.ndarray, transform: str, add_second_class: int = -1
                   ) -> np.ndarray:
    """Transformed (N, C) float32 scores; a (N, 1) column may come back as (N, 2)."""
    s = np.asarray(scores, _F)
    if s.shape[1] >= 2:
        if transform == "PROBIT":
            return probit(s)
        if transform == "LOGISTIC":
            return logistic(s)
        if transform == "SOFTMAX":
            return _softmax(s)
        if transform == "SOFTMAX_ZERO":
            return _softmax_zero(s)
        return s.copy()
    if transform == "PROBIT":
        return probit(s)
    if add_second_class in (0, 1):
        # onnxruntime 1.32 widens the transformed score: [1 - σ(s), σ(s)] under LOGISTIC
        p = logistic(s) if transform == "LOGISTIC" else s
        return np.concatenate([_F(1) - p, p], axis=1)
    if add_second_class in (2, 3):
        if transform == "LOGISTIC":
            return np.concatenate([logistic(-s), logistic(s)], axis=1)
        return np.concatenate([-s, s], axis=1)
    return s.copy()


def transformed_width(classes: int, transform: str, add_second_class: int) -> int:
    """The number of columns ``post_transform`` makes of ``classes`` (shape rule)."""
    if classes == 1 and transform != "PROBIT" and add_second_class >= 0:
        return 2
    return classes


@reference("ScorePostTransform")
def score_post_transform(spec: LayerSpec, inputs: Sequence[np.ndarray | None]
                         ) -> list[np.ndarray]:
    x = inputs[0]
    assert x is not None
    return [post_transform(x, str(spec.attrs["transform"]),
                           int(spec.attrs.get("add_second_class", -1)))]
