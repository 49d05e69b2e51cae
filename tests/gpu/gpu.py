"""Shared by the GPU tests: skip the whole module cleanly where CuPy, cuda-bindings or an
NVIDIA GPU is missing (CI has none), and compare GPU outputs with the CPU backend."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest


def require_gpu() -> Any:
    """Call at module level: returns cupy, or skips the module."""
    cp = pytest.importorskip("cupy")
    pytest.importorskip("cuda.bindings")
    try:
        count = int(cp.cuda.runtime.getDeviceCount())
    except Exception:  # noqa: BLE001  (no driver, no device)
        count = 0
    if count == 0:
        pytest.skip("no CUDA GPU", allow_module_level=True)
    return cp


def relative_error(got: np.ndarray, want: np.ndarray) -> float:
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    return float(np.linalg.norm(got - want) / max(np.linalg.norm(want), 1e-30))


def cosine(got: np.ndarray, want: np.ndarray) -> float:
    a, b = np.asarray(got, np.float64).ravel(), np.asarray(want, np.float64).ravel()
    return float(a @ b / max(np.linalg.norm(a) * np.linalg.norm(b), 1e-30))
