"""What the CUDA TreeEnsemble kernel (``kernels/tree_ensemble.py``) runs, as data: pure
Python, so the coverage check (``coverage.py``) states the same refusals without CuPy."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# post-transform → the kernel's code for it
TRANSFORMS = {"NONE": 0, "LOGISTIC": 1, "SOFTMAX": 2}


def tree_ensemble_refusal(attrs: Mapping[str, Any]) -> str | None:
    """Why the CUDA TreeEnsemble does not run a layer of these attributes (None: it does)."""
    aggregate, transform = attrs.get("aggregate", "SUM"), attrs.get("post_transform", "NONE")
    if aggregate not in ("SUM", "AVERAGE"):
        return f"aggregate {aggregate}: the CUDA TreeEnsemble sums or averages"
    if transform not in TRANSFORMS:
        return f"post_transform {transform}: the CUDA TreeEnsemble applies NONE, LOGISTIC " \
               "and SOFTMAX"
    if attrs.get("kind") == "classifier" and int(attrs.get("n_targets", 0)) <= 2:
        return "a two-class classifier (onnxruntime's binary score rules) runs on the CPU"
    if attrs.get("kind") != "classifier" and int(attrs.get("n_targets", 0)) == 1 \
            and transform != "NONE":
        return f"a single-target regressor with post_transform {transform} runs on the CPU"
    return None
