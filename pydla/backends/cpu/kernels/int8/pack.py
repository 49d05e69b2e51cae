"""Weights in the vector paths' layouts, packed once at bind time.

Convolution (weights broadcast over pixels): per group, rows padded to a multiple of R,
``[row][quad][tap][KG]`` — a quad is KG consecutive input channels of the group (the last
one padded with zero weights), a tap a (kh, kw) position; stored as int8 (VNNI) or int16
(AVX2). The activations are interleaved to match (conv.py).

GEMM (weights as the vector operand): N padded to a multiple of VC = L·C columns,
``[panel][k / KG][VC][KG]``: one step of the micro-kernel reads C vectors side by side.
"""

from __future__ import annotations

import numpy as np

from pydla.backends.cpu.kernels.int8.dot import Path


def _ceil(a: int, b: int) -> int:
    return -(-a // b) * b


def conv_weights(w: np.ndarray, group: int, path: Path) -> np.ndarray:
    """w (OC, C/group, kh, kw) int8 → (group, rows, quads·taps·KG) in the path's type."""
    oc, cg, kh, kw = w.shape
    per = oc // group
    rows = _ceil(per, path.rows)
    quads = -(-cg // path.kg)
    taps = kh * kw
    src = np.zeros((group, rows, quads * path.kg, taps), np.int16)
    src[:, :per, :cg] = w.reshape(group, per, cg, taps)
    # [g][row][quad][j][tap] → [g][row][quad][tap][j]
    out = src.reshape(group, rows, quads, path.kg, taps).transpose(0, 1, 2, 4, 3)
    dtype = np.int8 if path.weight_bytes == 1 else np.int16
    return np.ascontiguousarray(out.reshape(group, rows, -1)).astype(dtype)


def gemm_weights(w: np.ndarray, path: Path) -> np.ndarray:
    """w (N, K) int8 → (panels, K/KG, VC·KG) in the path's type."""
    n, k = w.shape
    vc = path.vec_cols
    n_pad, k_pad = _ceil(n, vc), _ceil(k, path.kg)
    src = np.zeros((n_pad, k_pad), np.int16)
    src[:n, :k] = w
    # [panel][col][kstep][j] → [panel][kstep][col][j]
    out = src.reshape(n_pad // vc, vc, k_pad // path.kg, path.kg).transpose(0, 2, 1, 3)
    dtype = np.int8 if path.weight_bytes == 1 else np.int16
    return np.ascontiguousarray(out.reshape(n_pad // vc, k_pad // path.kg, -1)).astype(dtype)
