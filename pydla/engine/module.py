"""A loaded module: validated program + bound backend + I/O format conversion at the edges."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any

import numpy as np

from pydla import formats
from pydla.backends.base import Backend, LayerHook
from pydla.dtypes import DType, to_compute, to_storage
from pydla.engine.inputs import check_input
from pydla.engine.memory import check_program_memory
from pydla.errors import PydlaError
from pydla.loadable import IOTensor, ProfileSet, Program, read_loadable


class IOError_(PydlaError):
    """User-supplied input or output buffers do not fit the module."""


class ProfileShapeError(IOError_):
    """Input shapes outside a loadable's optimization profile (or, in a profile without
    batch padding, shapes no plan runs): names the input, the shape and the range."""


def default_backend() -> Backend:
    from pydla.backends.cpu import CpuBackend

    return CpuBackend()


class LoadedModule:
    """A validated, bound module. ``run`` takes and returns logical (NCHW) numpy arrays;
    ``run_buffers`` takes the raw user buffers in the module's I/O formats."""

    def __init__(self, data: Any, backend: Backend | None = None) -> None:
        self.backend = backend or default_backend()
        self.program: Program = read_loadable(data, self.backend.supported_ops())
        check_program_memory(self.program, self.backend.name)
        self.bound = self.backend.bind(self.program)
        self._in_arrays = [np.empty(self._tensor(io).shape, self._tensor(io).dtype.np)
                           for io in self.program.inputs]
        self._out_arrays = [np.empty(self._tensor(io).shape, self._tensor(io).dtype.np)
                            for io in self.program.outputs]
        # An optimization profile's other plans are bound on first use (one arena each).
        self.profiles: ProfileSet | None = self.program.profiles
        self._main_shapes = [self._tensor(io).shape for io in self.program.inputs]
        self._plans: dict[int, tuple[Program, Any]] = {}
        self._plans_lock = threading.Lock()
        # read at every run: worked out once
        self._input_names = [self._tensor(io).name for io in self.program.inputs]
        self._output_names = [self._tensor(io).name for io in self.program.outputs]
        self._input_name_set = frozenset(self._input_names)
        # where each output is in run()'s list, by name (what sessions look outputs up by)
        self.output_positions = {name: i for i, name in enumerate(self._output_names)}
        self._input_types = [(t.name, t.shape, t.dtype) for t in map(self._tensor,
                                                                      self.program.inputs)]

    def _tensor(self, io: IOTensor):  # noqa: ANN202
        return self.program.tensors[io.tensor]

    @property
    def input_descriptors(self) -> list[formats.TensorDescriptor]:
        return [io.descriptor for io in self.program.inputs]

    @property
    def output_descriptors(self) -> list[formats.TensorDescriptor]:
        return [io.descriptor for io in self.program.outputs]

    @property
    def input_names(self) -> list[str]:
        return list(self._input_names)

    @property
    def output_names(self) -> list[str]:
        return list(self._output_names)

    # -- logical arrays --------------------------------------------------------------
    def run(self, inputs: Sequence[np.ndarray] | Mapping[str, np.ndarray]) -> list[np.ndarray]:
        """Run with logical arrays (in the tensors' own types); returns fresh arrays."""
        if type(inputs) is dict or isinstance(inputs, Mapping):
            names = self._input_names
            if inputs.keys() != self._input_name_set:
                missing = [n for n in names if n not in inputs]
                if missing:
                    raise IOError_(f"missing inputs {missing}")
                raise IOError_(f"unknown inputs {sorted(set(inputs) - set(names))}; the "
                               f"module takes {names}")
            inputs = [inputs[n] for n in names]
        if len(inputs) != len(self.program.inputs):
            raise IOError_(f"{len(inputs)} inputs given, the module takes "
                           f"{len(self.program.inputs)}")
        if self.profiles is not None:
            shapes = [np.shape(x) for x in inputs]
            if shapes != self._main_shapes:
                return self._run_profile(inputs, shapes)
        arrays = [check_input(name, x, shape, dtype, IOError_)
                  for (name, shape, dtype), x in zip(self._input_types, inputs)]
        # The backend copies (and converts) the inputs into its own buffers and the outputs
        # into fresh arrays: one copy each way.
        outputs = [np.empty_like(a) for a in self._out_arrays]
        self.bound.execute(arrays, outputs)
        return outputs

    def _run_profile(self, inputs: Sequence[Any], shapes: list[tuple[int, ...]]
                     ) -> list[np.ndarray]:
        """Run in the plan the shapes pick; a batch without a plan of its own is padded
        with copies of its last row (rows are independent: any values do) and sliced."""
        assert self.profiles is not None
        index, batch = choose_profile(self.profiles, shapes)
        program, bound = self.plan(index)
        arrays = []
        for io, x, r in zip(program.inputs, inputs, self.profiles.ranges):
            t = program.tensors[io.tensor]
            x = np.asarray(x)
            if batch is not None and r.min != r.max and x.shape[0] < t.shape[0]:
                x = np.concatenate([x, np.repeat(x[-1:], t.shape[0] - x.shape[0], axis=0)])
            arrays.append(check_input(t.name, x, t.shape, t.dtype, IOError_))
        outputs = [np.empty(program.tensors[io.tensor].shape,
                            program.tensors[io.tensor].dtype.np) for io in program.outputs]
        bound.execute(arrays, outputs)
        return outputs if batch is None else [y[:batch] for y in outputs]

    def plan(self, index: int) -> tuple[Program, Any]:
        """Profile ``index``'s program and bound executor, bound on first use."""
        if index == 0:
            return self.program, self.bound
        with self._plans_lock:
            found = self._plans.get(index)
            if found is None:
                program = self.program.profile_program(index)
                check_program_memory(program, self.backend.name)
                found = self._plans[index] = (program, self.backend.bind(program))
            return found

    # -- raw buffers in the I/O formats ------------------------------------------------
    def run_buffers(self, inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray],
                    on_layer: LayerHook | None = None) -> None:
        """``inputs``/``outputs`` are uint8 buffers of at least each descriptor's size_;
        ``on_layer`` is the backend's per-layer hook (timing, timeouts)."""
        self.buffer_runner(inputs, outputs)(on_layer)

    def buffer_runner(self, inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray]
                      ) -> Callable[[LayerHook | None], None]:
        """``run_buffers`` bound to these buffers (a task's, run again and again). Linear
        I/O in the tensors' own types is handed to the backend as views of the buffers:
        no conversion, one copy each way, and nothing worked out per run."""
        views: list[list[np.ndarray]] = [[], []]
        for side, ios, bufs in ((0, self.program.inputs, inputs),
                                (1, self.program.outputs, outputs)):
            for io, buf in zip(ios, bufs):
                t = self._tensor(io)
                if io.format != "chw" or io.dtype is not t.dtype:
                    return lambda on_layer: self._convert_and_run(inputs, outputs, on_layer)
                views[side].append(formats.unpack(buf[:io.descriptor.size], io.format,
                                                  t.shape, io.dtype))
        return partial(self.bound.execute, views[0], views[1])  # no frame of its own

    def _convert_and_run(self, inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray],
                         on_layer: LayerHook | None) -> None:
        for io, buf, dst in zip(self.program.inputs, inputs, self._in_arrays):
            t = self._tensor(io)
            src = formats.unpack(buf[:io.descriptor.size], io.format, t.shape, io.dtype)
            _convert_into(dst, src, io.dtype, t.dtype)
        self.bound.execute(self._in_arrays, self._out_arrays, on_layer)
        for io, buf, src in zip(self.program.outputs, outputs, self._out_arrays):
            t = self._tensor(io)
            logical = src if io.dtype is t.dtype else to_storage(to_compute(src, t.dtype),
                                                                  io.dtype)
            out = buf[:io.descriptor.size].view(io.dtype.np)
            formats.pack(logical, io.format, out=out)


def choose_profile(profiles: ProfileSet, shapes: Sequence[tuple[int, ...]]
                   ) -> tuple[int, int | None]:
    """(index of the profile running ``shapes``, the batch to slice its outputs to when it
    runs them padded, else None); ProfileShapeError when none does."""
    for r, shape in zip(profiles.ranges, shapes):
        shape = tuple(shape)
        if len(shape) != len(r.opt) or not all(
                lo <= d <= hi for d, lo, hi in zip(shape, r.min, r.max)):
            raise ProfileShapeError(f"input {r.name!r}: shape {shape} is outside the "
                                    f"optimization profile [min {r.min}, max {r.max}]")
    wanted = tuple(tuple(s) for s in shapes)
    for k, prof in enumerate(profiles.profiles):
        if prof.shapes == wanted:
            return k, None
    if not profiles.pad_batch:
        held = [[list(s) for s in p.shapes] for p in profiles.profiles]
        raise ProfileShapeError(f"no plan runs shapes {[list(s) for s in wanted]}; the "
                                f"loadable holds {held}")
    varying = [j for j, r in enumerate(profiles.ranges) if r.min != r.max]
    sizes = {wanted[j][0] for j in varying}
    if len(sizes) != 1:
        names = [profiles.ranges[j].name for j in varying]
        raise ProfileShapeError(f"inputs {names} share the batch (axis 0), given "
                                f"{[wanted[j][0] for j in varying]}")
    batch = sizes.pop()
    k = min((k for k, p in enumerate(profiles.profiles) if p.shapes[varying[0]][0] >= batch),
            key=lambda k: profiles.profiles[k].shapes[varying[0]][0])
    return k, batch


def _convert_into(dst: np.ndarray, src: np.ndarray, src_type: DType, dst_type: DType) -> None:
    if src_type is dst_type:
        np.copyto(dst, src)
    else:
        np.copyto(dst, to_storage(to_compute(src, src_type), dst_type))


def load(data: Any, backend: Backend | None = None) -> LoadedModule:
    return LoadedModule(data, backend)


# A task whose module typically runs faster than this runs in the submitting thread when
# its stream is idle (engine.stream): handing it to the stream's worker and waking the
# caller again cost ≈ 50-150 µs on this project's 2-core machine — more than such a task.
# Longer tasks go to the worker, so the caller overlaps with them.
INLINE_TASK_NS = 100_000


def is_short(module: LoadedModule) -> bool:
    """Whether ``module``'s runs are measured to be short (CPU backend; never before three
    runs, and never on a backend that does not time its runs)."""
    governor = getattr(module.bound, "governor", None)
    typical = governor.typical_ns() if governor is not None else None
    return typical is not None and typical < INLINE_TASK_NS

