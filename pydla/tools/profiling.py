"""One inference split into trtexec's phases, each timed on its own.

``LoadedModule.run_buffers`` does three things in one call: unpack the user's input buffers
(in their I/O formats) into the activation arena, run the layers, pack the arena's outputs
into the user's output buffers. On the CPU device the first and last are pydla's
host-to-device and device-to-host transfers, so ``StagedRunner`` does the same three steps
itself with a clock read between them (tests check it computes what ``run_buffers`` does).
Per-layer times come from the runtime's own task-statistics recorder. On a GPU,
``gpu_runner.GpuRunner`` is the counterpart (CUDA events between the phases; per-layer times
from the task statistics of the module's profiled graph, read by ``layer_times_ns``).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from pydla import formats
from pydla.dtypes import DType, to_compute, to_storage
from pydla.engine import LoadedModule
from pydla.engine.inputs import check_input
from pydla.engine.stats import Recorder, TaskStatistics
from pydla.errors import PydlaError


@dataclass(frozen=True)
class InferenceTrace:
    """perf_counter_ns stamps of one inference and its per-layer kernel times."""

    stream: int
    start_ns: int
    h2d_end_ns: int
    compute_end_ns: int
    end_ns: int
    layer_ns: np.ndarray  # int64, one per layer
    # Host time spent queueing the query's work, where it is measured apart (the GPU's
    # asynchronous runs); None: derived from the layer times (enqueue_ns).
    host_enqueue_ns: int | None = None

    @property
    def h2d_ns(self) -> int:
        return self.h2d_end_ns - self.start_ns

    @property
    def compute_ns(self) -> int:
        return self.compute_end_ns - self.h2d_end_ns

    @property
    def d2h_ns(self) -> int:
        return self.end_ns - self.compute_end_ns

    @property
    def latency_ns(self) -> int:
        return self.end_ns - self.start_ns

    @property
    def enqueue_ns(self) -> int:
        """Host time spent dispatching layers rather than inside them: the CPU runtime's
        counterpart of trtexec's enqueue time (the launch cost that CUDA graphs remove);
        on the GPU, the host time spent queueing the query."""
        if self.host_enqueue_ns is not None:
            return self.host_enqueue_ns
        return max(self.compute_ns - int(self.layer_ns.sum()), 0)


class Runner(Protocol):
    """What the bench loop drives: ``StagedRunner`` (CPU) or ``GpuRunner`` (CUDA)."""

    stream: int

    def run(self) -> InferenceTrace: ...


def layer_times_ns(stats: TaskStatistics, num_layers: int) -> np.ndarray:
    """Each layer's end minus start (int64 ns) from one task's statistics; a statistics
    record of another module, or of a task that did not run every layer, is refused."""
    if len(stats.layers) != num_layers or stats.layers_run != num_layers:
        raise PydlaError(f"task statistics cover {stats.layers_run} of {len(stats.layers)} "
                         f"layers; the module has {num_layers}")
    out = np.array([lay.end_ns - lay.start_ns for lay in stats.layers], np.int64)
    if (out < 0).any():
        bad = stats.layers[int(np.argmax(out < 0))]
        raise PydlaError(f"task statistics: layer {bad.name!r} ends before it starts")
    return out


def _cast(x: np.ndarray, src: DType, dst: DType) -> np.ndarray:
    return x if src is dst else to_storage(to_compute(x, src), dst)


class StagedRunner:
    """Runs a loaded module from host buffers in its I/O formats, one phase at a time."""

    def __init__(self, module: LoadedModule, stream: int = 0) -> None:
        bound = module.bound
        if not hasattr(bound, "run_layers") or not hasattr(bound, "input_views"):
            raise PydlaError(f"profiling needs a backend that runs layer by layer; "
                             f"{type(bound).__name__} does not")
        self.module = module
        self.bound = bound
        self.stream = stream
        prog = module.program
        self._inputs = [(io, prog.tensors[io.tensor], view)
                        for io, view in zip(prog.inputs, bound.input_views)]
        self._outputs = [(io, prog.tensors[io.tensor], view)
                         for io, view in zip(prog.outputs, bound.output_views)]
        self.host_inputs = [np.zeros(io.descriptor.size, np.uint8) for io in prog.inputs]
        self.host_outputs = [np.zeros(io.descriptor.size, np.uint8) for io in prog.outputs]
        self.recorder = Recorder([lay.name for lay in prog.layers])

    def set_inputs(self, arrays: Sequence[np.ndarray]) -> None:
        """Lay logical inputs (in the tensors' own types) out in the host buffers."""
        for (io, t, _), x, buf in zip(self._inputs, arrays, self.host_inputs):
            logical = _cast(check_input(t.name, x, t.shape, t.dtype, PydlaError), t.dtype,
                            io.dtype)
            formats.pack(logical, io.format, out=buf[:io.descriptor.size].view(io.dtype.np))

    def outputs(self) -> list[np.ndarray]:
        """The host output buffers as logical arrays in the tensors' own types."""
        return [_cast(formats.unpack(buf[:io.descriptor.size], io.format, t.shape, io.dtype),
                      io.dtype, t.dtype).copy()
                for (io, t, _), buf in zip(self._outputs, self.host_outputs)]

    def run(self) -> InferenceTrace:
        clock = time.perf_counter_ns
        start = clock()
        for (io, t, view), buf in zip(self._inputs, self.host_inputs):
            src = formats.unpack(buf[:io.descriptor.size], io.format, t.shape, io.dtype)
            np.copyto(view, _cast(src, io.dtype, t.dtype), casting="unsafe")
        h2d_end = clock()
        self.bound.run_layers(self.recorder.layer)
        compute_end = clock()
        for (io, t, view), buf in zip(self._outputs, self.host_outputs):
            formats.pack(_cast(view, t.dtype, io.dtype), io.format,
                         out=buf[:io.descriptor.size].view(io.dtype.np))
        end = clock()
        recs = self.recorder.records
        layer_ns = recs["end_ns"].astype(np.int64) - recs["start_ns"].astype(np.int64)
        return InferenceTrace(self.stream, start, h2d_end, compute_end, end, layer_ns)
