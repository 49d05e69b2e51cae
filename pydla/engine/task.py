"""Tasks: read ``Task`` records from memory, validate them against a device, run them.

Validation happens in full before anything is queued, so a bad submission changes
nothing. Running a task holds its module's lock: a loaded module has one activation arena,
so tasks of one module run one at a time whichever streams and threads submitted them
(tasks of different modules run in parallel).

The timeout is checked between layers (a CPU kernel cannot be pre-empted): a task whose
elapsed time passes the limit after a layer stops there and fails with ``TaskTimeoutError``;
its outputs are then undefined.
"""

from __future__ import annotations

import ctypes
import functools
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from pydla.engine import stats
from pydla.engine.faults import InvalidAddressError, InvalidParamError, TaskTimeoutError
from pydla.engine.memory import MEMORY
from pydla.engine.records import ALL_KINDS, Task
from pydla.engine.status import status_of

if TYPE_CHECKING:
    from pydla.backends.base import LayerHook
    from pydla.engine.device import DlaDevice, DlaModule

MAX_TASKS = 0xFFFFFFFF  # num_tasks is a uint32_t


class RawTask(NamedTuple):
    """The fields of one ``Task`` record, with its pointer lists read out (a tuple: it
    keys the device's cache of validated tasks, and hashes in C)."""

    module_handle: int
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    wait_events: int
    signal_events: int


@dataclass(eq=False)
class TaskPlan:
    """A validated task: uint8 views of its registered buffers, cut to descriptor sizes."""

    module: DlaModule
    inputs: tuple[np.ndarray, ...]
    outputs: tuple[np.ndarray, ...]
    statistics: tuple[np.ndarray, ...]
    timeout_ms: int
    # The module's run over these buffers, views worked out once (set by the first run).
    runner: Callable[[LayerHook | None], None] | None = field(default=None, repr=False)


_RECORD = ctypes.sizeof(Task)


def _pointers(ptr: int, count: int, what: str) -> tuple[int, ...]:
    if count == 0:
        return ()
    if ptr == 0:
        raise InvalidAddressError(f"the {what} tensor list is NULL but its count is {count}")
    return struct.unpack(f"={count}Q", MEMORY.read(ptr, 8 * count, ALL_KINDS))


@functools.lru_cache(maxsize=64)
def _fields(record: bytes) -> tuple[int, int, int, int, int, int, int]:
    """A Task record's fields (a pure function of its bytes: a program submits the same
    few records again and again)."""
    rec = Task.from_buffer_copy(record)
    return (rec._moduleHandle, rec._inputTensor, rec._numInputTensors, rec._outputTensor,
            rec._numOutputTensors, rec._waitEvents, rec._signalEvents)


def read_tasks(ptr: int, count: int) -> list[RawTask]:
    """Read ``count`` consecutive Task records starting at address ``ptr``."""
    if ptr == 0:
        raise InvalidParamError("ptr_to_tasks is NULL")
    if not 0 < count <= MAX_TASKS:
        raise InvalidParamError(f"num_tasks must be 1 … {MAX_TASKS}, not {count}")
    data = MEMORY.read(ptr, _RECORD * count, ALL_KINDS)
    tasks = []
    for i in range(count):
        module, ins, n_in, outs, n_out, wait, signal = _fields(
            data[i * _RECORD:(i + 1) * _RECORD])
        tasks.append(RawTask(module, _pointers(ins, n_in, "input"),
                             _pointers(outs, n_out, "output"), wait, signal))
    return tasks


def plan_task(device: DlaDevice, raw: RawTask) -> TaskPlan:
    module = device.module
    if module is None or raw.module_handle != module.handle:
        raise InvalidParamError(f"the task names module {raw.module_handle:#x}, which is not "
                                f"loaded on device {device.handle:#x}")
    if raw.wait_events or raw.signal_events:
        raise InvalidParamError("wait_events and signal_events must be 0 in hybrid mode")
    ins, outs, sts = module.input_descriptors, module.output_descriptors, module.stats_descriptors
    if len(raw.inputs) != len(ins):
        raise InvalidParamError(f"the task has {len(raw.inputs)} input tensors, the module "
                                f"takes {len(ins)}")
    if len(raw.outputs) not in (len(outs), len(outs) + len(sts)):
        raise InvalidParamError(f"the task has {len(raw.outputs)} output tensors, the module "
                                f"writes {len(outs)} (or {len(outs) + len(sts)} with its "
                                "task statistics)")
    out_ptrs, stat_ptrs = raw.outputs[:len(outs)], raw.outputs[len(outs):]
    return TaskPlan(
        module,
        tuple(device.buffer_for(p, d, "input") for p, d in zip(raw.inputs, ins)),
        tuple(device.buffer_for(p, d, "output") for p, d in zip(out_ptrs, outs)),
        tuple(device.buffer_for(p, d, "statistics") for p, d in zip(stat_ptrs, sts)),
        device.timeout_ms)


def execute(plan: TaskPlan) -> None:
    """Run one task to completion (or to its timeout) in the calling thread."""
    module = plan.module
    recorder = stats.Recorder(module.layer_names) if plan.statistics else None
    with module.lock:
        start = time.perf_counter_ns()
        deadline = start + plan.timeout_ms * 1_000_000

        def on_layer(index: int, layer_start: int, layer_end: int) -> None:
            if recorder is not None:
                recorder.layer(index, layer_start, layer_end)
            if layer_end > deadline:
                raise TaskTimeoutError(
                    f"task on module {module.handle:#x} passed its {plan.timeout_ms} ms "
                    f"timeout at layer {index} ({module.layer_names[index]!r})")

        error: BaseException | None = None
        try:
            run = plan.runner
            if run is None:
                run = plan.runner = module.loaded.buffer_runner(plan.inputs, plan.outputs)
            run(on_layer)
        except BaseException as e:
            error = e
            raise
        finally:
            if recorder is not None:
                recorder.start_ns, recorder.end_ns = start, time.perf_counter_ns()
                for buf in plan.statistics:
                    recorder.write(buf, status_of(error))
