"""CPU backend: binds every layer of a program to a kernel over one activation arena."""

from __future__ import annotations

import time
from collections.abc import Sequence

import numba
import numpy as np

from pydla.backends.base import LayerHook, LayerSpec, RunFn, TensorSpec
from pydla.backends.cpu import half, threads, workspace
from pydla.backends.cpu import kernels as _kernels  # noqa: F401  (registers every kernel)
from pydla.backends.cpu.fused import with_epilogue
from pydla.backends.cpu.governor import Governor
from pydla.backends.cpu.governor import policy as governor_policy
from pydla.backends.cpu.loop import bind_loop
from pydla.backends.cpu.registry import KERNELS, REFERENCE, TACTICS, Binder, tactic_applies
from pydla.backends.cpu.steps import Thunk, prebind
from pydla.dtypes import DType, to_compute, to_storage
from pydla.errors import KernelError, LoadableError, PydlaError
from pydla.loadable.program import RESHAPES, LayerInfo, Program
from pydla.ops import INPLACE_SAFE

_HALF = (DType.FLOAT16, DType.BFLOAT16)


def _widen(spec: TensorSpec | None) -> TensorSpec | None:
    if spec is not None and spec.dtype in _HALF:
        return TensorSpec(spec.shape, DType.FLOAT32)
    return spec


def bind_layer(spec: LayerSpec) -> RunFn:
    """Bind one layer with its recorded tactic; half-precision layers compute in float32 and
    round their outputs; an epilogue runs after the layer's own kernel unless the tactic
    runs it natively."""
    if spec.op not in KERNELS:
        raise KernelError(spec.name, spec.op, "no CPU kernel for this op")
    binder = KERNELS[spec.op]
    native = False
    if spec.tactic not in (None, REFERENCE):
        entry = TACTICS.get(spec.op, {}).get(spec.tactic)  # type: ignore[arg-type]
        if entry is None:
            raise KernelError(spec.name, spec.op, f"unknown tactic {spec.tactic!r}")
        if not tactic_applies(entry, spec):
            raise KernelError(spec.name, spec.op, f"tactic {spec.tactic!r} cannot run this layer")
        binder = entry.bind
        native = "epilogue" in spec.attrs and entry.native_epilogue(
            spec.attrs["epilogue"]["program"])
    if "epilogue" in spec.attrs and not native:
        return with_epilogue(spec, lambda s: _bind_plain(s, binder))
    if spec.op == "Pointwise":  # each step rounds to its own type
        return binder(spec)
    return _bind_plain(spec, binder)


def _bind_plain(spec: LayerSpec, binder: Binder) -> RunFn:
    half_in = [s is not None and s.dtype in _HALF for s in spec.inputs]
    half_out = [s.dtype in _HALF for s in spec.outputs]
    if not any(half_in) and not any(half_out):
        return binder(spec)
    wide = LayerSpec(spec.name, spec.op, spec.attrs, tuple(_widen(s) for s in spec.inputs),
                     tuple(_widen(s) for s in spec.outputs), spec.tactic)
    inner = binder(wide)
    in_types = [s.dtype if s is not None else None for s in spec.inputs]
    out_types = [s.dtype for s in spec.outputs]
    # float32 staging for the half-precision activations, in the program's shared workspace
    stage_in = [workspace.scratch(s.shape) if h else None  # type: ignore[union-attr]
                for s, h in zip(spec.inputs, half_in)]
    stage_out = [workspace.scratch(s.shape) if h else None
                 for s, h in zip(spec.outputs, half_out)]

    def bind(inputs: Sequence[np.ndarray | None], outputs: Sequence[np.ndarray]) -> Thunk:
        xs: list[np.ndarray | None] = []
        widen: list[tuple[np.ndarray, np.ndarray, DType]] = []
        for x, t, h, st in zip(inputs, in_types, half_in, stage_in):
            if not h or x is None or t is None or st is None:
                xs.append(x)
            elif not x.flags.writeable:
                # A weight: widened once and handed on read-only, as float32 weights are,
                # so kernels may keep what they derive from it (Winograd's filters).
                w = np.empty(x.shape, np.float32)
                _to_float32(w, x, t)
                w.flags.writeable = False
                xs.append(w)
            else:
                xs.append(st.array)
                widen.append((st.array, x, t))
        ys = [st.array if st is not None else o for o, st in zip(outputs, stage_out)]
        rounds = [(o, y, t) for o, y, t, h in zip(outputs, ys, out_types, half_out) if h]
        inner_step = prebind(inner, xs, ys)

        def step() -> None:
            for buf, x, t in widen:
                _to_float32(buf, x, t)
            inner_step()
            for o, y, t in rounds:
                _to_half(o, y, t)

        return step

    bound: list[tuple[tuple[np.ndarray | None, ...], Thunk]] = []

    def run(inputs: Sequence[np.ndarray | None], outputs: Sequence[np.ndarray]) -> None:
        # Called with the same buffers run after run (an epilogue's base kernel): bind once.
        arrays = (*inputs, *outputs)
        if not bound or len(bound[0][0]) != len(arrays) or any(
                a is not b for a, b in zip(bound[0][0], arrays)):
            bound[:] = [(arrays, bind(inputs, outputs))]
        bound[0][1]()

    run.prebind = bind  # type: ignore[attr-defined]
    return run


def _to_float32(dst: np.ndarray, x: np.ndarray, t: DType) -> None:
    if t is DType.FLOAT16 and x.flags.c_contiguous:
        half.widen_into(dst, x)  # F16C vector code: numpy's astype is scalar software
    else:
        np.copyto(dst, to_compute(x, t))


def _to_half(dst: np.ndarray, y: np.ndarray, t: DType) -> None:
    if t is DType.FLOAT16 and dst.flags.c_contiguous:
        half.round_into(dst, y)
    else:
        np.copyto(dst, to_storage(y, t))


def _spec(program: Program, layer: LayerInfo) -> LayerSpec:
    ts = program.tensors
    return LayerSpec(
        name=layer.name, op=layer.op, attrs=layer.attrs,
        inputs=tuple(None if i < 0 else TensorSpec(ts[i].shape, ts[i].dtype)
                     for i in layer.inputs),
        outputs=tuple(TensorSpec(ts[i].shape, ts[i].dtype) for i in layer.outputs),
        tactic=layer.tactic)


def _noop(inputs: Sequence[np.ndarray | None], outputs: Sequence[np.ndarray]) -> None:
    """A Concat whose inputs were written straight into their slices of its output, or a
    reshape whose output is its input's bytes."""


def _in_place(layer: LayerInfo, run: RunFn, ins: list[np.ndarray | None],
              outs: list[np.ndarray]) -> RunFn:
    """Check at load time that an in-place layer's buffers really are what it assumes."""
    if layer.op == "Concat":
        out = outs[0]
        axis = int(layer.attrs["axis"])
        base = out.ctypes.data
        offset = 0
        inner = int(np.prod(out.shape[axis + 1:], dtype=np.int64)) * out.itemsize
        for x in ins:
            if x is None or x.ctypes.data != base + offset:
                raise LoadableError(0, f"layer {layer.name!r}: an in-place Concat input is not "
                                    "its slice of the output")
            offset += x.shape[axis] * inner
        return _noop
    if layer.op in RESHAPES:
        x, y = ins[0], outs[0]
        if x is None or x.ctypes.data != y.ctypes.data or x.nbytes != y.nbytes:
            raise LoadableError(0, f"layer {layer.name!r}: an in-place {layer.op}'s output is "
                                "not its input's bytes")
        return _noop
    final = layer.attrs["program"][-1]["op"] if layer.op == "Pointwise" else layer.op
    if final not in INPLACE_SAFE:
        raise LoadableError(0, f"layer {layer.name!r} ({layer.op}) cannot run in place")
    return run


class CpuProgram:
    """A program bound to CPU kernels: arena views and kernel arguments fixed once."""

    def __init__(self, program: Program) -> None:
        self.program = program
        # one thread pool: numba's, with BLAS single-threaded; kernels split their work into
        # this many parts, so every run must use it (another program bound since may differ)
        self.threads = threads.configure()
        # how many of those parts run in parallel: chosen run by run (a busy neighbour core
        # makes fewer threads faster)
        self.governor = Governor(self.threads, adaptive=governor_policy() == "adaptive")
        # 64-byte aligned arena (extra bytes let us slide the start to an aligned address).
        try:
            raw = np.empty(program.arena_bytes + 64, dtype=np.uint8)
        except MemoryError:
            raise LoadableError(0, f"cannot allocate the {program.arena_bytes}-byte activation "
                                "arena") from None
        start = (-raw.ctypes.data) % 64
        self.arena = raw[start:start + program.arena_bytes]
        self.views: list[np.ndarray] = []
        for t in program.tensors:
            if t.kind == "weight":
                self.views.append(program.weight(t))
            else:
                buf = self.arena[t.offset:t.offset + t.nbytes]
                self.views.append(buf.view(t.dtype.np).reshape(t.shape))
        self.steps: list[tuple[RunFn, list[np.ndarray | None], list[np.ndarray]]] = []
        # The layers' scratch: one buffer they all share (pydla.backends.cpu.workspace),
        # allocated once every layer is bound, before the kernels are prebound on it.
        self.workspace = workspace.Workspace()
        for layer in program.layers:
            self.workspace.next_layer()
            try:
                with workspace.sharing(self.workspace):
                    run = (bind_loop(layer, program, CpuProgram) if layer.op == "Loop"
                           else bind_layer(_spec(program, layer)))
            except PydlaError as e:
                raise LoadableError(0, f"layer {layer.name!r} ({layer.op}): {e}") from e
            except (KeyError, TypeError, ValueError, IndexError) as e:
                raise LoadableError(0, f"layer {layer.name!r} ({layer.op}): bad attributes "
                                    f"({type(e).__name__}: {e})") from e
            ins = [None if i < 0 else self.views[i] for i in layer.inputs]
            outs = [self.views[i] for i in layer.outputs]
            if layer.attrs.get("in_place"):
                run = _in_place(layer, run, ins, outs)
            self.steps.append((run, ins, outs))
        # One no-argument call per layer: what the hot loop runs.
        self.thunks = [prebind(run, ins, outs) for run, ins, outs in self.steps]
        self.input_views = [self.views[io.tensor] for io in program.inputs]
        self.output_views = [self.views[io.tensor] for io in program.outputs]

    def execute(self, inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray],
                on_layer: LayerHook | None = None) -> None:
        # ``a[...] = b`` casts as copyto(casting="unsafe") does, without parsing keywords:
        # a third less for the small tensors whose whole run takes microseconds.
        for view, x in zip(self.input_views, inputs):
            view[...] = x
        self.run_layers(on_layer)
        for view, y in zip(self.output_views, outputs):
            y[...] = view

    def run_layers(self, on_layer: LayerHook | None = None) -> None:
        # numba's count is per calling thread and global to it: set at every run, as a
        # program bound later with another count (or run from another thread) changes it.
        count = self.governor.begin()
        if threads.current_count() != count:
            numba.set_num_threads(count)
        index = 0
        clock = time.perf_counter_ns
        begin = clock()
        try:
            if on_layer is None:
                # ``index`` names the failing layer in the handler below.
                for index, thunk in enumerate(self.thunks):  # noqa: B007
                    thunk()
            else:
                for index, thunk in enumerate(self.thunks):
                    start = clock()
                    thunk()
                    # The runtime's timing and timeout hook; it may raise (PydlaError).
                    on_layer(index, start, clock())
            self.governor.end(clock() - begin)
        except PydlaError:
            raise
        except Exception as e:  # a kernel bug or a numeric failure: name the layer
            layer = self.program.layers[index]
            raise KernelError(layer.name, layer.op, f"{type(e).__name__}: {e}") from e


class CpuBackend:
    name = "cpu"

    def supported_ops(self) -> frozenset[str]:
        return frozenset(KERNELS)

    def bind(self, program: Program) -> CpuProgram:
        return CpuProgram(program)
