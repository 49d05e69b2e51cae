"""A loaded module: validated program + bound backend + I/O format conversion at the edges."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from pydla import formats
from pydla.backends.base import Backend, LayerHook
from pydla.dtypes import DType, to_compute, to_storage
from pydla.engine.inputs import check_input
from pydla.engine.memory import check_program_memory
from pydla.errors import PydlaError
from pydla.loadable import IOTensor, Program, read_loadable


class IOError_(PydlaError):
    """User-supplied input or output buffers do not fit the module."""


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
        return [self._tensor(io).name for io in self.program.inputs]

    @property
    def output_names(self) -> list[str]:
        return [self._tensor(io).name for io in self.program.outputs]

    # -- logical arrays --------------------------------------------------------------
    def run(self, inputs: Sequence[np.ndarray] | Mapping[str, np.ndarray]) -> list[np.ndarray]:
        """Run with logical arrays (in the tensors' own types); returns fresh arrays."""
        if isinstance(inputs, Mapping):
            missing = [n for n in self.input_names if n not in inputs]
            if missing:
                raise IOError_(f"missing inputs {missing}")
            extra = sorted(set(inputs) - set(self.input_names))
            if extra:
                raise IOError_(f"unknown inputs {extra}; the module takes {self.input_names}")
            inputs = [inputs[n] for n in self.input_names]
        if len(inputs) != len(self.program.inputs):
            raise IOError_(f"{len(inputs)} inputs given, the module takes "
                           f"{len(self.program.inputs)}")
        arrays = []
        for io, x in zip(self.program.inputs, inputs):
            t = self._tensor(io)
            arrays.append(check_input(t.name, x, t.shape, t.dtype, IOError_))
        # The backend copies (and converts) the inputs into its own buffers and the outputs
        # into fresh arrays: one copy each way.
        outputs = [np.empty_like(a) for a in self._out_arrays]
        self.bound.execute(arrays, outputs)
        return outputs

    # -- raw buffers in the I/O formats ------------------------------------------------
    def run_buffers(self, inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray],
                    on_layer: LayerHook | None = None) -> None:
        """``inputs``/``outputs`` are uint8 buffers of at least each descriptor's size_;
        ``on_layer`` is the backend's per-layer hook (timing, timeouts)."""
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

