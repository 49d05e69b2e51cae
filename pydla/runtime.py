"""``cuda.bindings.runtime`` for the CPU device: the subset cuDLA programs use.

Calls return tuples whose first element is a ``cudaError_t`` (``err, ptr =
cudaMalloc(n)``); a failed call returns None for its values. Device memory is 64-byte
aligned host memory owned by pydla; ``cudaMemcpyAsync`` takes such addresses, or numpy
arrays (any contiguous buffer) on the host side. Streams are ``driver.CUstream`` objects,
as in cuda-bindings 13, shared with ``pydla.driver`` and ``pydla.cudla.submit_task``.
"""

from __future__ import annotations

from enum import IntEnum
from operator import index
from typing import Any

from pydla.driver import CUevent, CUstream
from pydla.engine import faults, hostcuda
from pydla.engine.device import DEVICE_COUNT

cudaStream_t = CUstream  # CUDA's names
cudaEvent_t = CUevent

cudaStreamDefault = 0
cudaStreamNonBlocking = 1
cudaEventDefault = 0
cudaEventBlockingSync = 1
cudaEventDisableTiming = 2
cudaEventInterprocess = 4


class cudaError_t(IntEnum):
    cudaSuccess = 0
    cudaErrorInvalidValue = 1
    cudaErrorMemoryAllocation = 2
    cudaErrorInitializationError = 3
    cudaErrorInvalidHostPointer = 16
    cudaErrorInvalidDevicePointer = 17
    cudaErrorInvalidMemcpyDirection = 21
    cudaErrorNoDevice = 100
    cudaErrorInvalidDevice = 101
    cudaErrorInvalidResourceHandle = 400
    cudaErrorIllegalState = 401
    cudaErrorNotReady = 600
    cudaErrorIllegalAddress = 700
    cudaErrorLaunchTimeout = 702
    cudaErrorContextIsDestroyed = 709
    cudaErrorLaunchFailure = 719
    cudaErrorNotPermitted = 800
    cudaErrorNotSupported = 801
    cudaErrorExternalDevice = 911
    cudaErrorUnknown = 999


class cudaMemcpyKind(IntEnum):
    cudaMemcpyHostToHost = hostcuda.HOST_TO_HOST
    cudaMemcpyHostToDevice = hostcuda.HOST_TO_DEVICE
    cudaMemcpyDeviceToHost = hostcuda.DEVICE_TO_HOST
    cudaMemcpyDeviceToDevice = hostcuda.DEVICE_TO_DEVICE
    cudaMemcpyDefault = hostcuda.DEFAULT


_E = cudaError_t
_ERROR_OF = hostcuda.first_match((
    (faults.InvalidResourceError, _E.cudaErrorInvalidResourceHandle),
    (faults.MemcpyDirectionError, _E.cudaErrorInvalidMemcpyDirection),
    (faults.InvalidDeviceError, _E.cudaErrorInvalidDevice),
    (faults.NotReadyError, _E.cudaErrorNotReady),
    (faults.InvalidAddressError, _E.cudaErrorInvalidValue),
    (faults.InvalidParamError, _E.cudaErrorInvalidValue),
    (MemoryError, _E.cudaErrorMemoryAllocation),
    (faults.TaskTimeoutError, _E.cudaErrorLaunchTimeout),
), _E.cudaErrorLaunchFailure)  # anything else came from work on a stream


def _api(values: int = 0) -> Any:
    return hostcuda.cuda_api(_ERROR_OF, _E.cudaSuccess, values)


@_api(values=1)
def cudaGetDeviceCount() -> int:
    return DEVICE_COUNT


@_api()
def cudaSetDevice(device: int) -> None:
    if not 0 <= index(device) < DEVICE_COUNT:
        raise faults.InvalidDeviceError(f"device {device} does not exist")


@_api(values=1)
def cudaGetDevice() -> int:
    return 0


@_api()
def cudaDeviceSynchronize() -> None:
    hostcuda.device_synchronize()


@_api(values=1)
def cudaMalloc(size: int) -> int:
    return hostcuda.malloc(index(size))


@_api()
def cudaFree(devPtr: Any) -> None:
    hostcuda.free(hostcuda.handle_of(devPtr))


@_api()
def cudaMemcpy(dst: Any, src: Any, count: int, kind: int) -> None:
    hostcuda.memcpy(dst, src, index(count), index(kind), 0)


@_api()
def cudaMemcpyAsync(dst: Any, src: Any, count: int, kind: int, stream: Any) -> None:
    hostcuda.memcpy(dst, src, index(count), index(kind), hostcuda.handle_of(stream))


@_api()
def cudaMemset(devPtr: Any, value: int, count: int) -> None:
    hostcuda.memset(devPtr, index(value), index(count), 0)


@_api()
def cudaMemsetAsync(devPtr: Any, value: int, count: int, stream: Any) -> None:
    hostcuda.memset(devPtr, index(value), index(count), hostcuda.handle_of(stream))


@_api(values=1)
def cudaStreamCreate() -> CUstream:
    return CUstream(hostcuda.stream_create(cudaStreamDefault))


@_api(values=1)
def cudaStreamCreateWithFlags(flags: int) -> CUstream:
    return CUstream(hostcuda.stream_create(index(flags)))


@_api()
def cudaStreamDestroy(stream: Any) -> None:
    hostcuda.stream_destroy(stream)


@_api()
def cudaStreamSynchronize(stream: Any) -> None:
    hostcuda.stream_synchronize(stream)


@_api()
def cudaStreamQuery(stream: Any) -> None:
    hostcuda.stream_query(stream)


@_api()
def cudaStreamWaitEvent(stream: Any, event: Any, flags: int = 0) -> None:
    hostcuda.stream_wait_event(stream, event)


@_api(values=1)
def cudaEventCreate() -> CUevent:
    return CUevent(hostcuda.event_create(cudaEventDefault))


@_api(values=1)
def cudaEventCreateWithFlags(flags: int) -> CUevent:
    return CUevent(hostcuda.event_create(index(flags)))


@_api()
def cudaEventRecord(event: Any, stream: Any) -> None:
    hostcuda.event_record(event, stream)


@_api()
def cudaEventSynchronize(event: Any) -> None:
    hostcuda.event_synchronize(event)


@_api()
def cudaEventQuery(event: Any) -> None:
    hostcuda.event_query(event)


@_api()
def cudaEventDestroy(event: Any) -> None:
    hostcuda.event_destroy(event)


@_api(values=1)
def cudaEventElapsedTime(start: Any, end: Any) -> float:
    return hostcuda.event_elapsed_ms(start, end)


_TEXT = {0: "no error", 1: "invalid argument", 2: "out of memory", 3: "initialization error",
         16: "invalid host pointer", 17: "invalid device pointer",
         21: "invalid copy direction for memcpy", 100: "no CUDA-capable device is detected",
         101: "invalid device ordinal", 400: "invalid resource handle",
         401: "the operation cannot be performed in the present state",
         600: "device not ready", 700: "an illegal memory access was encountered",
         702: "the launch timed out and was terminated", 709: "context is destroyed",
         719: "unspecified launch failure", 800: "operation not permitted",
         801: "operation not supported", 911: "external device error", 999: "unknown error"}


def cudaGetErrorName(error: int) -> tuple[cudaError_t, bytes]:
    try:
        return _E.cudaSuccess, cudaError_t(error).name.encode()
    except ValueError:
        return _E.cudaSuccess, b"unrecognized error code"


def cudaGetErrorString(error: int) -> tuple[cudaError_t, bytes]:
    return _E.cudaSuccess, _TEXT.get(index(error), "unrecognized error code").encode()
