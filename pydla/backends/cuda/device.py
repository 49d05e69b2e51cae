"""The cuDLA device on an NVIDIA GPU (hybrid mode for real: tasks join the caller's stream).

Same handles, checks and errors as the CPU device (``pydla.engine.device``); what differs:
registered memory is device memory (``cudaMalloc``/``cuMemAlloc``, CuPy, PyTorch: any
address inside a live device allocation), modules run on the CUDA backend, and
``submit_task`` enqueues each task on the given CUDA stream and returns at once, with no
host synchronization. Task statistics and the task timeout are measured on the GPU
(``pydla.backends.cuda.instrument``): a task's statistics land in its ``TASK_STATISTICS``
buffers (device memory) on its stream; a task that ran past the timeout is reported by
``get_last_error`` once it has finished, and in its statistics' status.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydla.backends.cuda.backend import CudaBackend, CudaProgram
from pydla.backends.cuda.driver import CudaError, device_count, device_range
from pydla.engine.device import (
    DIAGNOSTICS_TASK,
    MODULES,
    NOOP,
    READ_ONLY,
    REGISTER_ALIGNMENT,
    SKIP_LOCK_ACQUIRE,
    TASK_STATISTICS,
    DlaDevice,
    DlaModule,
)
from pydla.engine.faults import (
    InvalidAddressError,
    InvalidDeviceError,
    InvalidParamError,
    MemoryRegisteredError,
    TaskTimeoutError,
    UnsupportedOperationError,
)
from pydla.engine.module import LoadedModule
from pydla.engine.task import RawTask, plan_task
from pydla.formats import TensorDescriptor


@dataclass(frozen=True)
class DeviceRegistration:
    ptr: int
    size: int
    flags: int


def device_address(ptr: Any) -> int:
    """An address from an int, a CuPy/PyTorch array (``__cuda_array_interface__``) or a
    cuda-bindings pointer object."""
    interface = getattr(ptr, "__cuda_array_interface__", None)
    if interface is not None:
        return int(interface["data"][0])
    return operator.index(ptr) if isinstance(ptr, int) else int(ptr)


class CudaDlaDevice(DlaDevice):
    """``create_device`` after ``pydla.cudla.use_backend("cuda")``; index = CUDA ordinal."""

    def __init__(self, index: int) -> None:
        count = device_count()
        if not 0 <= index < count:
            raise InvalidDeviceError(f"GPU {index} does not exist (there are {count})")
        super().__init__(0)
        self.index = index

    # -- memory ----------------------------------------------------------------------------
    def register(self, ptr: Any, size: int, flags: int) -> int:
        self._check_alive()
        if flags not in (0, READ_ONLY, TASK_STATISTICS):
            raise InvalidParamError(f"mem_register flags must be 0, READ_ONLY_PERM or "
                                    f"TASK_STATISTICS, not {flags}")
        addr = device_address(ptr)
        if addr == 0 or addr % REGISTER_ALIGNMENT:
            raise InvalidAddressError(f"{addr:#x} is not {REGISTER_ALIGNMENT}-byte aligned")
        if size <= 0:
            raise InvalidAddressError(f"cannot register {size} bytes")
        self._check_range(addr, size, f"[{addr:#x}, {addr + size:#x})")
        with self.lock:
            self._check_alive()
            for r in self.registrations.values():
                if r.ptr < addr + size and addr < r.ptr + r.size:
                    raise MemoryRegisteredError(f"[{addr:#x}, {addr + size:#x}) overlaps "
                                                f"memory registered at {r.ptr:#x}")
            self.registrations[addr] = DeviceRegistration(addr, size, flags)  # type: ignore[assignment]
        return addr

    @staticmethod
    def _check_range(addr: int, size: int, what: str) -> None:
        try:
            base, total = device_range(addr)
        except CudaError as e:
            raise InvalidAddressError(f"{what} is not live device memory: {e}") from None
        if addr + size > base + total:
            raise InvalidAddressError(f"{what} runs past the end of its allocation "
                                      f"[{base:#x}, {base + total:#x})")

    def buffer_for(self, ptr: int, desc: TensorDescriptor, role: str) -> int:  # type: ignore[override]
        """The device address a task uses for one tensor, after the strict checks."""
        with self.lock:
            reg = self.registrations.get(ptr)
        where = f"{role} tensor {desc.name!r} at {ptr:#x}"
        if reg is None:
            raise InvalidAddressError(f"{where} is not registered with device {self.handle:#x}")
        if reg.size < desc.size:
            raise InvalidParamError(f"{where}: {reg.size} bytes registered, the descriptor "
                                    f"needs {desc.size}")
        if role != "input" and reg.flags & READ_ONLY:
            raise InvalidParamError(f"{where} is registered read-only")
        if (role == "statistics") != bool(reg.flags & TASK_STATISTICS):
            raise InvalidParamError(f"{where}: task statistics buffers, and only they, are "
                                    "registered with TASK_STATISTICS")
        self._check_range(ptr, desc.size, where)  # freed since it was registered?
        return ptr

    # -- modules ---------------------------------------------------------------------------
    def _open_module(self, data: bytes) -> LoadedModule:
        loaded = LoadedModule(data, CudaBackend(device=self.index, instrument=True))
        for io in (*loaded.program.inputs, *loaded.program.outputs):
            t = loaded.program.tensors[io.tensor]
            if io.format != "chw" or io.dtype is not t.dtype:
                raise UnsupportedOperationError(
                    f"tensor {t.name!r}: the CUDA device takes linear I/O in the tensor's "
                    f"own type (chw, {t.dtype.name.lower()}), not {io.format}/"
                    f"{io.dtype.name.lower()}")
        return loaded

    def unload(self, module: DlaModule, flags: int) -> None:
        if flags != 0:
            raise InvalidParamError(f"module_unload flags must be 0, not {flags}")
        with self.lock:
            if self.module is not module:
                raise InvalidDeviceError(f"module handle {module.handle:#x} is not loaded")
            self.module = None
            MODULES.remove(module.handle)
        _bound(module).close()  # waits for its queued tasks first

    # -- tasks -----------------------------------------------------------------------------
    def submit(self, raws: Sequence[RawTask], stream: int, flags: int) -> None:
        self._check_alive()
        if flags & ~(NOOP | SKIP_LOCK_ACQUIRE | DIAGNOSTICS_TASK):
            raise InvalidParamError(f"unknown submission flags {flags:#x}")
        if flags & DIAGNOSTICS_TASK:
            raise UnsupportedOperationError("diagnostics tasks need NVIDIA's fault-diagnostics "
                                            "loadable, which pydla does not have")
        # Validated afresh at every submission, not cached as the CPU device does: a
        # registered allocation can be freed by its owner (CuPy, PyTorch) unseen by pydla.
        plans = [plan_task(self, raw) for raw in raws]
        if flags & NOOP:
            return
        for plan in plans:
            try:
                _bound(plan.module).enqueue(stream, plan.inputs, plan.outputs,  # type: ignore[arg-type]
                                            plan.statistics, plan.timeout_ms)
            except BaseException as e:
                self.last_fault = e
                raise
        self.last_fault = None

    # -- faults ----------------------------------------------------------------------------
    @property  # type: ignore[override]
    def last_fault(self) -> BaseException | None:
        """The last submission's failure, or a task found (after it ran) past its timeout."""
        module = self.module
        if module is not None:
            instrument = _bound(module).instrument
            found = instrument.take_fault() if instrument is not None else None
            if found is not None:
                self._last_fault = TaskTimeoutError(
                    f"a task on module {module.handle:#x} ran {found[1]:.3f} ms, past the "
                    f"{self.timeout_ms} ms task timeout")
        return self._last_fault

    @last_fault.setter
    def last_fault(self, value: BaseException | None) -> None:
        self._last_fault = value

    def destroy(self) -> None:
        with self.lock:
            self._check_alive()
            self._destroyed = True
            module, self.module = self.module, None
            self.registrations.clear()
        if module is not None:
            MODULES.remove(module.handle)
            _bound(module).close()
        from pydla.engine.device import DEVICES

        DEVICES.remove(self.handle)


def _bound(module: DlaModule) -> CudaProgram:
    return module.loaded.bound  # type: ignore[return-value]
