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
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from pydla.engine import stats
from pydla.engine.faults import InvalidAddressError, InvalidParamError, TaskTimeoutError
from pydla.engine.memory import MEMORY, Region
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
    deadline: Deadline = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.deadline = Deadline(self.module, self.timeout_ms)


class Deadline:
    """The per-layer hook that ends a task past its timeout. One per plan, made once and
    armed at each run (``arm``): the plan's module lock keeps its runs one at a time."""

    __slots__ = ("module", "timeout_ms", "at")

    def __init__(self, module: DlaModule, timeout_ms: int) -> None:
        self.module, self.timeout_ms, self.at = module, timeout_ms, 0

    def arm(self, start_ns: int) -> Deadline:
        self.at = start_ns + self.timeout_ms * 1_000_000
        return self

    def __call__(self, index: int, layer_start: int, layer_end: int) -> None:
        if layer_end > self.at:
            raise TaskTimeoutError(
                f"task on module {self.module.handle:#x} passed its {self.timeout_ms} ms "
                f"timeout at layer {index} ({self.module.layer_names[index]!r})")


_RECORD = ctypes.sizeof(Task)


class _Read(NamedTuple):
    """Memory read for a submission: the region that holds it, and the bytes found there."""

    region: Region
    memory: Any  # a ctypes char array over the range: ``.raw`` reads it (string_at: 10×)
    data: bytes


def _read(ptr: int, size: int, reads: list[_Read]) -> bytes:
    """Bytes [ptr, ptr + size) of memory pydla knows, noted in ``reads``."""
    region = MEMORY.find(ptr, size, ALL_KINDS)
    owner = region.buffer()  # held: the memory stays valid while it is read
    if owner is None:
        raise InvalidAddressError(f"[{ptr:#x}, {ptr + size:#x}) was released")
    memory = (ctypes.c_char * size).from_address(ptr)
    reads.append(_Read(region, memory, memory.raw))
    return reads[-1].data


def _pointers(ptr: int, count: int, what: str, reads: list[_Read]) -> tuple[int, ...]:
    if count == 0:
        return ()
    if ptr == 0:
        raise InvalidAddressError(f"the {what} tensor list is NULL but its count is {count}")
    return struct.unpack(f"={count}Q", _read(ptr, 8 * count, reads))


# (ptr_to_tasks, num_tasks) → (MEMORY.generation, the reads, the tasks) of the last read
# there. A program submits the same records frame after frame: while the memory map is
# unchanged the ranges read are still memory pydla knows, so reading them again and
# finding the same bytes — the records and the pointer lists they name, which a program
# may rewrite in place — gives the same tasks, without parsing them again.
_LAST_READ: dict[tuple[int, int], tuple[int, tuple[_Read, ...], tuple[RawTask, ...]]] = {}
_LAST_READ_MAX = 16


def read_tasks(ptr: int, count: int) -> tuple[RawTask, ...]:
    """Read ``count`` consecutive Task records starting at address ``ptr``. Records and
    pointer lists unchanged since the last read at ``ptr`` give the same tuple back."""
    generation = MEMORY.generation  # read first: a change during the read is not missed
    hit = _LAST_READ.get((ptr, count))
    if hit is not None and hit[0] == generation:
        for read in hit[1]:  # the same bytes where they were read (inline: every submit)
            owner = read.region.buffer()  # held: the memory stays valid while it is read
            if owner is None or read.memory.raw != read.data:
                break
        else:
            return hit[2]
    if ptr == 0:
        raise InvalidParamError("ptr_to_tasks is NULL")
    if not 0 < count <= MAX_TASKS:
        raise InvalidParamError(f"num_tasks must be 1 … {MAX_TASKS}, not {count}")
    reads: list[_Read] = []
    data = _read(ptr, _RECORD * count, reads)
    tasks = []
    for i in range(count):
        rec = Task.from_buffer_copy(data, i * _RECORD)
        tasks.append(RawTask(rec._moduleHandle,
                             _pointers(rec._inputTensor, rec._numInputTensors, "input", reads),
                             _pointers(rec._outputTensor, rec._numOutputTensors, "output",
                                       reads),
                             rec._waitEvents, rec._signalEvents))
    found = tuple(tasks)
    if len(_LAST_READ) >= _LAST_READ_MAX:
        _LAST_READ.clear()
    _LAST_READ[(ptr, count)] = (generation, tuple(reads), found)
    return found


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
    if plan.statistics:
        _execute_recorded(plan)
        return
    module = plan.module
    with module.lock:
        run = plan.runner
        if run is None:
            run = plan.runner = module.loaded.buffer_runner(plan.inputs, plan.outputs)
        run(plan.deadline.arm(time.perf_counter_ns()))


def _execute_recorded(plan: TaskPlan) -> None:
    """``execute`` with task statistics: every layer's times, and the task's status."""
    module = plan.module
    recorder = stats.Recorder(module.layer_names)
    with module.lock:
        start = time.perf_counter_ns()
        timeout = plan.deadline.arm(start)

        def on_layer(index: int, layer_start: int, layer_end: int) -> None:
            recorder.layer(index, layer_start, layer_end)
            timeout(index, layer_start, layer_end)

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
            recorder.start_ns, recorder.end_ns = start, time.perf_counter_ns()
            for buf in plan.statistics:
                recorder.write(buf, status_of(error))
