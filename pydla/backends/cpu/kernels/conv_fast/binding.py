"""The frame every fast Conv tactic binds in: thread count, epilogue (native, or the
generic path when its registers broadcast in a way the kernels do not read), prebinding
(``run.prebind``: views and numba arguments fixed once per layer) and data derived from
the weights."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from pydla.backends.base import LayerSpec, RunFn
from pydla.backends.cpu import threads
from pydla.backends.cpu.fused import with_epilogue
from pydla.backends.cpu.kernels.conv_fast.epilogue import Epilogue, EpilogueArgs, compile_epilogue
from pydla.backends.cpu.kernels.conv_fast.geometry import Conv2d, conv2d
from pydla.errors import KernelError

Make = Callable[[LayerSpec, Conv2d, Epilogue, int], RunFn]


def bind_conv(spec: LayerSpec, make: Make, blocked: bool = False) -> RunFn:
    """Bind a fast tactic: ``make(spec, geometry, epilogue, threads)`` returns the RunFn.

    An epilogue whose extra inputs broadcast in a way the kernels do not read runs on the
    generic path after the tactic's own kernel (its steps in float32, as the kernel is).
    ``blocked``: the tactic reads the channel-blocked layouts; the epilogue of a layer
    with a blocked output must then read full-shape registers only (the blocked kernels
    run it on runs of whole blocks, where a per-channel operand has no row of its own).
    """
    geo = conv2d(spec, blocked)
    if geo is None:
        raise KernelError(spec.name, spec.op, "not a 2-D float convolution"
                          + (" in the layouts this tactic reads" if blocked else ""))
    threads.configure()
    flops = 2 * geo.n * geo.m * geo.pixels * (geo.c // geo.group) * geo.kh * geo.kw
    nthreads = threads.threads_for_flops(flops)
    epi = compile_epilogue(spec)
    if geo.y_blocked and (epi is None or epi.vec):
        raise KernelError(spec.name, spec.op, "a blocked output's epilogue may read only "
                          "tensors of the output's shape")
    if epi is None:
        return generic_epilogue(spec, lambda plain: bind_conv(plain, make, blocked))
    return make(spec, geo, epi, nthreads)


def blocked_epilogue_ok(spec: LayerSpec) -> bool:
    """Whether a blocked-output layer's epilogue reads full-shape registers only."""
    epi = compile_epilogue(spec)
    return epi is not None and not epi.vec


def generic_epilogue(spec: LayerSpec, bind: Callable[[LayerSpec], RunFn]) -> RunFn:
    """``bind`` on the layer without its epilogue, the epilogue run after it on the generic
    path (its steps in float32, as the fast kernels compute): for an epilogue whose extra
    inputs broadcast in a way the kernels do not read."""
    program = spec.attrs["epilogue"]
    wide = {**program, "program": [{**s, "dtype": "float32"} for s in program["program"]]}
    spec32 = LayerSpec(spec.name, spec.op, {**spec.attrs, "epilogue": wide}, spec.inputs,
                       spec.outputs, spec.tactic)
    return with_epilogue(spec32, bind)


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


def with_bias_copy(call: Thunk, bias: np.ndarray, dst: np.ndarray) -> Thunk:
    """``call`` reading the bias from ``dst`` (a packed table): copied now, and again
    before every run when it can change (a writable array is an input, not a weight)."""
    dst[:bias.size] = bias
    if not bias.flags.writeable:
        return call

    def thunk() -> None:
        dst[:bias.size] = bias
        call()

    return thunk


class Derived:
    """Data a kernel derives from its weights (packed panels, transformed filters).

    A read-only weight array is a loadable's: it never changes, so the data is derived when
    the layer is prebound, and again only if another array took its place in between. A
    writable one (a weight fed as an input) may change between runs, so it is derived
    again on every run.
    """

    def __init__(self, derive: Callable[[np.ndarray], None]) -> None:
        self.derive = derive
        self.source: np.ndarray | None = None

    def _refresh(self, w: np.ndarray) -> None:
        if self.source is not w or w.flags.writeable:
            self.derive(w)
            self.source = None if w.flags.writeable else w

    def before(self, w: np.ndarray, call: Thunk) -> Thunk:
        """``call``, with the derived data up to date for ``w`` whenever it runs."""
        if not w.flags.writeable:
            self._refresh(w)

        def thunk() -> None:
            self._refresh(w)  # an identity check, unless w is writable
            call()

        return thunk
