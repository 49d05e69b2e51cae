"""The CUDA driver calls the backend makes, through one error funnel (cuda-bindings).

Every call returns a ``CUresult`` first; ``check`` turns a failure into ``CudaError`` with
the call's name and the driver's explanation. Pointers and streams are plain ints.
"""

from __future__ import annotations

from typing import Any

from cuda.bindings import driver

from pydla.errors import PydlaError


class CudaError(PydlaError):
    """A CUDA driver call failed."""


def check(result: Any, what: str) -> Any:
    """Unpack ``(CUresult, *values)``; raise ``CudaError`` naming ``what`` on failure."""
    if isinstance(result, tuple):
        err, values = result[0], result[1:]
    else:
        err, values = result, ()
    if int(err) != 0:
        _, text = driver.cuGetErrorString(err)
        detail = text.decode() if isinstance(text, bytes) else str(text)
        raise CudaError(f"{what} failed: {getattr(err, 'name', err)} ({detail})")
    if not values:
        return None
    return values[0] if len(values) == 1 else values


def stream_handle(stream: Any) -> int:
    """A raw ``CUstream`` from an int, a cuda-bindings stream, or any object with
    ``__cuda_stream__`` (CuPy, PyTorch, cuda.core)."""
    if hasattr(stream, "__cuda_stream__"):
        proto = stream.__cuda_stream__
        value = proto() if callable(proto) else proto
        return int(value[1])
    if hasattr(stream, "ptr"):  # cupy.cuda.Stream
        return int(stream.ptr)
    return int(stream)


def compute_capability(ordinal: int = 0) -> tuple[int, int]:
    check(driver.cuInit(0), "cuInit")
    dev = check(driver.cuDeviceGet(ordinal), "cuDeviceGet")
    attr = driver.CUdevice_attribute
    major = check(driver.cuDeviceGetAttribute(
        attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev), "cuDeviceGetAttribute")
    minor = check(driver.cuDeviceGetAttribute(
        attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev), "cuDeviceGetAttribute")
    return int(major), int(minor)


def device_count() -> int:
    if int(driver.cuInit(0)[0]) != 0:
        return 0
    return int(check(driver.cuDeviceGetCount(), "cuDeviceGetCount"))


def arch_name(ordinal: int = 0) -> str:
    major, minor = compute_capability(ordinal)
    return f"sm_{major}{minor}"


def device_range(ptr: int) -> tuple[int, int]:
    """(base, size) of the device allocation holding ``ptr``; CudaError if ``ptr`` is not
    device memory of this context."""
    mem_type = check(driver.cuPointerGetAttribute(
        driver.CUpointer_attribute.CU_POINTER_ATTRIBUTE_MEMORY_TYPE, ptr),
        f"cuPointerGetAttribute({ptr:#x})")
    if int(mem_type) != int(driver.CUmemorytype.CU_MEMORYTYPE_DEVICE):
        raise CudaError(f"{ptr:#x} is not device memory (memory type {int(mem_type)})")
    base, size = check(driver.cuMemGetAddressRange(ptr), f"cuMemGetAddressRange({ptr:#x})")
    return int(base), int(size)


def memcpy_async(dst: int, src: int, nbytes: int, stream: int) -> None:
    check(driver.cuMemcpyAsync(dst, src, nbytes, stream), "cuMemcpyAsync")


def memcpy_htod_async(dst: int, host_ptr: int, nbytes: int, stream: int) -> None:
    check(driver.cuMemcpyHtoDAsync(dst, host_ptr, nbytes, stream), "cuMemcpyHtoDAsync")


def memcpy_dtoh_async(host_ptr: int, src: int, nbytes: int, stream: int) -> None:
    check(driver.cuMemcpyDtoHAsync(host_ptr, src, nbytes, stream), "cuMemcpyDtoHAsync")


def stream_synchronize(stream: int) -> None:
    check(driver.cuStreamSynchronize(stream), "cuStreamSynchronize")


class Event:
    """A CUDA event without timing: orders work across streams."""

    def __init__(self) -> None:
        self.handle = check(driver.cuEventCreate(
            driver.CUevent_flags.CU_EVENT_DISABLE_TIMING), "cuEventCreate")

    def record(self, stream: int) -> None:
        check(driver.cuEventRecord(self.handle, stream), "cuEventRecord")

    def wait_on(self, stream: int) -> None:
        """Make ``stream`` wait for the work recorded before this event."""
        check(driver.cuStreamWaitEvent(stream, self.handle, 0), "cuStreamWaitEvent")

    def synchronize(self) -> None:
        check(driver.cuEventSynchronize(self.handle), "cuEventSynchronize")

    def close(self) -> None:
        if self.handle is not None:
            driver.cuEventDestroy(self.handle)
            self.handle = None


class GraphExec:
    """Work captured from a stream through the driver API, replayable on any stream.

    Capturing through the driver (not CuPy's own capture) lets cuDNN record its kernels:
    CuPy refuses library calls during its capture."""

    def __init__(self, stream: int, record: Any) -> None:
        mode = driver.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_RELAXED
        check(driver.cuStreamBeginCapture(stream, mode), "cuStreamBeginCapture")
        try:
            record()
        except BaseException:
            driver.cuStreamEndCapture(stream)
            raise
        self.graph = check(driver.cuStreamEndCapture(stream), "cuStreamEndCapture")
        self.exec = check(driver.cuGraphInstantiate(self.graph, 0), "cuGraphInstantiate")
        result = driver.cuGraphGetNodes(self.graph, 0)  # (status, [], count)
        self.node_count = int(result[-1]) if int(result[0]) == 0 else -1

    def launch(self, stream: int) -> None:
        check(driver.cuGraphLaunch(self.exec, stream), "cuGraphLaunch")

    def close(self) -> None:
        if self.exec is not None:
            driver.cuGraphExecDestroy(self.exec)
            driver.cuGraphDestroy(self.graph)
            self.exec = None
