"""pydla.runtime and pydla.driver: cuda-bindings' conventions on the CPU device."""

import threading
import time

import numpy as np
import pytest

from pydla import driver, runtime
from tests.runtime.conftest import check

E, R = runtime.cudaError_t, driver.CUresult
K = runtime.cudaMemcpyKind


def test_enum_values():
    assert {m.name: m.value for m in K} == {
        "cudaMemcpyHostToHost": 0, "cudaMemcpyHostToDevice": 1, "cudaMemcpyDeviceToHost": 2,
        "cudaMemcpyDeviceToDevice": 3, "cudaMemcpyDefault": 4}
    assert {m.name: m.value for m in driver.CUstream_flags} == {
        "CU_STREAM_DEFAULT": 0, "CU_STREAM_NON_BLOCKING": 1}
    assert {m.name: m.value for m in driver.CUevent_flags} == {
        "CU_EVENT_DEFAULT": 0, "CU_EVENT_BLOCKING_SYNC": 1, "CU_EVENT_DISABLE_TIMING": 2,
        "CU_EVENT_INTERPROCESS": 4}
    pinned = {"cudaSuccess": 0, "cudaErrorInvalidValue": 1, "cudaErrorMemoryAllocation": 2,
              "cudaErrorInvalidMemcpyDirection": 21, "cudaErrorInvalidDevice": 101,
              "cudaErrorInvalidResourceHandle": 400, "cudaErrorNotReady": 600,
              "cudaErrorLaunchTimeout": 702, "cudaErrorLaunchFailure": 719,
              "cudaErrorUnknown": 999}
    assert all(E[k] == v for k, v in pinned.items())
    pinned = {"CUDA_SUCCESS": 0, "CUDA_ERROR_INVALID_VALUE": 1, "CUDA_ERROR_OUT_OF_MEMORY": 2,
              "CUDA_ERROR_NOT_INITIALIZED": 3, "CUDA_ERROR_INVALID_DEVICE": 101,
              "CUDA_ERROR_INVALID_HANDLE": 400, "CUDA_ERROR_NOT_READY": 600,
              "CUDA_ERROR_LAUNCH_TIMEOUT": 702, "CUDA_ERROR_LAUNCH_FAILED": 719,
              "CUDA_ERROR_UNKNOWN": 999}
    assert all(R[k] == v for k, v in pinned.items())
    assert runtime.cudaStreamNonBlocking == 1 and runtime.cudaEventDisableTiming == 2


def test_calls_return_status_tuples():
    assert driver.cuInit(0) == (R.CUDA_SUCCESS,)
    assert runtime.cudaSetDevice(0) == (E.cudaSuccess,)
    assert runtime.cudaGetDeviceCount() == (E.cudaSuccess, 1)
    err, ptr = runtime.cudaMalloc(100)
    assert err is E.cudaSuccess and isinstance(ptr, int) and ptr % 64 == 0
    assert runtime.cudaFree(ptr) == (E.cudaSuccess,)
    assert runtime.cudaMalloc(0) == (E.cudaSuccess, 0) and runtime.cudaFree(0) == (E.cudaSuccess,)
    err, stream = driver.cuStreamCreate(0)
    assert err == 0 and isinstance(stream, driver.CUstream) and int(stream) != 0
    assert repr(stream) == f"<CUstream {int(stream):#x}>"
    assert runtime.cudaStreamCreate()[1].__class__ is runtime.cudaStream_t is driver.CUstream
    err, dptr = driver.cuMemAlloc(64)
    assert isinstance(dptr, driver.CUdeviceptr) and driver.cuMemFree(dptr) == (R.CUDA_SUCCESS,)
    assert driver.cuStreamDestroy(stream) == (R.CUDA_SUCCESS,)
    assert runtime.cudaGetErrorName(E.cudaErrorInvalidValue) == (
        E.cudaSuccess, b"cudaErrorInvalidValue")
    assert runtime.cudaGetErrorString(E.cudaErrorInvalidValue) == (E.cudaSuccess,
                                                                   b"invalid argument")
    assert driver.cuGetErrorName(R.CUDA_ERROR_NOT_READY) == (R.CUDA_SUCCESS,
                                                             b"CUDA_ERROR_NOT_READY")
    assert driver.cuGetErrorString(12345) == (R.CUDA_ERROR_INVALID_VALUE, None)


def test_copies_fill_and_directions():
    n = 256
    a = check(runtime.cudaMalloc(n))
    b = check(runtime.cudaMalloc(n))
    src = np.arange(n, dtype=np.uint8)
    check(runtime.cudaMemcpy(a, src, n, K.cudaMemcpyHostToDevice))
    check(runtime.cudaMemcpy(b, a, n, K.cudaMemcpyDeviceToDevice))
    out = np.zeros(n // 4, np.float32)  # any contiguous host array of enough bytes
    check(runtime.cudaMemcpy(out, b, n, K.cudaMemcpyDefault))
    assert (out.view(np.uint8) == src).all()
    check(runtime.cudaMemset(b, 7, 16))
    host = bytearray(n)
    check(runtime.cudaMemcpy(host, b, n, K.cudaMemcpyDeviceToHost))
    assert host[:16] == bytes([7] * 16) and host[16] == 16
    check(runtime.cudaMemcpy(out, src, 8, K.cudaMemcpyHostToHost))
    check(runtime.cudaFree(a))
    check(runtime.cudaFree(b))
    assert runtime.cudaFree(a) == (E.cudaErrorInvalidValue,)  # twice


def test_host_sources_are_staged_when_issued():
    ptr = check(runtime.cudaMalloc(64))
    stream = check(runtime.cudaStreamCreate())
    gate = threading.Event()
    check(runtime.cudaStreamWaitEvent(stream, _blocked_event(gate), 0))
    src = np.full(64, 1, np.uint8)
    check(runtime.cudaMemcpyAsync(ptr, src, 64, K.cudaMemcpyHostToDevice, stream))
    src[:] = 2  # after the call: not seen by the copy
    gate.set()
    out = np.zeros(64, np.uint8)
    check(runtime.cudaMemcpyAsync(out, ptr, 64, K.cudaMemcpyDeviceToHost, stream))
    check(runtime.cudaStreamSynchronize(stream))
    assert (out == 1).all()
    check(runtime.cudaStreamDestroy(stream))
    check(runtime.cudaFree(ptr))


def _blocked_event(gate: threading.Event):
    """An event recorded on a helper stream that stays busy until ``gate`` is set."""
    helper = check(runtime.cudaStreamCreate())
    from pydla.engine.stream import STREAMS

    STREAMS.get(int(helper)).enqueue(gate.wait)
    event = check(runtime.cudaEventCreate())
    check(runtime.cudaEventRecord(event, helper))
    return event


def test_events_order_streams_and_time_them():
    gate = threading.Event()
    blocked = _blocked_event(gate)
    assert runtime.cudaEventQuery(blocked) == (E.cudaErrorNotReady,)
    s = check(runtime.cudaStreamCreate())
    start, end = check(runtime.cudaEventCreate()), check(runtime.cudaEventCreate())
    check(runtime.cudaEventRecord(start, s))
    check(runtime.cudaStreamWaitEvent(s, blocked, 0))
    check(runtime.cudaEventRecord(end, s))
    time.sleep(0.02)
    assert runtime.cudaStreamQuery(s) == (E.cudaErrorNotReady,)
    assert runtime.cudaEventElapsedTime(start, end)[0] == E.cudaErrorNotReady
    gate.set()
    check(runtime.cudaEventSynchronize(end))
    err, ms = runtime.cudaEventElapsedTime(start, end)
    assert err == 0 and ms >= 15
    check(runtime.cudaDeviceSynchronize())
    no_timing = check(runtime.cudaEventCreateWithFlags(runtime.cudaEventDisableTiming))
    check(runtime.cudaEventRecord(no_timing, s))
    check(runtime.cudaStreamSynchronize(s))
    assert runtime.cudaEventElapsedTime(start, no_timing) == (
        E.cudaErrorInvalidResourceHandle, None)


def test_the_caller_overlaps_with_a_stream():
    s = check(runtime.cudaStreamCreate())
    from pydla.engine.stream import STREAMS

    STREAMS.get(int(s)).enqueue(lambda: time.sleep(0.1))
    t0 = time.perf_counter()
    assert runtime.cudaStreamQuery(s) == (E.cudaErrorNotReady,)
    assert time.perf_counter() - t0 < 0.05
    check(runtime.cudaStreamSynchronize(s))
    assert time.perf_counter() - t0 >= 0.09
    check(runtime.cudaStreamDestroy(s))


@pytest.mark.parametrize("non_blocking", [False, True])
def test_legacy_stream_waits_for_blocking_streams(non_blocking):
    flags = runtime.cudaStreamNonBlocking if non_blocking else runtime.cudaStreamDefault
    s = check(runtime.cudaStreamCreateWithFlags(flags))
    gate = threading.Event()
    from pydla.engine.stream import STREAMS

    STREAMS.get(int(s)).enqueue(lambda: gate.wait(0.3))
    t0 = time.perf_counter()
    check(runtime.cudaStreamSynchronize(0))  # the legacy stream
    waited = time.perf_counter() - t0
    assert (waited < 0.2) if non_blocking else (waited >= 0.25)
    gate.set()
    check(runtime.cudaStreamDestroy(s))


def test_driver_copies_and_streams():
    check(driver.cuInit(0))
    dptr = check(driver.cuMemAlloc(32))
    stream = check(driver.cuStreamCreate(driver.CUstream_flags.CU_STREAM_NON_BLOCKING))
    src = np.arange(32, dtype=np.uint8)
    check(driver.cuMemcpyHtoDAsync(dptr, src, 32, stream))
    check(driver.cuMemsetD8Async(dptr, 9, 4, stream))
    out = np.zeros(32, np.uint8)
    check(driver.cuMemcpyDtoHAsync(out, dptr, 32, stream))
    check(driver.cuStreamSynchronize(stream))
    assert out[:4].tolist() == [9] * 4 and out[4:].tolist() == list(range(4, 32))
    assert driver.cuMemcpyDtoHAsync(out, src, 8, stream) == (R.CUDA_ERROR_INVALID_VALUE,)
    ev = check(driver.cuEventCreate(0))
    check(driver.cuEventRecord(ev, stream))
    check(driver.cuEventSynchronize(ev))
    assert driver.cuEventQuery(ev) == (R.CUDA_SUCCESS,)
    check(driver.cuEventDestroy(ev))
    check(driver.cuStreamDestroy(stream))
    check(driver.cuMemFree(dptr))
    assert driver.cuDeviceGet(0)[1] == driver.CUdevice(0)
