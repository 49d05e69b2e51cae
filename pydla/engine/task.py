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
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from pydla.engine import stats
from pydla.engine.faults import InvalidAddressError, InvalidParamError, TaskTimeoutError
from pydla.engine.memory import MEMORY
from pydla.engine.records import ALL_KINDS, Task
from pydla.engine.status import status_of

if TYPE_CHECKING:
    from pydla.engine.device import DlaDevice, DlaModule

MAX_TASKS = 0xFFFFFFFF  # num_tasks is a uint32_t


@dataclass(frozen=True)
class RawTask:
    """The fields of one ``Task`` record, with its pointer lists read out."""

    module_handle: int
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    wait_events: int
    signal_events: int


@dataclass(frozen=True)
class TaskPlan:
    """A validated task: uint8 views of its registered buffers, cut to descriptor sizes."""

    module: DlaModule
    inputs: tuple[np.ndarray, ...]
    outputs: tuple[np.ndarray, ...]
    statistics: tuple[np.ndarray, ...]
    timeout_ms: int


def _pointers(ptr: int, count: int, what: str) -> tuple[int, ...]:
    if count == 0:
        return ()
    if ptr == 0:
        raise InvalidAddressError(f"the {what} tensor list is NULL but its count is {count}")
    return tuple(int(p) for p in MEMORY.view(ptr, 8 * count, ALL_KINDS).view(np.uint64))


def read_tasks(ptr: int, count: int) -> list[RawTask]:
    """Read ``count`` consecutive Task records starting at address ``ptr``."""
    if ptr == 0:
        raise InvalidParamError("ptr_to_tasks is NULL")
    if not 0 < count <= MAX_TASKS:
        raise InvalidParamError(f"num_tasks must be 1 … {MAX_TASKS}, not {count}")
    size = ctypes.sizeof(Task)
    data = MEMORY.view(ptr, size * count, ALL_KINDS)
    tasks = []
    for i in range(count):
        rec = Task.from_buffer_copy(data[i * size:(i + 1) * size])
        tasks.append(RawTask(rec._moduleHandle, _pointers(rec._inputTensor, rec._numInputTensors,
                                                          "input"),
                             _pointers(rec._outputTensor, rec._numOutputTensors, "output"),
                             rec._waitEvents, rec._signalEvents))
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
            module.loaded.run_buffers(plan.inputs, plan.outputs, on_layer=on_layer)
        except BaseException as e:
            error = e
            raise
        finally:
            if recorder is not None:
                recorder.start_ns, recorder.end_ns = start, time.perf_counter_ns()
                for buf in plan.statistics:
                    recorder.write(buf, status_of(error))
