"""Phase planes: a strided, dilated, padded convolution read as unit-stride shifted rows.

An input plane is copied, zero-bordered, into sh·sw phase planes of row length wq: phase
(a, b) holds padded pixel (sh·R + a, sw·J + b) at R·wq + J. Output pixel (r, j) reads, for
kernel tap (i, k), phase ((i·dh) mod sh, (k·dw) mod sw) at (r + i·dh div sh)·wq + j +
k·dw div sw — so on the output "grid" p = r·wq + j every tap is the phase plane shifted by a
constant: one long unit-stride run over the whole output, for any stride and dilation.
Grid columns j ≥ ow are computed and dropped (wq - ow of every wq: a few percent).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from pydla.backends.cpu.kernels.conv_fast.geometry import Conv2d


def layout(geo: Conv2d) -> tuple[int, int]:
    """(wq, size): the phase planes' row length and length (with the slack that the
    dropped grid columns read past the last row)."""
    hp = max(geo.top + geo.h, (geo.oh - 1) * geo.sh + (geo.kh - 1) * geo.dh + 1)
    wp = max(geo.left + geo.w, (geo.ow - 1) * geo.sw + (geo.kw - 1) * geo.dw + 1)
    wq, rows = -(-wp // geo.sw), -(-hp // geo.sh)
    slack = (geo.kw - 1) * geo.dw // geo.sw + 1
    return wq, rows * wq + slack


def tap(i: int, k: int, geo: Conv2d, wq: int) -> tuple[int, int]:
    """(phase, offset) that tap (i, k) reads for grid position 0."""
    a, b = i * geo.dh, k * geo.dw
    return (a % geo.sh) * geo.sw + b % geo.sw, (a // geo.sh) * wq + b // geo.sw


@njit(inline="always", error_model="numpy")
def split(plane: np.ndarray, planes: np.ndarray, sh: int, sw: int, top: int, left: int,
          wq: int, used: np.ndarray) -> None:
    """Scatter an input plane into the phase planes whose ``used`` flag is set (their
    borders stay zero)."""
    h, w = plane.shape
    for r in range(h):
        a, rr = (top + r) % sh, (top + r) // sh
        for b in range(sw):
            if not used[a * sw + b]:
                continue
            j0 = -(-(left - b) // sw) if left > b else 0  # first J with sw·J + b ≥ left
            c0 = sw * j0 + b - left
            if c0 >= w:
                continue
            count = (w - 1 - c0) // sw + 1
            dst = planes[a * sw + b, rr * wq + j0:rr * wq + j0 + count]
            src = plane[r, c0:]
            for q in range(count):
                dst[q] = src[sw * q]


