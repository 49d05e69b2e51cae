"""CPU kernels of data movement and shape ops.

These ops move or replicate elements, so each binder works out its index tuples and views
once from the layer's fixed shapes, and ``run`` only copies into the preallocated output
(Col2Im, the one op here that adds, accumulates one strided window per kernel tap).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from pydla.backends.base import LayerSpec, RunFn
from pydla.backends.cpu.registry import kernel

Inputs = Sequence[np.ndarray | None]
Outputs = Sequence[np.ndarray]


@kernel("Identity")
def bind_identity(spec: LayerSpec) -> RunFn:
    def run(inputs: Inputs, outputs: Outputs) -> None:
        np.copyto(outputs[0], inputs[0])

    return run


@kernel("Reshape")
@kernel("Flatten")
@kernel("Squeeze")
@kernel("Unsqueeze")
def bind_reshape(spec: LayerSpec) -> RunFn:
    # The importer resolved the output shape; the planned output carries it.
    shape = spec.outputs[0].shape

    def run(inputs: Inputs, outputs: Outputs) -> None:
        np.copyto(outputs[0], inputs[0].reshape(shape))

    return run


@kernel("Transpose")
def bind_transpose(spec: LayerSpec) -> RunFn:
    perm = tuple(spec.attrs["perm"])

    def run(inputs: Inputs, outputs: Outputs) -> None:
        np.copyto(outputs[0], inputs[0].transpose(perm))

    return run


def _axis_slices(axis: int, sizes: Sequence[int]) -> list[tuple[slice, ...]]:
    """Index tuples selecting consecutive chunks of ``sizes`` along ``axis``."""
    lead = (slice(None),) * axis
    bounds = np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)])
    return [lead + (slice(int(a), int(b)),) for a, b in zip(bounds[:-1], bounds[1:])]


@kernel("Concat")
def bind_concat(spec: LayerSpec) -> RunFn:
    axis = spec.attrs["axis"]
    parts = _axis_slices(axis, [s.shape[axis] for s in spec.inputs if s is not None])

    def run(inputs: Inputs, outputs: Outputs) -> None:
        out = outputs[0]
        for part, x in zip(parts, inputs):
            out[part] = x

    return run


@kernel("Split")
def bind_split(spec: LayerSpec) -> RunFn:
    parts = _axis_slices(spec.attrs["axis"], spec.attrs["split"])

    def run(inputs: Inputs, outputs: Outputs) -> None:
        x = inputs[0]
        for part, out in zip(parts, outputs):
            np.copyto(out, x[part])

    return run


@kernel("Slice")
def bind_slice(spec: LayerSpec) -> RunFn:
    # Ends were clamped by the importer; with a negative step, -1 means "past index 0",
    # which a Python slice can only say with None.
    index = tuple(slice(s, e if e >= 0 else None, st)
                  for s, e, st in zip(spec.attrs["starts"], spec.attrs["ends"],
                                      spec.attrs["steps"]))

    def run(inputs: Inputs, outputs: Outputs) -> None:
        np.copyto(outputs[0], inputs[0][index])

    return run


@kernel("Expand")
def bind_expand(spec: LayerSpec) -> RunFn:
    def run(inputs: Inputs, outputs: Outputs) -> None:
        np.copyto(outputs[0], inputs[0])  # numpy broadcasting is ONNX's bidirectional rule

    return run


@kernel("Tile")
def bind_tile(spec: LayerSpec) -> RunFn:
    # View the output as (r0, d0, r1, d1, …) and broadcast the input over the r axes.
    dims = spec.inputs[0].shape
    repeats = spec.attrs["repeats"]
    out_view = tuple(v for r, d in zip(repeats, dims) for v in (r, d))
    in_view = tuple(v for d in dims for v in (1, d))

    def run(inputs: Inputs, outputs: Outputs) -> None:
        np.copyto(outputs[0].reshape(out_view), inputs[0].reshape(in_view))

    return run


@kernel("Pad")
def bind_pad(spec: LayerSpec) -> RunFn:
    mode = spec.attrs["mode"]
    pads = spec.attrs["pads"]
    dims = spec.inputs[0].shape
    rank = len(dims)
    begins, ends = pads[:rank], pads[rank:]
    # Negative pads crop the input before the positive ones pad it.
    crop = tuple(slice(max(-b, 0), d - max(-e, 0)) for b, e, d in zip(begins, ends, dims))
    widths = [(max(b, 0), max(e, 0)) for b, e in zip(begins, ends)]
    interior = tuple(slice(w[0], w[0] + (c.stop - c.start)) for w, c in zip(widths, crop))

    if mode == "constant":
        value = spec.attrs.get("value", 0)

        def run(inputs: Inputs, outputs: Outputs) -> None:
            out = outputs[0]
            fill = inputs[1] if len(inputs) > 1 and inputs[1] is not None else None
            out.fill(fill.reshape(-1)[0] if fill is not None and fill.size else value)
            out[interior] = inputs[0][crop]

        return run

    np_mode = {"reflect": "reflect", "edge": "edge", "wrap": "wrap"}[mode]

    def run_other(inputs: Inputs, outputs: Outputs) -> None:
        np.copyto(outputs[0], np.pad(inputs[0][crop], widths, mode=np_mode))

    return run_other


@kernel("ConstantOfShape")
def bind_constant_of_shape(spec: LayerSpec) -> RunFn:
    value = spec.attrs["value"]

    def run(inputs: Inputs, outputs: Outputs) -> None:
        outputs[0].fill(value)

    return run


@kernel("Trilu")
def bind_trilu(spec: LayerSpec) -> RunFn:
    n, m = spec.inputs[0].shape[-2:]
    k = spec.attrs["k"]
    rows, cols = np.arange(n)[:, None], np.arange(m)[None, :]
    keep = (cols - rows >= k) if spec.attrs["upper"] else (cols - rows <= k)

    def run(inputs: Inputs, outputs: Outputs) -> None:
        out = outputs[0]
        out.fill(0)
        np.copyto(out, inputs[0], where=keep)

    return run


@kernel("DepthToSpace")
def bind_depth_to_space(spec: LayerSpec) -> RunFn:
    b, c, h, w = spec.inputs[0].shape
    bs = spec.attrs["blocksize"]
    if spec.attrs["mode"] == "DCR":
        split, perm = (b, bs, bs, c // (bs * bs), h, w), (0, 3, 4, 1, 5, 2)
    else:
        split, perm = (b, c // (bs * bs), bs, bs, h, w), (0, 1, 4, 2, 5, 3)
    out_view = tuple(split[p] for p in perm)

    def run(inputs: Inputs, outputs: Outputs) -> None:
        np.copyto(outputs[0].reshape(out_view), inputs[0].reshape(split).transpose(perm))

    return run


@kernel("SpaceToDepth")
def bind_space_to_depth(spec: LayerSpec) -> RunFn:
    b, c, h, w = spec.inputs[0].shape
    bs = spec.attrs["blocksize"]
    split = (b, c, h // bs, bs, w // bs, bs)
    perm = (0, 3, 5, 1, 2, 4) if spec.attrs["mode"] == "DCR" else (0, 1, 3, 5, 2, 4)
    out_view = tuple(split[p] for p in perm)

    def run(inputs: Inputs, outputs: Outputs) -> None:
        np.copyto(outputs[0].reshape(out_view), inputs[0].reshape(split).transpose(perm))

    return run


@kernel("Col2Im")
def bind_col2im(spec: LayerSpec) -> RunFn:
    image = spec.attrs["image_shape"]
    block = spec.attrs["block_shape"]
    dil, strides, pads = spec.attrs["dilations"], spec.attrs["strides"], spec.attrs["pads"]
    nd = len(image)
    n, c = spec.outputs[0].shape[:2]
    padded = [i + pads[d] + pads[d + nd] for d, i in enumerate(image)]
    blocks = [(p - (dl * (k - 1) + 1)) // s + 1
              for p, k, dl, s in zip(padded, block, dil, strides)]
    cols_view = (n, c, *block, *blocks)
    crop = (Ellipsis,) + tuple(slice(pads[d], pads[d] + image[d]) for d in range(nd))
    taps = [(tap, (Ellipsis,) + tuple(slice(t * dl, t * dl + s * (nb - 1) + 1, s)
                                     for t, dl, s, nb in zip(tap, dil, strides, blocks)))
            for tap in np.ndindex(*block)]

    def run(inputs: Inputs, outputs: Outputs) -> None:
        cols = inputs[0].reshape(cols_view)
        acc = np.zeros((n, c, *padded), outputs[0].dtype)
        for tap, window in taps:  # one strided add per kernel tap
            acc[window] += cols[(slice(None), slice(None)) + tap]
        np.copyto(outputs[0], acc[crop])

    return run
