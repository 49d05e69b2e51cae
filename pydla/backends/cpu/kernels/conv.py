"""CPU kernels of the convolutions: Conv, ConvInteger and ConvTranspose.

Conv is im2col + one batched GEMM over every group (np.matmul hands each (N, group) slice to
BLAS); ConvTranspose is the same GEMM followed by col2im, a scatter-add per kernel tap.
Canonical attributes (set by the importer): ``strides``, ``dilations``, ``group`` and
explicit ``pads`` = [begin…, end…]; the kernel shape is the weight's.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.lib.stride_tricks import as_strided

from pydla.backends.base import LayerSpec, RunFn
from pydla.backends.cpu.registry import kernel
from pydla.errors import KernelError


def pad_spatial(x: np.ndarray, begin: Sequence[int], end: Sequence[int],
                value: float | int = 0) -> np.ndarray:
    """``x`` (N, C, *spatial) padded with ``value``; ``x`` itself when nothing is padded."""
    if not any(begin) and not any(end):
        return x
    shape = x.shape[:2] + tuple(d + b + e for d, b, e in zip(x.shape[2:], begin, end))
    xp = np.full(shape, value, x.dtype)
    xp[(slice(None), slice(None)) + tuple(slice(b, b + d) for b, d in zip(begin, x.shape[2:]))] = x
    return xp


def windows(xp: np.ndarray, kernel_shape: Sequence[int], strides: Sequence[int],
            dilations: Sequence[int], out_sizes: Sequence[int],
            taps_first: bool = True) -> np.ndarray:
    """A read-only strided view of every window of ``xp`` (N, C, *spatial).

    Shape (N, C, *kernel, *out) when ``taps_first`` (im2col order), else (N, C, *out, *kernel).
    """
    nd = len(kernel_shape)
    s = xp.strides[2:]
    tap = tuple(s[i] * dilations[i] for i in range(nd))
    step = tuple(s[i] * strides[i] for i in range(nd))
    if taps_first:
        shape = xp.shape[:2] + tuple(kernel_shape) + tuple(out_sizes)
        st = xp.strides[:2] + tap + step
    else:
        shape = xp.shape[:2] + tuple(out_sizes) + tuple(kernel_shape)
        st = xp.strides[:2] + step + tap
    return as_strided(xp, shape, st, writeable=False)


def _geometry(spec: LayerSpec) -> tuple[list[int], list[int], list[int], list[int], int]:
    nd = len(spec.outputs[0].shape) - 2
    a = spec.attrs
    strides = list(a.get("strides") or [1] * nd)
    dilations = list(a.get("dilations") or [1] * nd)
    pads = list(a.get("pads") or [0] * (2 * nd))
    return strides, dilations, pads[:nd], pads[nd:], int(a.get("group", 1))


def _conv_into(spec: LayerSpec, x: np.ndarray, w: np.ndarray, y: np.ndarray) -> None:
    """y (N, M, *out) = conv(x, w) without bias; x and w already in the compute type."""
    strides, dilations, begin, end, group = _geometry(spec)
    n, c = x.shape[:2]
    m, cg = w.shape[:2]
    if c != cg * group or m % group:
        raise KernelError(spec.name, spec.op, f"{c} input channels, weight {w.shape} and "
                          f"group {group} do not agree")
    out = y.shape[2:]
    k = int(np.prod(w.shape[2:], dtype=np.int64))
    p = int(np.prod(out, dtype=np.int64))
    view = windows(pad_spatial(x, begin, end), w.shape[2:], strides, dilations, out)
    # The one im2col copy (a view when the geometry is already a GEMM, e.g. 1x1 stride 1).
    cols = view.reshape(n, group, cg * k, p)
    wg = w.reshape(group, m // group, cg * k)
    np.matmul(wg, cols, out=y.reshape(n, group, m // group, p))


def _bias_shape(spec: LayerSpec) -> tuple[int, ...]:
    out = spec.outputs[0].shape
    return (out[1],) + (1,) * (len(out) - 2)


@kernel("Conv")
def bind_conv(spec: LayerSpec) -> RunFn:
    bias_shape = _bias_shape(spec)

    def run(inputs: Sequence[np.ndarray | None], outputs: Sequence[np.ndarray]) -> None:
        x, w = inputs[0], inputs[1]
        b = inputs[2] if len(inputs) > 2 else None
        assert x is not None and w is not None
        y = outputs[0]
        _conv_into(spec, x.astype(y.dtype, copy=False), w.astype(y.dtype, copy=False), y)
        if b is not None:
            y += b.reshape(bias_shape)

    return run


@kernel("ConvInteger")
def bind_conv_integer(spec: LayerSpec) -> RunFn:
    m = spec.outputs[0].shape[1]
    nd = len(spec.outputs[0].shape) - 2

    def run(inputs: Sequence[np.ndarray | None], outputs: Sequence[np.ndarray]) -> None:
        x, w = inputs[0], inputs[1]
        assert x is not None and w is not None
        x_zp = inputs[2] if len(inputs) > 2 else None
        w_zp = inputs[3] if len(inputs) > 3 else None
        # float64 GEMM is exact here: |products| < 2^16 summed far below 2^53.
        xf = x.astype(np.float64)
        wf = w.astype(np.float64)
        if x_zp is not None:
            xf -= float(x_zp.reshape(-1)[0])
        if w_zp is not None:
            wf -= w_zp.astype(np.float64).reshape((-1,) + (1,) * (nd + 1)) if w_zp.size == m \
                else float(w_zp.reshape(-1)[0])
        y = np.empty(outputs[0].shape, np.float64)
        _conv_into(spec, xf, wf, y)
        np.copyto(outputs[0], np.rint(y), casting="unsafe")

    return run


@kernel("ConvTranspose")
def bind_conv_transpose(spec: LayerSpec) -> RunFn:
    strides, dilations, begin, _, group = _geometry(spec)
    bias_shape = _bias_shape(spec)

    def run(inputs: Sequence[np.ndarray | None], outputs: Sequence[np.ndarray]) -> None:
        x, w = inputs[0], inputs[1]
        b = inputs[2] if len(inputs) > 2 else None
        assert x is not None and w is not None
        y = outputs[0]
        x = x.astype(y.dtype, copy=False)
        w = w.astype(y.dtype, copy=False)
        n, c = x.shape[:2]
        mg = w.shape[1]
        kshape = w.shape[2:]
        k = int(np.prod(kshape, dtype=np.int64))
        if c != w.shape[0] or c % group:
            raise KernelError(spec.name, spec.op, f"{c} input channels, weight {w.shape} and "
                              f"group {group} do not agree")
        cg = c // group
        ins = x.shape[2:]
        # cols[n, g, (m, taps), pixel] = W_g^T @ X_g: each input pixel's contribution.
        wt = w.reshape(group, cg, mg * k).transpose(0, 2, 1)
        cols = np.matmul(wt, x.reshape(n, group, cg, -1))
        cols = cols.reshape((n, group * mg) + tuple(kshape) + tuple(ins))
        out = y.shape[2:]
        natural = [(i - 1) * s + (kk - 1) * d + 1
                   for i, s, kk, d in zip(ins, strides, kshape, dilations)]
        full_shape = [max(nat, bg + o) for nat, bg, o in zip(natural, begin, out)]
        full = np.zeros((n, group * mg) + tuple(full_shape), y.dtype)
        # col2im: one strided scatter-add per kernel tap.
        for tap in np.ndindex(*kshape):
            dst = tuple(slice(t * d, t * d + (i - 1) * s + 1, s)
                        for t, d, i, s in zip(tap, dilations, ins, strides))
            full[(slice(None), slice(None)) + dst] += cols[(slice(None), slice(None)) + tap]
        crop = tuple(slice(bg, bg + o) for bg, o in zip(begin, out))
        np.copyto(y, full[(slice(None), slice(None)) + crop])
        if b is not None:
            y += b.reshape(bias_shape)

    return run
