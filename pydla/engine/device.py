"""The CPU "DLA": device handles, memory registration, modules, task submission.

Backend-neutral: a module is a ``LoadedModule`` (validated loadable + bound backend); this
file adds what cuDLA adds around it, with the strict checks of ``docs/cudla.md``.
"""

from __future__ import annotations

import operator
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np

from pydla.engine import stats
from pydla.engine.faults import (
    InvalidAddressError,
    InvalidDeviceError,
    InvalidParamError,
    MemoryRegisteredError,
    UnsupportedOperationError,
)
from pydla.engine.handles import HandleTable
from pydla.engine.memory import HOST, MEMORY, TENSOR_KINDS, Region, as_bytes
from pydla.engine.module import LoadedModule, is_short
from pydla.engine.stream import Op, Stream, drain_blocking_streams, get_stream
from pydla.engine.task import RawTask, TaskPlan, execute, plan_task
from pydla.formats import TensorDescriptor

DEVICE_COUNT = 1  # one CPU engine
DEVICE_VERSION = 2  # DLA 2.0 (Orin-class); Xavier reports 1
REGISTER_ALIGNMENT = 32
DEFAULT_TIMEOUT_MS = 30_000
MAX_TIMEOUT_MS = 1_000_000
READ_ONLY, TASK_STATISTICS = 1, 2  # AccessPermissionFlags
ENABLE_FAULT_DIAGNOSTICS = 1  # ModuleLoadFlags
NOOP, SKIP_LOCK_ACQUIRE, DIAGNOSTICS_TASK = 1, 2, 4  # SubmissionFlags


@dataclass(frozen=True, eq=False)
class Registration:
    ptr: int
    size: int
    flags: int
    view: np.ndarray  # uint8, ``size`` bytes; holds the memory alive
    region: Region


@dataclass(frozen=True, eq=False)
class _Ready:
    """A validated submission to a stream, as ``submit`` runs it: valid while the device's
    and the memory map's generations are the ones it was validated at."""

    raws: Sequence[RawTask]
    stream: int
    generation: int
    memory: int
    queue: Stream
    plans: list[TaskPlan]
    run: Op


class DlaModule:
    """A loaded module on one device handle."""

    def __init__(self, device: DlaDevice, loaded: LoadedModule, flags: int) -> None:
        self.device = device
        self.loaded = loaded
        self.flags = flags
        self.lock = threading.Lock()  # the module's one arena: its tasks run one at a time
        self.input_descriptors: list[TensorDescriptor] = loaded.input_descriptors
        self.output_descriptors: list[TensorDescriptor] = loaded.output_descriptors
        self.layer_names = [layer.name for layer in loaded.program.layers]
        self.stats_descriptors = [stats.descriptor(len(self.layer_names))]
        self.handle = MODULES.add(self)


class DlaDevice:
    def __init__(self, index: int) -> None:
        if not 0 <= index < DEVICE_COUNT:
            raise InvalidDeviceError(f"device {index} does not exist (there are "
                                     f"{DEVICE_COUNT})")
        self.index = index
        self.lock = threading.Lock()
        self._idle = threading.Condition(self.lock)
        self._inflight = 0
        self._draining = 0  # threads waiting for _inflight to reach 0: the only ones to wake
        self._destroyed = False
        self.registrations: dict[int, Registration] = {}
        self.module: DlaModule | None = None
        self._loaded_once = False
        self._timeout_ms = DEFAULT_TIMEOUT_MS
        self.last_fault: BaseException | None = None
        # Validated tasks by their records' contents, while nothing they depend on changed:
        # this device's registrations, module and timeout (``_generation``) and the memory
        # map (``MEMORY.generation``). A program submits the same few tasks each frame;
        # validating one costs more than running a small module.
        self._generation = 0
        self._planned: dict[tuple[RawTask, ...], tuple[int, int, list[TaskPlan]]] = {}
        self._ready: _Ready | None = None  # the last submission to a stream, ready to run
        self.handle = DEVICES.add(self)

    @property
    def timeout_ms(self) -> int:
        return self._timeout_ms

    def _changed(self) -> None:
        """Something a validated task depends on changed (the caller holds ``lock``)."""
        self._generation += 1
        self._planned = {}
        self._ready = None

    def _check_alive(self) -> None:
        if self._destroyed:
            raise InvalidDeviceError(f"device handle {self.handle:#x} was destroyed")

    # -- memory ----------------------------------------------------------------------
    def register(self, ptr: Any, size: int, flags: int) -> int:
        """Register [ptr, ptr + size): ``ptr`` is an address in memory pydla knows, or a
        writable numpy array (pydla's extension: its memory becomes known)."""
        self._check_alive()
        if flags not in (0, READ_ONLY, TASK_STATISTICS):
            raise InvalidParamError(f"mem_register flags must be 0, READ_ONLY_PERM or "
                                    f"TASK_STATISTICS, not {flags}")
        if isinstance(ptr, np.ndarray):
            addr = as_bytes(ptr, writable=True).ctypes.data
            MEMORY.track(ptr, HOST)
        else:
            addr = operator.index(ptr)
        if addr == 0:
            raise InvalidAddressError("cannot register NULL")
        if addr % REGISTER_ALIGNMENT:
            raise InvalidAddressError(f"{addr:#x} is not {REGISTER_ALIGNMENT}-byte aligned")
        if size <= 0:
            raise InvalidAddressError(f"cannot register {size} bytes")
        region = MEMORY.find(addr, size, TENSOR_KINDS)
        view = as_bytes(region.buffer())[addr - region.start:addr - region.start + size]
        with self.lock:
            self._check_alive()
            for r in self.registrations.values():
                if r.ptr < addr + size and addr < r.ptr + r.size:
                    raise MemoryRegisteredError(f"[{addr:#x}, {addr + size:#x}) overlaps "
                                                f"memory registered at {r.ptr:#x}")
            self.registrations[addr] = Registration(addr, size, flags, view, region)
            self._changed()
        return addr

    def unregister(self, ptr: int) -> None:
        with self.lock:
            self._check_alive()
            if self.registrations.pop(ptr, None) is None:
                raise InvalidAddressError(f"{ptr:#x} is not registered with device "
                                          f"{self.handle:#x}")
            self._changed()

    def buffer_for(self, ptr: int, desc: TensorDescriptor, role: str) -> np.ndarray:
        """The registered view a task uses for one tensor, after the strict checks."""
        with self.lock:
            reg = self.registrations.get(ptr)
        where = f"{role} tensor {desc.name!r} at {ptr:#x}"
        if reg is None:
            raise InvalidAddressError(f"{where} is not registered with device {self.handle:#x}")
        if not MEMORY.alive(reg.region):
            raise InvalidAddressError(f"{where}: its memory was freed")
        if reg.size < desc.size:
            raise InvalidParamError(f"{where}: {reg.size} bytes registered, the descriptor "
                                    f"needs {desc.size}")
        if (role == "statistics") != bool(reg.flags & TASK_STATISTICS):
            raise InvalidParamError(f"{where}: task statistics buffers, and only they, are "
                                    "registered with TASK_STATISTICS")
        if role != "input" and reg.flags & READ_ONLY:
            raise InvalidParamError(f"{where} is registered read-only")
        return reg.view[:desc.size]

    # -- modules -----------------------------------------------------------------------
    def load(self, data: bytes, flags: int) -> DlaModule:
        if flags not in (0, ENABLE_FAULT_DIAGNOSTICS):
            raise InvalidParamError(f"module load flags must be 0 or 1, not {flags}")
        with self.lock:
            self._check_alive()
            if self.module is not None or self._loaded_once:
                raise UnsupportedOperationError(
                    f"device handle {self.handle:#x} already loaded a module; cuDLA allows "
                    "one module per device handle, loaded once")
            self.module = DlaModule(self, self._open_module(data), flags)
            self._loaded_once = True
            self._changed()
            return self.module

    def _open_module(self, data: bytes) -> LoadedModule:
        """Validate and bind a loadable for this device (other devices bind other backends)."""
        return LoadedModule(data)

    def unload(self, module: DlaModule, flags: int) -> None:
        if flags != 0:
            raise InvalidParamError(f"module_unload flags must be 0, not {flags}")
        with self.lock:
            self._drain()  # a queued task still uses the module
            if self.module is not module:
                raise InvalidDeviceError(f"module handle {module.handle:#x} is not loaded")
            self.module = None
            self._changed()
            MODULES.remove(module.handle)

    # -- tasks -------------------------------------------------------------------------
    def submit(self, raws: Sequence[RawTask], stream: int, flags: int) -> None:
        ready = self._ready
        if ready is not None and ready.raws is raws and ready.stream == stream and not flags \
                and ready.generation == self._generation and ready.memory == MEMORY.generation:
            # the last submission again: read_tasks gave back the same tasks (records and
            # pointer lists unchanged) and nothing their validation depends on changed
            self._start(ready.queue, ready.plans, ready.run)
            return
        generation, memory = self._generation, MEMORY.generation
        self._check_alive()
        if flags:
            if flags & ~(NOOP | SKIP_LOCK_ACQUIRE | DIAGNOSTICS_TASK):
                raise InvalidParamError(f"unknown submission flags {flags:#x}")
            if flags & DIAGNOSTICS_TASK:
                raise UnsupportedOperationError("diagnostics tasks need NVIDIA's fault-"
                                                "diagnostics loadable, which the CPU device "
                                                "does not have")
        plans = self._plans(raws)
        queue = get_stream(stream)  # an unknown stream fails before anything is queued
        if flags & NOOP:
            return
        run = partial(self._run_plans, plans)
        if queue is None:  # the legacy stream: the task has finished when submit returns
            self._start(None, plans, run)
            return
        if not flags:
            self._ready = _Ready(raws, stream, generation, memory, queue, plans, run)
        self._start(queue, plans, run)

    def _start(self, queue: Stream | None, plans: list[TaskPlan], run: Op) -> None:
        """Count the validated tasks in flight and run them on ``queue`` (None: the legacy
        stream)."""
        short = True
        with self.lock:
            # Validation ran without the lock: a destroy_device or module_unload from another
            # thread may have finished since. Counted in flight, the task holds them off.
            self._check_alive()
            for plan in plans:
                if plan.module is not self.module:
                    raise InvalidParamError(f"the task's module was unloaded from device "
                                            f"{self.handle:#x} while it was submitted")
                short = short and is_short(plan.module.loaded)
            self._inflight += 1
        if queue is None:
            drain_blocking_streams()
            run()
            return
        try:
            queue.enqueue(run, inline=short)
        except BaseException:
            self._done()
            raise

    def _run_plans(self, plans: list[TaskPlan]) -> None:
        """Run a submission's tasks in order (counted in flight by ``submit``); run_plan's
        bookkeeping, once for them all."""
        try:
            for plan in plans:
                execute(plan)
            self.last_fault = None
        except BaseException as e:
            self.last_fault = e
            raise
        finally:
            self._done()

    def _plans(self, raws: Sequence[RawTask]) -> list[TaskPlan]:
        key = tuple(raws)
        generation, memory = self._generation, MEMORY.generation
        hit = self._planned.get(key)
        if hit is not None and hit[0] == generation and hit[1] == memory:
            return hit[2]
        plans = [plan_task(self, raw) for raw in raws]
        with self.lock:
            if self._generation == generation:  # else a change raced the validation
                if len(self._planned) >= 16:
                    self._planned = {}
                self._planned[key] = (generation, memory, plans)
        return plans

    def _done(self) -> None:
        with self.lock:
            self._inflight -= 1
            if self._draining and not self._inflight:
                self._idle.notify_all()

    def _drain(self) -> None:
        """Wait for the tasks in flight (the caller holds ``lock``)."""
        self._draining += 1
        try:
            while self._inflight:
                self._idle.wait()
        finally:
            self._draining -= 1

    def run_plan(self, plan: TaskPlan) -> None:
        try:
            execute(plan)
        except BaseException as e:
            self.last_fault = e
            raise
        self.last_fault = None

    def set_timeout(self, ms: int) -> None:
        self._check_alive()
        if not 0 < ms <= MAX_TIMEOUT_MS:
            raise InvalidParamError(f"the task timeout must be 1 … {MAX_TIMEOUT_MS} ms, not {ms}")
        with self.lock:
            self._timeout_ms = ms
            self._changed()

    def destroy(self) -> None:
        with self.lock:
            self._check_alive()
            self._destroyed = True
            self._drain()
            module, self.module = self.module, None
            self.registrations.clear()
            self._changed()
        if module is not None:
            MODULES.remove(module.handle)
        DEVICES.remove(self.handle)


DEVICES: HandleTable[DlaDevice] = HandleTable("device", InvalidDeviceError)
MODULES: HandleTable[DlaModule] = HandleTable("module", InvalidDeviceError)
