"""The per-call caches of the task and copy paths stay exact: a copy's device view is reused
only while the memory map is unchanged (a freed buffer is never written), host buffers are
read afresh at every copy (new contents, another object at the same address), records read
back are re-parsed when their bytes or their pointer lists change, and a destroyed stream
refuses work even when its last task was cached."""

from __future__ import annotations

import gc

import numpy as np
import pytest

from pydla import cudla, driver, runtime
from pydla.backends.cpu.governor import Governor
from pydla.engine.memory import MEMORY
from pydla.engine.task import read_tasks
from tests.runtime.conftest import Setup, check, expected, inputs

H2D = runtime.cudaMemcpyKind.cudaMemcpyHostToDevice
D2H = runtime.cudaMemcpyKind.cudaMemcpyDeviceToHost
DEFAULT = runtime.cudaMemcpyKind.cudaMemcpyDefault
OK = runtime.cudaError_t.cudaSuccess


def _roundtrip(dev_ptr: int, host: np.ndarray, stream: object = 0) -> np.ndarray:
    assert runtime.cudaMemcpyAsync(dev_ptr, host, host.nbytes, H2D, stream)[0] == OK
    back = np.zeros_like(host)
    assert runtime.cudaMemcpyAsync(back, dev_ptr, host.nbytes, D2H, stream)[0] == OK
    assert runtime.cudaStreamSynchronize(stream)[0] == OK
    return back


def test_changed_host_contents_are_copied_fresh() -> None:
    ptr = check(runtime.cudaMalloc(64))
    try:
        host = np.arange(16, dtype=np.float32)
        np.testing.assert_array_equal(_roundtrip(ptr, host), host)
        host *= 3  # same object, same address, new contents
        np.testing.assert_array_equal(_roundtrip(ptr, host), host)
    finally:
        check(runtime.cudaFree(ptr))


def test_another_host_object_at_the_same_address_is_read_as_itself() -> None:
    ptr = check(runtime.cudaMalloc(64))
    try:
        base = np.zeros(32, np.float32)
        first = base[:16]
        first[:] = 1
        np.testing.assert_array_equal(_roundtrip(ptr, first), first)
        second = base[:16].view(np.int32)  # a new object over the same bytes
        second[:] = 7
        np.testing.assert_array_equal(_roundtrip(ptr, second), second)
        # a smaller buffer at that address is refused, not read past its end
        err = runtime.cudaMemcpy(ptr, base[:4], 64, H2D)[0]
        assert err == runtime.cudaError_t.cudaErrorInvalidValue
    finally:
        check(runtime.cudaFree(ptr))


def test_a_freed_device_buffer_is_refused_after_cached_copies() -> None:
    ptr = check(runtime.cudaMalloc(64))
    host = np.ones(16, np.float32)
    for _ in range(3):  # the device view is cached now
        _roundtrip(ptr, host)
    check(runtime.cudaFree(ptr))
    assert runtime.cudaMemcpy(ptr, host, 64, H2D)[0] == runtime.cudaError_t.cudaErrorInvalidValue
    assert runtime.cudaMemcpy(host, ptr, 64, D2H)[0] == runtime.cudaError_t.cudaErrorInvalidValue


def test_a_registered_host_array_that_died_is_refused(setup: Setup) -> None:
    # registered by address, copied through, then released by its owner
    raw = np.zeros(128, np.uint8)
    skip = (-raw.ctypes.data) % 32  # mem_register wants 32-byte alignment
    arr = raw[skip:skip + 64]
    del raw  # the view keeps it: the array dies with ``arr``
    addr = cudla.mem_register(setup.dev, arr, 64, 0)
    host = np.full(64, 5, np.uint8)
    for _ in range(3):
        assert runtime.cudaMemcpy(addr, host, 64, DEFAULT)[0] == OK
    np.testing.assert_array_equal(arr, host)
    cudla.mem_unregister(setup.dev, addr)
    del arr
    gc.collect()
    assert runtime.cudaMemcpy(addr, host, 64, DEFAULT)[0] == \
        runtime.cudaError_t.cudaErrorInvalidValue


def test_a_destroyed_stream_refuses_a_cached_task(setup: Setup) -> None:
    task = setup.task()
    check(driver.cuInit(0))
    stream = check(driver.cuStreamCreate(0))
    a, b = inputs(5)
    setup.write_inputs([a, b])
    for _ in range(3):
        setup.submit(task, stream=int(stream))
    check(driver.cuStreamSynchronize(stream))
    for got, want in zip(setup.read_outputs(), expected(a, b)):
        np.testing.assert_allclose(got.view(np.float32).reshape(want.shape), want, rtol=1e-6)
    check(driver.cuStreamDestroy(stream))
    with pytest.raises(cudla.CudlaError):
        setup.submit(task, stream=int(stream))


def test_records_are_read_again_when_they_change(setup: Setup) -> None:
    task = setup.task()
    gc.collect()  # records of earlier tests dying meanwhile would change the memory map
    gc.disable()
    try:
        first = read_tasks(int(task), 1)
        assert read_tasks(int(task), 1) is first  # unchanged: the same tasks
        task.wait_events = 0  # rewritten with the same value: still the same bytes
        assert read_tasks(int(task), 1) is first
    finally:
        gc.enable()
    task.output_tensor = list(reversed(setup.out_ptrs))  # a new pointer list
    swapped = read_tasks(int(task), 1)
    assert swapped[0].outputs == tuple(reversed(setup.out_ptrs))
    outs = task.output_tensor  # the list's memory rewritten in place
    outs[0] = setup.out_ptrs[0]
    outs[1] = setup.out_ptrs[1]
    assert read_tasks(int(task), 1)[0].outputs == tuple(setup.out_ptrs)
    generation = MEMORY.generation
    other = check(runtime.cudaMalloc(64))  # any change of the memory map reads again
    check(runtime.cudaFree(other))
    assert MEMORY.generation != generation
    again = read_tasks(int(task), 1)
    assert again == read_tasks(int(task), 1) and again[0].outputs == tuple(setup.out_ptrs)


def test_a_released_task_record_is_refused() -> None:
    task = cudla.Task()
    address = int(task)
    read_tasks(address, 1)
    del task
    gc.collect()
    with pytest.raises(Exception) as info:
        read_tasks(address, 1)
    assert "InvalidAddress" in type(info.value).__name__


def test_the_typical_run_time_is_known_from_the_third_run_and_across_switches() -> None:
    # is_short reads it at every submission: None would hand a short task to the stream's
    # worker thread (a wake-up costs more than the task)
    now = [0]
    gov = Governor(2, clock=lambda: now[0])
    seen = []
    for _ in range(200):
        count = gov.begin()
        now[0] += 10_000  # runs back to back: no idle gap
        gov.end(9_000 if count == 2 else 6_000)  # a busy neighbour: one thread is faster
        seen.append(gov.typical_ns())
    assert gov.switches >= 1 and gov.threads == 1
    assert seen[:2] == [None, None] and all(t is not None for t in seen[2:])
    assert seen[-1] == 6_000
