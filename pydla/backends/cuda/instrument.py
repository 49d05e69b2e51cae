"""Task timing on the GPU for the cuDLA device: task statistics and the task timeout.

A module loaded through ``cudla`` on a GPU carries a device copy of its statistics buffer
(``pydla.engine.stats`` layout: header, then one record per layer) and a small block of
pinned host memory the GPU writes to (``watch``: the timeout in ns, a sticky fault status,
the last task's duration). Its CUDA graph starts with a ``stamp`` kernel (the GPU's global
timer, ns) and ends with ``finish``: the end time, the task's status (``ErrorDlaErrEngine
Timeout`` when it ran past the timeout) in the header and, on a timeout, the fault word
the host reads. A second graph, replayed only for tasks that ask for statistics, also
stamps each layer's start and end. A task's statistics are copied from the device image
into each buffer it registered with ``TASK_STATISTICS``, on the task's stream.

Times are the GPU's ``%globaltimer`` (ns since an arbitrary origin); a timeout is found
once the task has run (a kernel cannot be pre-empted): ``get_last_error`` reports it then.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import cupy as cp
import numpy as np

from pydla.backends.cuda.context import BindContext
from pydla.engine import stats
from pydla.engine.enums import Status

_SOURCE = r"""
__device__ __forceinline__ unsigned long long now() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
extern "C" __global__ void stamp(unsigned long long* dst) { *dst = now(); }
extern "C" __global__ void finish(unsigned long long* image, unsigned long long* watch) {
  const unsigned long long t = now();
  image[4] = t;
  const unsigned long long elapsed = t - image[3];
  const unsigned long long limit = *(volatile unsigned long long*)&watch[0];
  const unsigned int status = (limit && elapsed > limit) ? STATUS : 0u;
  reinterpret_cast<unsigned int*>(image)[5] = status;
  *(volatile unsigned long long*)&watch[2] = elapsed;
  if (status) *(volatile unsigned long long*)&watch[1] = status;
}
"""


class Instrument:
    """The statistics image, the watch block and the kernels that fill them."""

    def __init__(self, ctx: BindContext, layer_names: Sequence[str]) -> None:
        self.num_layers = len(layer_names)
        self.nbytes = stats.buffer_size(self.num_layers)
        template = np.zeros(self.nbytes, np.uint8)
        stats.Recorder(layer_names).write(template, 0)
        # Every layer runs once the task completes (a timeout is found afterwards).
        template[16:20] = np.array([self.num_layers], "<u4").view(np.uint8)
        self.image = cp.asarray(template)
        self.image_ptr = int(self.image.data.ptr)
        self.pinned = cp.cuda.alloc_pinned_memory(3 * 8)
        self.watch = np.frombuffer(self.pinned, np.uint64, 3)
        self.watch[:] = 0
        source = _SOURCE.replace("STATUS", f"{int(Status.ErrorDlaErrEngineTimeout)}u")
        self._stamp = ctx.function(source, "stamp")
        self._finish = ctx.function(source, "finish")

    def set_timeout_ms(self, ms: int | None) -> None:
        self.watch[0] = 0 if ms is None else int(ms) * 1_000_000

    def take_fault(self) -> tuple[int, float] | None:
        """(status, the task's duration in ms) of a task that ran past its timeout, once."""
        status = int(self.watch[1])
        if not status:
            return None
        self.watch[1] = 0
        return status, int(self.watch[2]) / 1e6

    def stamp(self, stream: Any, byte_offset: int) -> None:
        self._stamp((1,), (1,), (np.uint64(self.image_ptr + byte_offset),), stream=stream)

    def start(self, stream: Any) -> None:
        self.stamp(stream, 24)

    def layer(self, stream: Any, index: int, end: bool) -> None:
        self.stamp(stream, stats.HEADER.itemsize + stats.LAYER.itemsize * index + 8 * end)

    def finish(self, stream: Any) -> None:
        self._finish((1,), (1,), (np.uint64(self.image_ptr), np.uint64(self.pinned.ptr)),
                     stream=stream)
