"""The "generic" path: numpy, int64 accumulation — for CPUs without AVX2, and the shape of
the semantics the vector paths must match bit for bit."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from pydla.backends.cpu.kernels.int8.api import Requant


def pack(flat: np.ndarray, group: int) -> np.ndarray:
    """(N, K) int8 → (group, N/group, K): nothing to interleave without vector units."""
    n, k = flat.shape
    return flat.reshape(group, n // group, k).copy()


def as_unsigned(a: np.ndarray, zero_point: int) -> tuple[np.ndarray, int]:
    """int8 activations shifted to uint8 (x + 128), with their zero point."""
    if a.dtype == np.int8:
        return (a.view(np.uint8) ^ np.uint8(0x80)), zero_point + 128
    return a, zero_point


def finish(acc: np.ndarray, rq: Requant, out: np.ndarray, residual: np.ndarray | None,
           channel_axis: int) -> None:
    """acc (int64, bias and zero point applied, out's shape) → out, as documented."""
    shape = [1] * acc.ndim
    shape[channel_axis] = -1
    if out.dtype == np.int32:
        np.copyto(out, acc.astype(np.int32))
        return
    real = acc.astype(np.int32).astype(np.float32) * rq.scale.reshape(shape)
    if residual is not None:
        r = (residual.astype(np.float32) - np.float32(rq.residual_zero_point)) \
            * np.float32(rq.residual_scale)
        real = real + r
    if out.dtype == np.float32 and rq.dequantize_scale is None:
        np.copyto(out, np.clip(real, np.float32(rq.lo), np.float32(rq.hi)))
        return
    q = np.clip(np.rint(real) + np.float32(rq.y_zero_point), np.float32(rq.lo),
                np.float32(rq.hi))
    if out.dtype == np.float32:  # dequantized: as numpy's float32(q) - float32(zp), times dq
        q = (q - np.float32(rq.y_zero_point)) * np.float32(rq.dequantize_scale)
    np.copyto(out, q, casting="unsafe")


def gemm(a: np.ndarray, w: np.ndarray, rq: Requant, out: np.ndarray,
         residual: np.ndarray | None) -> None:
    a, zp = as_unsigned(a, rq.a_zero_point)
    acc = (a.astype(np.int64) - zp) @ w.astype(np.int64).T + rq.bias.astype(np.int64)
    finish(acc, rq, out, residual, 1)


def conv2d(x: np.ndarray, w: np.ndarray, group: int, kernel: tuple[int, int], rq: Requant,
           geometry: tuple[tuple[int, ...], ...], out: np.ndarray,
           residual: np.ndarray | None) -> None:
    (sh, sw), (pt, pl, pb, pr), (dh, dw) = geometry
    kh, kw = kernel
    x, zp = as_unsigned(x, rq.a_zero_point)
    xs = np.pad(x.astype(np.int64) - zp, ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    batch, channels = x.shape[:2]
    oh, ow = out.shape[2:]
    cols = np.empty((batch, channels, kh, kw, oh, ow), np.int64)
    for i in range(kh):
        for j in range(kw):
            cols[:, :, i, j] = xs[:, :, i * dh:i * dh + sh * (oh - 1) + 1:sh,
                                  j * dw:j * dw + sw * (ow - 1) + 1:sw]
    cols = cols.reshape(batch, group, (channels // group) * kh * kw, oh * ow)
    wg = w.astype(np.int64).reshape(group, -1, cols.shape[2])
    acc = np.einsum("gnk,bgkp->bgnp", wg, cols).reshape(out.shape)
    acc += rq.bias.astype(np.int64).reshape(1, -1, 1, 1)
    finish(acc, rq, out, residual, 1)
