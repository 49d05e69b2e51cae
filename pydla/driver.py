"""``cuda.bindings.driver`` for the CPU device: the subset cuDLA programs use.

Calls return tuples whose first element is a ``CUresult`` (``err, stream =
cuStreamCreate(0)``); a failed call returns None for its values. Streams and events are the
same objects ``pydla.runtime`` and ``pydla.cudla.submit_task`` use. As in CUDA, every call
but ``cuInit`` and the error-name lookups needs ``cuInit(0)`` first.
"""

from __future__ import annotations

from enum import IntEnum
from operator import index
from typing import Any

from pydla.engine import faults, hostcuda
from pydla.engine.device import DEVICE_COUNT


class CUresult(IntEnum):
    CUDA_SUCCESS = 0
    CUDA_ERROR_INVALID_VALUE = 1
    CUDA_ERROR_OUT_OF_MEMORY = 2
    CUDA_ERROR_NOT_INITIALIZED = 3
    CUDA_ERROR_DEINITIALIZED = 4
    CUDA_ERROR_NO_DEVICE = 100
    CUDA_ERROR_INVALID_DEVICE = 101
    CUDA_ERROR_INVALID_CONTEXT = 201
    CUDA_ERROR_INVALID_HANDLE = 400
    CUDA_ERROR_NOT_FOUND = 500
    CUDA_ERROR_NOT_READY = 600
    CUDA_ERROR_ILLEGAL_ADDRESS = 700
    CUDA_ERROR_LAUNCH_TIMEOUT = 702
    CUDA_ERROR_LAUNCH_FAILED = 719
    CUDA_ERROR_NOT_PERMITTED = 800
    CUDA_ERROR_NOT_SUPPORTED = 801
    CUDA_ERROR_EXTERNAL_DEVICE = 911
    CUDA_ERROR_UNKNOWN = 999


class CUstream_flags(IntEnum):  # CUDA's name
    CU_STREAM_DEFAULT = 0
    CU_STREAM_NON_BLOCKING = 1


class CUevent_flags(IntEnum):
    CU_EVENT_DEFAULT = 0
    CU_EVENT_BLOCKING_SYNC = 1
    CU_EVENT_DISABLE_TIMING = 2
    CU_EVENT_INTERPROCESS = 4


class CUstream(hostcuda.Handle):
    pass


class CUevent(hostcuda.Handle):
    pass


class CUdeviceptr(hostcuda.Handle):
    pass


class CUdevice(hostcuda.Handle):
    def __repr__(self) -> str:
        return f"<CUdevice {self._value}>"


_ERROR_OF = hostcuda.first_match((
    (faults.NotInitializedError, CUresult.CUDA_ERROR_NOT_INITIALIZED),
    (faults.InvalidResourceError, CUresult.CUDA_ERROR_INVALID_HANDLE),
    (faults.InvalidDeviceError, CUresult.CUDA_ERROR_INVALID_DEVICE),
    (faults.NotReadyError, CUresult.CUDA_ERROR_NOT_READY),
    (faults.InvalidAddressError, CUresult.CUDA_ERROR_INVALID_VALUE),
    (faults.InvalidParamError, CUresult.CUDA_ERROR_INVALID_VALUE),
    (faults.MemcpyDirectionError, CUresult.CUDA_ERROR_INVALID_VALUE),
    (MemoryError, CUresult.CUDA_ERROR_OUT_OF_MEMORY),
    (faults.TaskTimeoutError, CUresult.CUDA_ERROR_LAUNCH_TIMEOUT),
), CUresult.CUDA_ERROR_LAUNCH_FAILED)  # anything else came from work on a stream


def _api(values: int = 0) -> Any:
    return hostcuda.cuda_api(_ERROR_OF, CUresult.CUDA_SUCCESS, values)


_initialized = False


def _need_init() -> None:
    if not _initialized:
        raise faults.NotInitializedError("call cuInit(0) first")


@_api()
def cuInit(Flags: int) -> None:
    global _initialized
    if index(Flags) != 0:
        raise faults.InvalidParamError("cuInit flags must be 0")
    _initialized = True


@_api(values=1)
def cuDriverGetVersion() -> int:
    return 13000


@_api(values=1)
def cuDeviceGetCount() -> int:
    _need_init()
    return DEVICE_COUNT


@_api(values=1)
def cuDeviceGet(ordinal: int) -> CUdevice:
    _need_init()
    if not 0 <= index(ordinal) < DEVICE_COUNT:
        raise faults.InvalidDeviceError(f"device {ordinal} does not exist")
    return CUdevice(ordinal)


@_api(values=1)
def cuStreamCreate(Flags: int) -> CUstream:
    _need_init()
    return CUstream(hostcuda.stream_create(index(Flags)))


@_api()
def cuStreamDestroy(hStream: Any) -> None:
    _need_init()
    hostcuda.stream_destroy(hStream)


@_api()
def cuStreamSynchronize(hStream: Any) -> None:
    _need_init()
    hostcuda.stream_synchronize(hStream)


@_api()
def cuStreamQuery(hStream: Any) -> None:
    _need_init()
    hostcuda.stream_query(hStream)


@_api()
def cuStreamWaitEvent(hStream: Any, hEvent: Any, Flags: int) -> None:
    _need_init()
    hostcuda.stream_wait_event(hStream, hEvent)


@_api(values=1)
def cuEventCreate(Flags: int) -> CUevent:
    _need_init()
    return CUevent(hostcuda.event_create(index(Flags)))


@_api()
def cuEventRecord(hEvent: Any, hStream: Any) -> None:
    _need_init()
    hostcuda.event_record(hEvent, hStream)


@_api()
def cuEventSynchronize(hEvent: Any) -> None:
    _need_init()
    hostcuda.event_synchronize(hEvent)


@_api()
def cuEventQuery(hEvent: Any) -> None:
    _need_init()
    hostcuda.event_query(hEvent)


@_api()
def cuEventDestroy(hEvent: Any) -> None:
    _need_init()
    hostcuda.event_destroy(hEvent)


@_api(values=1)
def cuEventElapsedTime(hStart: Any, hEnd: Any) -> float:
    _need_init()
    return hostcuda.event_elapsed_ms(hStart, hEnd)


@_api(values=1)
def cuMemAlloc(bytesize: int) -> CUdeviceptr:
    _need_init()
    if index(bytesize) == 0:
        raise faults.InvalidParamError("cuMemAlloc of 0 bytes")
    return CUdeviceptr(hostcuda.malloc(index(bytesize)))


@_api()
def cuMemFree(dptr: Any) -> None:
    _need_init()
    hostcuda.free(hostcuda.handle_of(dptr))


@_api()
def cuMemcpyHtoDAsync(dstDevice: Any, srcHost: Any, ByteCount: int,
                      hStream: Any) -> None:
    _need_init()
    hostcuda.memcpy(dstDevice, srcHost, index(ByteCount), hostcuda.HOST_TO_DEVICE,
                    hostcuda.handle_of(hStream))


@_api()
def cuMemcpyDtoHAsync(dstHost: Any, srcDevice: Any, ByteCount: int,
                      hStream: Any) -> None:
    _need_init()
    hostcuda.memcpy(dstHost, srcDevice, index(ByteCount), hostcuda.DEVICE_TO_HOST,
                    hostcuda.handle_of(hStream))


@_api()
def cuMemcpyDtoDAsync(dstDevice: Any, srcDevice: Any, ByteCount: int,
                      hStream: Any) -> None:
    _need_init()
    hostcuda.memcpy(dstDevice, srcDevice, index(ByteCount), hostcuda.DEVICE_TO_DEVICE,
                    hostcuda.handle_of(hStream))


@_api()
def cuMemsetD8Async(dstDevice: Any, uc: int, N: int, hStream: Any) -> None:
    _need_init()
    hostcuda.memset(dstDevice, index(uc), index(N), hostcuda.handle_of(hStream))


def cuGetErrorName(error: int) -> tuple[CUresult, bytes | None]:
    try:
        return CUresult.CUDA_SUCCESS, CUresult(error).name.encode()
    except ValueError:
        return CUresult.CUDA_ERROR_INVALID_VALUE, None


_TEXT = {0: "no error", 1: "invalid argument", 2: "out of memory", 3: "initialization error",
         4: "driver shutting down", 100: "no CUDA-capable device is detected",
         101: "invalid device ordinal", 201: "invalid device context",
         400: "invalid resource handle", 500: "named symbol not found",
         600: "device not ready", 700: "an illegal memory access was encountered",
         702: "the launch timed out and was terminated", 719: "unspecified launch failure",
         800: "operation not permitted", 801: "operation not supported",
         911: "external device error", 999: "unknown error"}


def cuGetErrorString(error: int) -> tuple[CUresult, bytes | None]:
    if index(error) not in _TEXT:
        return CUresult.CUDA_ERROR_INVALID_VALUE, None
    return CUresult.CUDA_SUCCESS, _TEXT[index(error)].encode()
