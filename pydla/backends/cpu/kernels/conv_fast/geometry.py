"""A Conv layer's 2-D geometry, read from its spec and checked: what every fast tactic's
``applies`` starts from.

A layer the builder put in the channel-blocked layout (pydla.plan.layouts) says so in its
``layouts`` attribute — [input layout, output layout], each ``nchw`` or ``nchw16c`` — and
its blocked tensors have the physical shape (n, ⌈c/16⌉, h, w, 16). Only the tactics that
read and write that layout ask for it (``conv2d(spec, blocked=True)``); for every other
tactic such a layer is not a convolution it can run.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pydla.backends.base import LayerSpec
from pydla.dtypes import DType

PLANAR, BLOCKED = "nchw", "nchw16c"
BLOCK = 16  # channels per block of the blocked layout

# The tactics compute in float32; half layers reach them widened by the backend.
FLOAT_TYPES = (DType.FLOAT32, DType.FLOAT16, DType.BFLOAT16)


@dataclass(frozen=True)
class Conv2d:
    """One 2-D convolution: X (n, c, h, w) * W (m, c/group, kh, kw) -> Y (n, m, oh, ow)."""

    n: int
    c: int
    h: int
    w: int
    m: int
    kh: int
    kw: int
    oh: int
    ow: int
    sh: int
    sw: int
    dh: int
    dw: int
    top: int
    left: int
    group: int
    has_bias: bool
    x_blocked: bool = False  # input in (n, ⌈c/16⌉, h, w, 16)
    y_blocked: bool = False  # output in (n, ⌈m/16⌉, oh, ow, 16)

    @property
    def pixels(self) -> int:
        return self.oh * self.ow


def own_inputs(spec: LayerSpec) -> int:
    """How many of the layer's inputs are the convolution's (the rest feed its epilogue)."""
    epi = spec.attrs.get("epilogue")
    return len(spec.inputs) - (int(epi["inputs"]) if epi else 0)


def blocked_shape(shape: Sequence[int]) -> tuple[int, ...]:
    """The physical shape of an (n, c, …) tensor in the blocked layout."""
    return (shape[0], -(-shape[1] // BLOCK), *shape[2:], BLOCK)


def layouts(spec: LayerSpec) -> tuple[bool, bool] | None:
    """(input blocked, output blocked) from the ``layouts`` attribute; None if malformed."""
    value = spec.attrs.get("layouts")
    if value is None:
        return False, False
    if (not isinstance(value, (list, tuple)) or len(value) != 2
            or any(v not in (PLANAR, BLOCKED) for v in value)):
        return None
    return value[0] == BLOCKED, value[1] == BLOCKED


def _logical(s: tuple[int, ...], channels: int, blocked: bool) -> tuple[int, ...] | None:
    """A blocked 5-D shape back to its logical 4-D one (None if it is not ``channels``'s)."""
    if not blocked:
        return s
    if len(s) != 5 or s[4] != BLOCK or s[1] != -(-channels // BLOCK):
        return None
    return (s[0], channels, s[2], s[3])


def conv2d(spec: LayerSpec, blocked: bool = False) -> Conv2d | None:
    """The layer's geometry, or None when it is not a consistent float 2-D convolution —
    or is in a blocked layout and the caller (``blocked`` False) does not read it."""
    if spec.op != "Conv" or not spec.outputs:
        return None
    lay = layouts(spec)
    if lay is None or (any(lay) and not blocked):
        return None
    n_own = own_inputs(spec)
    if n_own not in (2, 3):
        return None
    x, w, y = spec.inputs[0], spec.inputs[1], spec.outputs[0]
    b = spec.inputs[2] if n_own == 3 else None
    if x is None or w is None or len(w.shape) != 4:
        return None
    present = [s for s in spec.inputs if s is not None] + list(spec.outputs)
    if any(s.dtype not in FLOAT_TYPES for s in present):
        return None
    if any(lay) and any(s.dtype != DType.FLOAT32 for s in present):
        return None  # the blocked kernels compute and store float32 only
    x_shape = _logical(x.shape, w.shape[1] * int(spec.attrs.get("group", 1)), lay[0])
    y_shape = _logical(y.shape, w.shape[0], lay[1])
    if x_shape is None or y_shape is None or len(x_shape) != 4 or len(y_shape) != 4:
        return None
    a = spec.attrs
    sh, sw = (int(v) for v in a.get("strides") or (1, 1))
    dh, dw = (int(v) for v in a.get("dilations") or (1, 1))
    top, left, bottom, right = (int(v) for v in a.get("pads") or (0, 0, 0, 0))
    group = int(a.get("group", 1))
    n, c, h, wd = x_shape
    m, cg, kh, kw = w.shape
    if min(sh, sw, dh, dw, group) < 1 or min(top, left, bottom, right) < 0:
        return None
    oh = (h + top + bottom - (kh - 1) * dh - 1) // sh + 1
    ow = (wd + left + right - (kw - 1) * dw - 1) // sw + 1
    if (y_shape != (n, m, oh, ow) or c != cg * group or m % group or oh < 1 or ow < 1
            or (b is not None and b.shape not in ((m,), (1, m)))):
        return None
    return Conv2d(n, c, h, wd, m, kh, kw, oh, ow, sh, sw, dh, dw, top, left, group,
                  b is not None, lay[0], lay[1])


def inside(first: int, count: int, step: int, size: int) -> tuple[int, int]:
    """[k0, k1): the k < count with 0 <= first + k·step < size — a window's taps inside an
    image of ``size``, or the outputs a tap reaches (empty: (0, 0))."""
    k0 = max(0, -(first // step))  # ceil(-first / step)
    k1 = min(count, (size - 1 - first) // step + 1) if size - 1 - first >= 0 else 0
    return (k0, k1) if k1 > k0 else (0, 0)
