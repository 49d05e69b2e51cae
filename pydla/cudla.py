"""``cuda.bindings.cudla`` for the CPU device: same names, values, arguments and errors.

A program written against NVIDIA's module runs here after changing its import
(``from pydla import cudla``), and back. Handles and pointers are plain ints. Every call
raises ``CudlaError`` on failure (except ``get_last_error``); pydla's typed errors become
``Status`` codes in one table (``pydla.engine.status``). Where upstream is undefined pydla
is strict; ``docs/cudla.md`` lists each difference.
"""

from __future__ import annotations

import operator
from typing import Any

from pydla.engine.device import DEVICE_COUNT, DEVICE_VERSION, DEVICES, MODULES, DlaDevice
from pydla.engine.enums import (
    AccessPermissionFlags,
    DataCategory,
    DataFormat,
    DataType,
    DevAttributeType,
    FenceType,
    Mode,
    ModuleAttributeType,
    ModuleLoadFlags,
    PixelFormat,
    PixelMapping,
    ScratchMemoryConfig,
    Status,
    SubmissionFlags,
)
from pydla.engine.faults import (
    InvalidAttributeError,
    InvalidParamError,
    UnsupportedOperationError,
)
from pydla.engine.memory import MEMORY, TENSOR_KINDS
from pydla.engine.records import (
    DevAttribute,
    ExternalMemoryHandleDesc,
    ExternalSemaphoreHandleDesc,
    Fence,
    ModuleAttribute,
    ModuleTensorDescriptor,
    SignalEvents,
    Task,
    WaitEvents,
    descriptor_record,
    dev_attribute_dtype,
    external_memory_handle_desc_dtype,
    external_semaphore_handle_desc_dtype,
    fence_dtype,
    module_attribute_dtype,
    module_tensor_descriptor_dtype,
    signal_events_dtype,
    task_dtype,
    wait_events_dtype,
)
from pydla.engine.status import status_of
from pydla.engine.task import read_tasks
from pydla.errors import PydlaError
from pydla.formats import FormatError

CUDLA_VERSION = 1_005_000  # the cuDLA API level pydla implements (1.5.0)

__all__ = [
    "AccessPermissionFlags", "CudlaError", "DataCategory", "DataFormat", "DataType",
    "DevAttribute", "DevAttributeType", "ExternalMemoryHandleDesc",
    "ExternalSemaphoreHandleDesc", "Fence", "FenceType", "Mode", "ModuleAttribute",
    "ModuleAttributeType", "ModuleLoadFlags", "ModuleTensorDescriptor", "PixelFormat",
    "PixelMapping", "ScratchMemoryConfig", "SignalEvents", "Status", "SubmissionFlags", "Task",
    "WaitEvents", "check_status", "create_device", "destroy_device", "dev_attribute_dtype",
    "device_get_attribute", "device_get_count", "external_memory_handle_desc_dtype",
    "external_semaphore_handle_desc_dtype", "fence_dtype", "get_last_error", "get_version",
    "mem_register", "mem_unregister", "module_attribute_dtype", "module_get_attributes",
    "module_load_from_memory", "module_tensor_descriptor_dtype", "module_unload",
    "set_task_timeout_in_ms", "signal_events_dtype", "submit_task", "task_dtype",
    "use_backend", "wait_events_dtype",
]


class CudlaError(Exception):
    """A cuDLA call failed; ``status`` is the ``Status`` value, ``str`` is e.g.
    ``ErrorInvalidDevice (8)``. The pydla error that caused it is ``__cause__``."""

    def __init__(self, status: int) -> None:
        self.status = status
        try:
            text = f"{Status(status).name} ({int(status)})"
        except ValueError:
            text = f"Unknown status ({int(status)})"
        super().__init__(text)

    def __reduce__(self) -> tuple[type, tuple[int]]:
        return (type(self), (self.status,))


def check_status(status: int) -> None:
    if status != 0:
        raise CudlaError(status)


class _Funnel:
    """Turn pydla's typed errors into CudlaError; anything else (TypeError for a non-integer
    argument, as upstream's Cython conversions raise) passes unchanged. A class, not a
    contextlib generator: it wraps every call, and a generator costs a microsecond."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: object) -> bool:
        if isinstance(error, _FUNNELED):
            raise CudlaError(status_of(error)) from error
        return False


_FUNNELED = (PydlaError, FormatError, MemoryError)  # the errors that become a Status


_FUNNEL = _Funnel()


def _funnel() -> _Funnel:
    return _FUNNEL


def _device(handle: Any) -> DlaDevice:
    return DEVICES.get(operator.index(handle))


def get_version() -> int:
    return CUDLA_VERSION


def device_get_count() -> int:
    return DEVICE_COUNT


_BACKEND = "cpu"


def use_backend(name: str) -> None:
    """pydla extension: where devices created from now on run their modules: ``"cpu"`` (the
    default) or ``"cuda"`` (an NVIDIA GPU, ``pip install pydla[cuda]``: registered memory is
    device memory, tasks join the caller's CUDA stream). See docs/cuda.md."""
    global _BACKEND
    if name not in ("cpu", "cuda"):
        raise ValueError(f"unknown backend {name!r}; pydla has 'cpu' and 'cuda'")
    _BACKEND = name


def create_device(device: int, flags: int) -> int:
    with _funnel():
        device, flags = operator.index(device), operator.index(flags)
        if flags & Mode.STANDALONE:
            raise UnsupportedOperationError("standalone mode needs NvSci, which pydla lacks")
        if flags:
            raise InvalidParamError(f"create_device flags must be Mode.CUDA_DLA, not {flags}")
        if _BACKEND == "cuda":  # imported only when chosen: the CPU path never loads CUDA
            from pydla.backends.cuda.device import CudaDlaDevice

            return CudaDlaDevice(device).handle
        return DlaDevice(device).handle


def destroy_device(dev_handle: int) -> None:
    with _funnel():
        _device(dev_handle).destroy()


def mem_register(dev_handle: int, ptr: int, size: int, flags: int) -> int:
    """Register ``size`` bytes at ``ptr`` (device memory from ``runtime.cudaMalloc``; pydla
    also takes a writable numpy array); returns the pointer tasks name."""
    with _funnel():
        dev = _device(dev_handle)
        return dev.register(ptr, operator.index(size), operator.index(flags))


def mem_unregister(dev_handle: int, dev_ptr: int) -> None:
    with _funnel():
        _device(dev_handle).unregister(operator.index(dev_ptr))


def module_load_from_memory(dev_handle: int, p_module: Any, module_size: int,
                            flags: int) -> int:
    with _funnel():
        dev = _device(dev_handle)
        module_size, flags = operator.index(module_size), operator.index(flags)
        return dev.load(_module_bytes(p_module, module_size), flags).handle


def _module_bytes(p_module: Any, size: int) -> bytes:
    """A private copy of the loadable (the device keeps its own, as cuDLA does)."""
    if isinstance(p_module, int):
        if size <= 0:
            raise InvalidParamError(f"module_size must be positive, not {size}")
        return MEMORY.view(p_module, size, TENSOR_KINDS).tobytes()
    try:
        view = memoryview(p_module)
    except TypeError:
        raise InvalidParamError("p_module must be an int address or a 1-D contiguous buffer, "
                                f"not {type(p_module).__name__}") from None
    if view.ndim != 1 or not view.contiguous:
        raise InvalidParamError("p_module must be a 1-D contiguous buffer")
    if view.nbytes != size:
        raise InvalidParamError(f"p_module holds {view.nbytes} bytes, module_size says {size}")
    return view.tobytes()


_COUNTS = {ModuleAttributeType.NUM_INPUT_TENSORS: "input_descriptors",
           ModuleAttributeType.NUM_OUTPUT_TENSORS: "output_descriptors",
           ModuleAttributeType.NUM_OUTPUT_TASK_STATISTICS: "stats_descriptors"}
_DESCRIPTORS = {ModuleAttributeType.INPUT_TENSOR_DESCRIPTORS: "input_descriptors",
                ModuleAttributeType.OUTPUT_TENSOR_DESCRIPTORS: "output_descriptors",
                ModuleAttributeType.OUTPUT_TASK_STATISTICS_DESCRIPTORS: "stats_descriptors"}


def module_get_attributes(h_module: int, attr_type: int) -> Any:
    """An int for the NUM_* kinds; a list of read-only ModuleTensorDescriptor copies for the
    *_DESCRIPTORS kinds."""
    attr_type = operator.index(attr_type)
    if attr_type not in _COUNTS and attr_type not in _DESCRIPTORS:
        raise ValueError(f"Unknown attribute type: {attr_type}")
    with _funnel():
        module = MODULES.get(operator.index(h_module))
        if attr_type in _COUNTS:
            return len(getattr(module, _COUNTS[ModuleAttributeType(attr_type)]))
        descs = getattr(module, _DESCRIPTORS[ModuleAttributeType(attr_type)])
        return [descriptor_record(d) for d in descs]


def module_unload(h_module: int, flags: int) -> None:
    with _funnel():
        module = MODULES.get(operator.index(h_module))
        module.device.unload(module, operator.index(flags))


def submit_task(dev_handle: int, ptr_to_tasks: int, num_tasks: int, stream: int,
                flags: int) -> None:
    """Run ``num_tasks`` Task records starting at address ``ptr_to_tasks`` (``int(task)``),
    in order, on ``stream``: 0 runs them before returning, another stream handle queues
    them behind that stream's work."""
    # _funnel() as a try statement, free when nothing fails: a program calls this per frame
    try:
        dev = DEVICES.get(operator.index(dev_handle))
        ptr, count = operator.index(ptr_to_tasks), operator.index(num_tasks)
        stream, flags = _stream_handle(stream), operator.index(flags)
        dev.submit(read_tasks(ptr, count), stream, flags)
    except _FUNNELED as e:
        raise CudlaError(status_of(e)) from e


def _stream_handle(stream: Any) -> int:
    """An int handle, or any stream object with ``__cuda_stream__`` (PyTorch, CuPy,
    cuda.core)."""
    if type(stream) is int:  # the common case: no attribute lookup that fails
        return stream
    proto = getattr(stream, "__cuda_stream__", None)
    if proto is not None:
        return int((proto() if callable(proto) else proto)[1])
    return operator.index(stream)


def device_get_attribute(dev_handle: int, attrib: int) -> DevAttribute:
    with _funnel():
        _device(dev_handle)._check_alive()
        attr = DevAttribute()
        attrib = operator.index(attrib)
        if attrib == DevAttributeType.UNIFIED_ADDRESSING:
            attr.unified_addressing_supported = 1  # device memory is host memory
        elif attrib == DevAttributeType.DEVICE_VERSION:
            attr.device_version = DEVICE_VERSION
        else:
            raise InvalidAttributeError(f"unknown device attribute {attrib}")
        return attr


def get_last_error(dev_handle: int) -> int:
    """Status of the most recent task on the handle (ErrorInvalidDevice for a bad handle);
    never raises. Success does not mean the task has finished."""
    try:
        dev = DEVICES.get(operator.index(dev_handle))
    except Exception:  # never raises, as upstream
        return int(Status.ErrorInvalidDevice)
    return int(status_of(dev.last_fault))


def set_task_timeout_in_ms(dev_handle: int, timeout: int) -> None:
    with _funnel():
        _device(dev_handle).set_timeout(operator.index(timeout))
