"""What the fast convolution tactics share: the layer's 2-D geometry, the checks every
``applies`` makes, and the binder frame (threads, epilogue, fallback to the generic path)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from pydla.backends.base import LayerSpec, RunFn
from pydla.backends.cpu import threads
from pydla.backends.cpu.fused import with_epilogue
from pydla.backends.cpu.kernels.conv_fast.epilogue import Epilogue, EpilogueArgs, compile_epilogue
from pydla.dtypes import DType
from pydla.errors import KernelError

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


Make = Callable[[LayerSpec, Conv2d, Epilogue, int], RunFn]


def bind_conv(spec: LayerSpec, make: Make) -> RunFn:
    """Bind a fast tactic: ``make(spec, geometry, epilogue, threads)`` returns the RunFn.

    An epilogue whose extra inputs broadcast in a way the kernels do not read runs on the
    generic path after the tactic's own kernel (its steps in float32, as the kernel is).
    """
    geo = conv2d(spec)
    if geo is None:
        raise KernelError(spec.name, spec.op, "not a 2-D float convolution")
    nthreads = threads.configure()
    epi = compile_epilogue(spec)
    if epi is None:
        program = spec.attrs["epilogue"]
        wide = {**program, "program": [{**s, "dtype": "float32"} for s in program["program"]]}
        spec32 = LayerSpec(spec.name, spec.op, {**spec.attrs, "epilogue": wide}, spec.inputs,
                           spec.outputs, spec.tactic)
        return with_epilogue(spec32, lambda plain: bind_conv(plain, make))
    return make(spec, geo, epi, nthreads)


def bias_of(inputs: Sequence[np.ndarray | None], geo: Conv2d, zeros: np.ndarray) -> np.ndarray:
    b = inputs[2] if geo.has_bias else None
    return zeros if b is None else b.reshape(-1)


Thunk = Callable[[], object]
Prepare = Callable[[Sequence[np.ndarray | None], Sequence[np.ndarray]], Thunk]


def _plain(a: np.ndarray | None) -> bool:
    return a is None or (a.dtype == np.float32 and a.flags.c_contiguous)


def runner(prepare: Prepare) -> RunFn:
    """A RunFn from ``prepare(inputs, outputs) -> thunk``, which the executor calls once per
    layer at load (``run.prebind``, pydla.backends.cpu.steps): views, epilogue tables and
    numba arguments are then fixed, and a run is one call.

    ``prepare`` sees only C-contiguous float32 inputs: anything else is converted on every
    run, as a converted copy fixed at load would miss later writes to the original.
    """
    def prebind(inputs: Sequence[np.ndarray | None], outputs: Sequence[np.ndarray]) -> Thunk:
        if all(_plain(a) for a in inputs):
            return prepare(inputs, outputs)

        def convert_and_run() -> None:
            prepare([None if a is None else np.ascontiguousarray(a, np.float32)
                     for a in inputs], outputs)()

        return convert_and_run

    def run(inputs: Sequence[np.ndarray | None], outputs: Sequence[np.ndarray]) -> None:
        prebind(inputs, outputs)()

    run.prebind = prebind  # type: ignore[attr-defined]
    return run


def split(total: int, parts: int) -> int:
    """Block size that splits ``total`` into ``parts`` nearly equal blocks."""
    return max(1, -(-total // max(1, parts)))


def out_rows(out: np.ndarray, rows: int, cols: int) -> np.ndarray:
    """The output as a (rows × cols) view; kernels write through it, so never a copy."""
    if out.dtype != np.float32 or not out.flags.c_contiguous:
        raise ValueError("fast convolution kernels write C-contiguous float32 outputs")
    return out.reshape(rows, cols)


def with_registers(call: Thunk, args: EpilogueArgs, inputs: Sequence[np.ndarray | None]) -> Thunk:
    """``call``, preceded on every run by copying the epilogue's per-channel registers that
    can change (activations; weights are copied once, here)."""
    args.gather(inputs)
    if not args.changing(inputs):
        return call

    def thunk() -> None:
        args.gather(inputs, changing_only=True)
        call()

    return thunk


class Derived:
    """Data a kernel derives from its weights (packed panels, transformed filters).

    A read-only weight array is a loadable's: it never changes, so the data is derived once
    per array at prebind. A writable one (a weight fed as an input) may change between
    runs, so it is derived again on every run.
    """

    def __init__(self, derive: Callable[[np.ndarray], None]) -> None:
        self.derive = derive
        self.source: np.ndarray | None = None

    def before(self, w: np.ndarray, call: Thunk) -> Thunk:
        """``call``, with the derived data up to date for ``w`` whenever it runs."""
        if not w.flags.writeable:
            if self.source is not w:
                self.derive(w)
                self.source = w
            return call

        def thunk() -> None:
            self.derive(w)
            self.source = None
            call()

        return thunk
