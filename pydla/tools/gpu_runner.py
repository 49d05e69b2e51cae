"""One inference on the GPU in trtexec's phases, timed with CUDA events (``pydla bench
--device=cuda``).

A GPU run is asynchronous: the host only queues work, so each phase is timed by CUDA events
recorded on the runner's stream between the phases — input copies from pinned host memory,
the module's task (``CudaProgram.enqueue``: its CUDA graph), output copies back — and a
query ends when the last event has completed. ``InferenceTrace`` stamps are the host clock
at the query's start plus the event intervals; its enqueue time is the host time spent
queueing the query's work.

Per-layer times come from the module's *profiled* graph (``backends/cuda/instrument.py``,
the cuDLA task statistics): a kernel stamps the GPU's global timer before and after each
layer. That graph is only replayed in a separate profiling run, so the timed run measures
the plain graph.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import cupy as cp
import numpy as np

from pydla.backends.cuda.driver import memcpy_dtoh_async, memcpy_htod_async
from pydla.engine import LoadedModule
from pydla.engine.inputs import check_input
from pydla.engine.stats import TaskStatistics, decode_task_statistics
from pydla.errors import DeviceError, PydlaError
from pydla.loadable import TensorInfo
from pydla.tools.profiling import InferenceTrace, layer_times_ns

_NS_PER_MS = 1_000_000


class GpuRunner:
    """Runs a module bound by the CUDA backend from pinned host buffers on its own stream.

    Host buffers hold each tensor in its own type, linear: the CUDA backend's I/O layout
    (the loadable's I/O formats describe CPU and DLA buffers)."""

    def __init__(self, module: LoadedModule, stream: int = 0) -> None:
        bound = module.bound
        if not hasattr(bound, "enqueue") or not hasattr(bound, "io"):
            raise DeviceError(f"GPU timing needs a module bound by the CUDA backend, not "
                              f"{type(bound).__name__}")
        self.module = module
        self.bound = bound
        self.stream = stream
        self.device = cp.cuda.Device(bound.backend.device)
        prog = module.program
        with self.device:
            self.cuda_stream = cp.cuda.Stream(non_blocking=True)
            self.events = [cp.cuda.Event() for _ in range(4)]
            self._inputs = [self._buffers(prog.tensors[io.tensor]) for io in prog.inputs]
            self._outputs = [self._buffers(prog.tensors[io.tensor]) for io in prog.outputs]
            instrument = bound.instrument
            self._stats = (cp.zeros(instrument.nbytes, cp.uint8) if instrument is not None
                           else None)
        self.num_layers = len(prog.layers)
        self.last_statistics: TaskStatistics | None = None

    @staticmethod
    def _buffers(t: TensorInfo) -> tuple[TensorInfo, np.ndarray, cp.ndarray]:
        """(tensor, pinned host array in the tensor's storage type, device buffer)."""
        nbytes = max(int(t.nbytes), 1)
        pinned = cp.cuda.alloc_pinned_memory(nbytes)
        host = np.frombuffer(pinned, np.uint8, nbytes)[:t.nbytes].view(t.dtype.np)
        return t, host.reshape(t.shape), cp.empty(nbytes, cp.uint8)

    @property
    def profiles(self) -> bool:
        """Whether this module records per-layer times (bound with ``instrument``)."""
        return self._stats is not None

    def set_inputs(self, arrays: Sequence[np.ndarray]) -> None:
        for (t, host, _), x in zip(self._inputs, arrays):
            np.copyto(host, check_input(t.name, x, t.shape, t.dtype, PydlaError),
                      casting="unsafe")

    def outputs(self) -> list[np.ndarray]:
        return [host.copy() for _, host, _ in self._outputs]

    def run(self, profiled: bool = False) -> InferenceTrace:
        """One query; ``profiled``: through the profiled graph, with per-layer times."""
        if profiled and self._stats is None:
            raise PydlaError("per-layer GPU times need the module loaded with instrument=True")
        s, (e0, e1, e2, e3) = self.cuda_stream, self.events
        raw = int(s.ptr)
        stats = (int(self._stats.data.ptr),) if profiled and self._stats is not None else ()
        with self.device:
            start = time.perf_counter_ns()
            e0.record(s)
            for t, host, dev in self._inputs:
                memcpy_htod_async(int(dev.data.ptr), host.ctypes.data, t.nbytes, raw)
            e1.record(s)
            self.bound.enqueue(raw, [int(d.data.ptr) for _, _, d in self._inputs],
                               [int(d.data.ptr) for _, _, d in self._outputs], stats)
            e2.record(s)
            for t, host, dev in self._outputs:
                memcpy_dtoh_async(host.ctypes.data, int(dev.data.ptr), t.nbytes, raw)
            e3.record(s)
            queued = time.perf_counter_ns()
            e3.synchronize()
            self.bound.synchronize()  # a run-time index out of range raises here
            h2d = _elapsed_ns(e0, e1)
            compute = _elapsed_ns(e1, e2)
            d2h = _elapsed_ns(e2, e3)
            if stats:
                self.last_statistics = decode_task_statistics(cp.asnumpy(self._stats))
                layer_ns = layer_times_ns(self.last_statistics, self.num_layers)
            else:  # the plain graph times no layer
                layer_ns = np.zeros(self.num_layers, np.int64)
        return InferenceTrace(self.stream, start, start + h2d, start + h2d + compute,
                              start + h2d + compute + d2h, layer_ns, queued - start)

    def profile(self, queries: int) -> list[InferenceTrace]:
        """``queries`` runs of the profiled graph (after one untimed to warm it up)."""
        self.run(profiled=True)
        return [self.run(profiled=True) for _ in range(queries)]


def _elapsed_ns(a: cp.cuda.Event, b: cp.cuda.Event) -> int:
    return int(round(cp.cuda.get_elapsed_time(a, b) * _NS_PER_MS))
