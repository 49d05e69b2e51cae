"""Matrix products with few rows, as numba loops (for fast_matmul and fast_lstm).

OpenBLAS's ``sgemm`` packs the whole of B on every call; with one to a few rows of A
(a batch-1 fully connected layer, an LSTM's recurrent step) that copy costs more than
the product. These loops read B once, in place, and vectorise along its contiguous axis.
All arrays are flat float32; ``*_at`` are element offsets and ``ld*`` row strides.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from pydla.backends.cpu.kernels.fast_math import FASTMATH_REDUCE

# Products with at most this many rows of A take these loops instead of sgemm.
MAX_ROWS = 4


@njit(inline="always", cache=True, error_model="numpy", fastmath=FASTMATH_REDUCE)
def dot_rows(b: np.ndarray, b_at: int, ldb: int, a: np.ndarray, a_at: int, lda: int,
             c: np.ndarray, c_at: int, ldc: int, m: int, j0: int, j1: int, k: int,
             alpha: float) -> None:
    """C[r, j] = alpha · Σ_i A[r, i]·B[j, i] for r < m, j0 ≤ j < j1 (B is n × k: C = A·Bᵀ)."""
    for j in range(j0, j1):
        row = b_at + j * ldb
        for r in range(m):
            x = a_at + r * lda
            s = np.float32(0)
            for i in range(k):
                s += b[np.uint64(row + i)] * a[np.uint64(x + i)]
            c[np.uint64(c_at + r * ldc + j)] = s * alpha


@njit(inline="always", cache=True, error_model="numpy", fastmath=FASTMATH_REDUCE)
def axpy_rows(b: np.ndarray, b_at: int, ldb: int, a: np.ndarray, a_at: int, lda: int,
              c: np.ndarray, c_at: int, ldc: int, m: int, j0: int, j1: int, k: int,
              alpha: float) -> None:
    """C[r, j] = alpha · Σ_i A[r, i]·B[i, j] for r < m, j0 ≤ j < j1 (B is k × n: C = A·B).

    Four rows of B at a time update every row of C: each row of B is read once (from
    wherever it is), C's rows stay in L1, and there is no horizontal reduction.
    """
    for r in range(m):
        out = c_at + r * ldc
        for j in range(j0, j1):
            c[np.uint64(out + j)] = np.float32(0)
    whole = k - k % 4
    for i in range(0, whole, 4):
        row = b_at + i * ldb
        for r in range(m):
            x = a_at + r * lda + i
            a0, a1 = a[np.uint64(x)] * alpha, a[np.uint64(x + 1)] * alpha
            a2, a3 = a[np.uint64(x + 2)] * alpha, a[np.uint64(x + 3)] * alpha
            out = c_at + r * ldc
            for j in range(j0, j1):
                c[np.uint64(out + j)] += (a0 * b[np.uint64(row + j)]
                                          + a1 * b[np.uint64(row + ldb + j)]
                                          + a2 * b[np.uint64(row + 2 * ldb + j)]
                                          + a3 * b[np.uint64(row + 3 * ldb + j)])
    for i in range(whole, k):
        row = b_at + i * ldb
        for r in range(m):
            av = a[np.uint64(a_at + r * lda + i)] * alpha
            out = c_at + r * ldc
            for j in range(j0, j1):
                c[np.uint64(out + j)] += av * b[np.uint64(row + j)]
