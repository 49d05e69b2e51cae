"""CPU kernels of NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss.

Canonical attributes: ``reduction`` (none/sum/mean) and ``ignore_index`` (None when the
model sets none). Inputs are (N, C, d1…) scores, (N, d1…) integer targets and an optional
(C,) class weight. A target equal to ``ignore_index`` contributes nothing, not even to the
mean's denominator; any other target must be a valid class.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from pydla.backends.base import LayerSpec
from pydla.backends.cpu.kernels.indexing import checked_indices
from pydla.backends.cpu.registry import reference

Inputs = Sequence[np.ndarray | None]


def _nll(spec: LayerSpec, logp: np.ndarray, target: np.ndarray,
         weight: np.ndarray | None) -> np.ndarray:
    """The reduced loss of log-probabilities ``logp`` (N, C, …) at ``target`` (N, …)."""
    ignore = spec.attrs.get("ignore_index")
    target = target.astype(np.int64, copy=False)
    valid = np.ones(target.shape, bool) if ignore is None else target != int(ignore)
    classes = logp.shape[1]
    # Ignored positions may hold any value (even an out-of-range class): read class 0 there.
    safe = checked_indices(spec, np.where(valid, target, 0), classes, "the class axis")
    picked = np.take_along_axis(logp, safe[:, None], axis=1)[:, 0]
    w = valid.astype(logp.dtype)
    if weight is not None:
        w = w * weight[safe]
    loss = -picked * w
    reduction = spec.attrs["reduction"]
    if reduction == "none":
        return loss
    total = np.sum(loss, dtype=np.float64)
    if reduction == "sum":
        return np.asarray(total)
    with np.errstate(invalid="ignore", divide="ignore"):  # every target ignored: NaN, as ORT
        return np.asarray(total / np.sum(w, dtype=np.float64))


@reference("NegativeLogLikelihoodLoss")
def negative_log_likelihood_loss(spec: LayerSpec, inputs: Inputs) -> list[np.ndarray]:
    x, target = inputs[0], inputs[1]
    weight = inputs[2] if len(inputs) > 2 else None
    return [_nll(spec, x, target, weight)]


@reference("SoftmaxCrossEntropyLoss")
def softmax_cross_entropy_loss(spec: LayerSpec, inputs: Inputs) -> list[np.ndarray]:
    x, target = inputs[0], inputs[1]
    weight = inputs[2] if len(inputs) > 2 else None
    shifted = x - np.max(x, axis=1, keepdims=True)
    logp = shifted - np.log(np.sum(np.exp(shifted), axis=1, keepdims=True))
    loss = _nll(spec, logp, target, weight)
    return [loss, logp][:len(spec.outputs)]
