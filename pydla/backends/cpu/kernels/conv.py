"""CPU kernels of the convolutions: Conv, ConvTranspose, DeformConv and
CausalConvWithState.

Conv is im2col + one batched GEMM over every group (np.matmul hands each (N, group) slice to
BLAS); ConvTranspose is the same GEMM followed by col2im, a scatter-add per kernel tap;
DeformConv builds its columns by bilinear sampling. Canonical attributes (set by the
importer): ``strides``, ``dilations``, ``group`` and explicit ``pads`` = [begin…, end…]; the
kernel shape is the weight's.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.lib.stride_tricks import as_strided

from pydla.backends.base import LayerSpec, RunFn, TensorSpec
from pydla.backends.cpu.registry import kernel
from pydla.errors import KernelError

# Bound on one im2col buffer; a batch is split into chunks of images to stay under it.
IM2COL_BYTES = 1 << 26


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


class _Geometry:
    """One convolution layer's shapes and window attributes, checked against each other."""

    def __init__(self, spec: LayerSpec, transposed: bool = False) -> None:
        x, w = spec.inputs[0], spec.inputs[1]
        y = spec.outputs[0]
        if x is None or w is None or len(x.shape) != len(y.shape) or len(w.shape) != len(y.shape):
            raise KernelError(spec.name, spec.op, "needs X and W of the output's rank")
        nd = len(y.shape) - 2
        a = spec.attrs
        self.strides = [int(v) for v in a.get("strides") or [1] * nd]
        self.dilations = [int(v) for v in a.get("dilations") or [1] * nd]
        pads = [int(v) for v in a.get("pads") or [0] * (2 * nd)]
        self.begin, self.end = pads[:nd], pads[nd:]
        self.group = int(a.get("group", 1))
        self.kernel = list(w.shape[2:])
        self.batch, self.channels = x.shape[:2]
        self.in_sizes, self.out_sizes = list(x.shape[2:]), list(y.shape[2:])
        if transposed:
            ok = (w.shape[0] == self.channels and y.shape[1] == w.shape[1] * self.group
                  and self.channels % self.group == 0)
        else:
            natural = [(i + b + e - (k - 1) * d - 1) // s + 1 for i, b, e, k, d, s in zip(
                self.in_sizes, self.begin, self.end, self.kernel, self.dilations, self.strides)]
            ok = (self.channels == w.shape[1] * self.group and w.shape[0] == y.shape[1]
                  and y.shape[1] % self.group == 0 and natural == self.out_sizes)
        ok = ok and y.shape[0] == self.batch and len(pads) == 2 * nd and \
            len(self.strides) == nd and len(self.dilations) == nd and \
            min(self.strides + self.dilations + [self.group]) >= 1 and min(pads + [0]) >= 0
        if not ok:
            raise KernelError(spec.name, spec.op, f"X {x.shape}, W {w.shape}, output {y.shape} "
                              f"and attributes {dict(a)} do not agree")
        self.bias_shape = (y.shape[1],) + (1,) * nd


def _conv_into(g: _Geometry, x: np.ndarray, w: np.ndarray, y: np.ndarray) -> None:
    """y (N, M, *out) = conv(x, w) without bias; x and w already in the compute type."""
    n, c = x.shape[:2]
    m, cg = w.shape[:2]
    k = int(np.prod(g.kernel, dtype=np.int64))
    p = int(np.prod(g.out_sizes, dtype=np.int64))
    wg = w.reshape(g.group, m // g.group, cg * k)
    yg = y.reshape(n, g.group, m // g.group, p)
    # Images go in chunks so that the im2col buffer stays bounded for large batches.
    chunk = max(1, IM2COL_BYTES // max(1, c * k * p * x.itemsize))
    for n0 in range(0, n, chunk):
        xs = pad_spatial(x[n0:n0 + chunk], g.begin, g.end)
        view = windows(xs, g.kernel, g.strides, g.dilations, g.out_sizes)
        # The one im2col copy (a view when the geometry is already a GEMM, e.g. 1x1 stride 1).
        cols = view.reshape(view.shape[0], g.group, cg * k, p)
        np.matmul(wg, cols, out=yg[n0:n0 + chunk])


@kernel("Conv")
def bind_conv(spec: LayerSpec) -> RunFn:
    if "layouts" in spec.attrs:
        return _bind_blocked(spec)
    geo = _Geometry(spec)

    def run(inputs: Sequence[np.ndarray | None], outputs: Sequence[np.ndarray]) -> None:
        x, w = inputs[0], inputs[1]
        b = inputs[2] if len(inputs) > 2 else None
        assert x is not None and w is not None
        y = outputs[0]
        _conv_into(geo, x.astype(y.dtype, copy=False), w.astype(y.dtype, copy=False), y)
        if b is not None:
            y += b.reshape(geo.bias_shape)

    return run


def _bind_blocked(spec: LayerSpec) -> RunFn:
    """A layer in the channel-blocked layouts (pydla.plan.layouts): converted to planar
    around the plain kernel — the reference the blocked tactics are tested against."""
    from pydla.backends.cpu.kernels.conv_fast.geometry import conv2d
    from pydla.backends.cpu.kernels.reorder import to_blocked, to_planar

    g = conv2d(spec, blocked=True)
    if g is None:
        raise KernelError(spec.name, spec.op, f"layouts {spec.attrs['layouts']!r} do not fit "
                          f"X {spec.inputs[0] and spec.inputs[0].shape}, output "
                          f"{spec.outputs[0].shape}")
    x, y = spec.inputs[0], spec.outputs[0]
    assert x is not None
    attrs = {k: v for k, v in spec.attrs.items() if k != "layouts"}
    plain = LayerSpec(spec.name, spec.op, attrs,
                      (TensorSpec((g.n, g.c, g.h, g.w), x.dtype), *spec.inputs[1:]),
                      (TensorSpec((g.n, g.m, g.oh, g.ow), y.dtype),), spec.tactic)
    inner = bind_conv(plain)

    def run(inputs: Sequence[np.ndarray | None], outputs: Sequence[np.ndarray]) -> None:
        xs = inputs[0]
        assert xs is not None
        planar = np.empty((g.n, g.m, g.oh, g.ow), outputs[0].dtype)
        inner([to_planar(xs, g.c) if g.x_blocked else xs, *inputs[1:]], [planar])
        np.copyto(outputs[0], to_blocked(planar) if g.y_blocked else planar)

    return run


@kernel("ConvTranspose")
def bind_conv_transpose(spec: LayerSpec) -> RunFn:
    g = _Geometry(spec, transposed=True)
    n, c, group = g.batch, g.channels, g.group
    cg, mg = c // group, spec.outputs[0].shape[1] // group
    k = int(np.prod(g.kernel, dtype=np.int64))
    natural = [(i - 1) * s + (kk - 1) * d + 1
               for i, s, kk, d in zip(g.in_sizes, g.strides, g.kernel, g.dilations)]
    # The uncropped result must hold every tap and the whole output window.
    full_shape = (n, group * mg) + tuple(max(nat, b + o) for nat, b, o in
                                         zip(natural, g.begin, g.out_sizes))
    every = (slice(None), slice(None))
    # col2im: the output slice each kernel tap scatters to.
    taps = [(tap, every + tuple(slice(t * d, t * d + (i - 1) * s + 1, s)
                                for t, d, i, s in zip(tap, g.dilations, g.in_sizes, g.strides)))
            for tap in np.ndindex(*g.kernel)]
    crop = every + tuple(slice(b, b + o) for b, o in zip(g.begin, g.out_sizes))

    def run(inputs: Sequence[np.ndarray | None], outputs: Sequence[np.ndarray]) -> None:
        x, w = inputs[0], inputs[1]
        b = inputs[2] if len(inputs) > 2 else None
        assert x is not None and w is not None
        y = outputs[0]
        x = x.astype(y.dtype, copy=False)
        w = w.astype(y.dtype, copy=False)
        # cols[n, g, (m, taps), pixel] = W_g^T @ X_g: each input pixel's contribution.
        wt = w.reshape(group, cg, mg * k).transpose(0, 2, 1)
        cols = np.matmul(wt, x.reshape(n, group, cg, -1))
        cols = cols.reshape((n, group * mg) + tuple(g.kernel) + tuple(g.in_sizes))
        full = np.zeros(full_shape, y.dtype)
        for tap, dst in taps:
            full[dst] += cols[every + tap]
        np.copyto(y, full[crop])
        if b is not None:
            y += b.reshape(g.bias_shape)

    return run


@kernel("CausalConvWithState")
def bind_causal_conv_with_state(spec: LayerSpec) -> RunFn:
    x_spec = spec.inputs[0]
    assert x_spec is not None
    batch, channels, length = x_spec.shape
    silu = spec.attrs.get("activation", "none") in ("silu", "swish")

    def run(inputs: Sequence[np.ndarray | None], outputs: Sequence[np.ndarray]) -> None:
        x, w = inputs[0], inputs[1]
        b = inputs[2] if len(inputs) > 2 else None
        past = inputs[3] if len(inputs) > 3 else None
        assert x is not None and w is not None
        y = outputs[0]
        k = w.shape[2]
        # The input with the carried (or zero) history in front: (B, C, k - 1 + L).
        padded = np.zeros((batch, channels, k - 1 + length), y.dtype)
        if past is not None:
            padded[:, :, :k - 1] = past
        padded[:, :, k - 1:] = x
        taps = w.reshape(channels, k).astype(y.dtype, copy=False)
        # Depthwise causal conv: one shifted slice per tap.
        np.multiply(padded[:, :, :length], taps[:, 0:1], out=y)
        for t in range(1, k):
            y += padded[:, :, t:t + length] * taps[:, t:t + 1]
        if b is not None:
            y += b.reshape(channels, 1)
        if silu:
            y *= 1 / (1 + np.exp(-y))
        if len(outputs) > 1:
            np.copyto(outputs[1], padded[:, :, length:])

    return run


@kernel("DeformConv")
def bind_deform_conv(spec: LayerSpec) -> RunFn:
    x_spec, w_spec = spec.inputs[0], spec.inputs[1]
    assert x_spec is not None and w_spec is not None
    n, c, h, w_in = x_spec.shape
    m, cg, kh, kw = w_spec.shape
    oh, ow = spec.outputs[0].shape[2:]
    a = spec.attrs
    sh, sw = a["strides"]
    dh, dw = a["dilations"]
    top, left = a["pads"][:2]
    group, og = int(a["group"]), int(a["offset_group"])
    k, p = kh * kw, oh * ow
    # Undeformed sampling grid per (tap, output pixel); the offsets move it per image.
    base_y = (np.arange(kh) * dh)[:, None, None, None] + (np.arange(oh) * sh - top)[:, None]
    base_x = (np.arange(kw) * dw)[None, :, None, None] + (np.arange(ow) * sw - left)
    base_y = np.broadcast_to(base_y, (kh, kw, oh, ow))
    base_x = np.broadcast_to(base_x, (kh, kw, oh, ow))

    def run(inputs: Sequence[np.ndarray | None], outputs: Sequence[np.ndarray]) -> None:
        x, wt, off = inputs[0], inputs[1], inputs[2]
        b = inputs[3] if len(inputs) > 3 else None
        mask = inputs[4] if len(inputs) > 4 else None
        assert x is not None and wt is not None and off is not None
        y = outputs[0]
        ft = y.dtype
        off = off.astype(ft, copy=False).reshape(n, og, kh, kw, 2, oh, ow)
        sy = base_y + off[:, :, :, :, 0]
        sx = base_x + off[:, :, :, :, 1]
        y0, x0 = np.floor(sy), np.floor(sx)
        ly, lx = sy - y0, sx - x0
        y0, x0 = y0.astype(np.int64), x0.astype(np.int64)
        planes = x.astype(ft, copy=False).reshape(n, og, 1, c // og, h * w_in)
        scale = np.ones((), ft) if mask is None else \
            mask.astype(ft, copy=False).reshape(n, og, kh, kw, oh, ow)
        cols = np.zeros((n, og, c // og, k * p), ft)
        # Bilinear sampling with zeros outside the image: four weighted corner gathers.
        for dy, dx, wgt in ((0, 0, (1 - ly) * (1 - lx)), (0, 1, (1 - ly) * lx),
                            (1, 0, ly * (1 - lx)), (1, 1, ly * lx)):
            yy, xx = y0 + dy, x0 + dx
            inside = (yy >= 0) & (yy < h) & (xx >= 0) & (xx < w_in)
            flat = np.where(inside, yy * w_in + xx, 0).reshape(n, og, 1, 1, k * p)
            coef = (wgt * inside * scale).reshape(n, og, 1, k * p)
            cols += np.take_along_axis(planes, flat, axis=-1)[:, :, 0] * coef
        cols = cols.reshape(n, group, cg * k, p)
        np.matmul(wt.astype(ft, copy=False).reshape(group, m // group, cg * k), cols,
                  out=y.reshape(n, group, m // group, p))
        if b is not None:
            y += b.reshape(m, 1, 1)

    return run
