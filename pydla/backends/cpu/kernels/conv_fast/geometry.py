"""A Conv layer's 2-D geometry, read from its spec and checked: what every fast tactic's
``applies`` starts from."""

from __future__ import annotations

from dataclasses import dataclass

from pydla.backends.base import LayerSpec
from pydla.dtypes import DType

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

    @property
    def pixels(self) -> int:
        return self.oh * self.ow


def own_inputs(spec: LayerSpec) -> int:
    """How many of the layer's inputs are the convolution's (the rest feed its epilogue)."""
    epi = spec.attrs.get("epilogue")
    return len(spec.inputs) - (int(epi["inputs"]) if epi else 0)


def conv2d(spec: LayerSpec) -> Conv2d | None:
    """The layer's geometry, or None when it is not a consistent float 2-D convolution."""
    if spec.op != "Conv" or not spec.outputs:
        return None
    n_own = own_inputs(spec)
    if n_own not in (2, 3):
        return None
    x, w, y = spec.inputs[0], spec.inputs[1], spec.outputs[0]
    b = spec.inputs[2] if n_own == 3 else None
    if x is None or w is None or len(x.shape) != 4 or len(w.shape) != 4 or len(y.shape) != 4:
        return None
    present = [s for s in spec.inputs if s is not None] + list(spec.outputs)
    if any(s.dtype not in FLOAT_TYPES for s in present):
        return None
    a = spec.attrs
    sh, sw = (int(v) for v in a.get("strides") or (1, 1))
    dh, dw = (int(v) for v in a.get("dilations") or (1, 1))
    top, left, bottom, right = (int(v) for v in a.get("pads") or (0, 0, 0, 0))
    group = int(a.get("group", 1))
    n, c, h, wd = x.shape
    m, cg, kh, kw = w.shape
    if min(sh, sw, dh, dw, group) < 1 or min(top, left, bottom, right) < 0:
        return None
    oh = (h + top + bottom - (kh - 1) * dh - 1) // sh + 1
    ow = (wd + left + right - (kw - 1) * dw - 1) // sw + 1
    if (y.shape != (n, m, oh, ow) or c != cg * group or m % group or oh < 1 or ow < 1
            or (b is not None and b.shape not in ((m,), (1, m)))):
        return None
    return Conv2d(n, c, h, wd, m, kh, kw, oh, ow, sh, sw, dh, dw, top, left, group,
                  b is not None)
