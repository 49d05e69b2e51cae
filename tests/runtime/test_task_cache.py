"""A validated task is reused only while nothing it depends on changed: the record's
bytes and pointer lists, the device's registrations, module and timeout, and the memory
map (a freed buffer is never written through a cached view)."""

from __future__ import annotations

import ctypes
import threading

import numpy as np
import pytest

from pydla import api, cudla, runtime
from pydla.engine.device import DEVICES
from tests.runtime.conftest import Setup, check, expected, inputs


def _planned(s: Setup) -> int:
    return len(DEVICES.get(s.dev)._planned)


def test_a_repeated_task_is_validated_once(setup: Setup) -> None:
    task = setup.task()
    a, b = inputs(1)
    setup.write_inputs([a, b])
    setup.submit(task)
    assert _planned(setup) == 1
    device = DEVICES.get(setup.dev)
    plans = device._plans(list(device._planned)[0])
    setup.submit(task)
    assert device._plans(list(device._planned)[0]) is plans  # the same validated task
    for got, want in zip(setup.read_outputs(), expected(a, b)):
        np.testing.assert_allclose(got.view(np.float32).reshape(want.shape), want, rtol=1e-6)


def test_a_changed_output_list_is_honoured(setup: Setup) -> None:
    task = setup.task()
    a, b = inputs(2)
    setup.write_inputs([a, b])
    setup.submit(task)
    # a second output buffer: the record now points at another list
    d = setup.out_descs[0]
    other = check(runtime.cudaMalloc(d.size_))
    cudla.mem_register(setup.dev, other, d.size_, 0)
    try:
        task.output_tensor = [other, setup.out_ptrs[1]]
        setup.submit(task)
        host = np.zeros(d.size_, np.uint8)
        check(runtime.cudaMemcpy(host, other, d.size_,
                                 runtime.cudaMemcpyKind.cudaMemcpyDeviceToHost))
        want = expected(a, b)[0]
        np.testing.assert_allclose(host.view(np.float32).reshape(want.shape), want, rtol=1e-6)
    finally:
        cudla.mem_unregister(setup.dev, other)
        check(runtime.cudaFree(other))


def test_a_list_rewritten_in_place_is_honoured(setup: Setup) -> None:
    # the pointer list's memory itself rewritten (the record's bytes stay the same)
    task = setup.task()
    setup.submit(task)
    outs = (ctypes.c_uint64 * 2).from_address(task._outputTensor)
    outs[0] = 0x1000  # not registered
    with pytest.raises(cudla.CudlaError):
        setup.submit(task)


def test_unregistered_and_freed_buffers_are_refused_after_a_cached_run(setup: Setup) -> None:
    task = setup.task()
    setup.submit(task)
    cudla.mem_unregister(setup.dev, setup.out_ptrs[0])
    with pytest.raises(cudla.CudlaError):
        setup.submit(task)
    cudla.mem_register(setup.dev, setup.out_ptrs[0], setup.out_descs[0].size_, 0)
    setup.submit(task)
    check(runtime.cudaFree(setup.in_ptrs[0]))  # freed while still registered
    try:
        with pytest.raises(cudla.CudlaError):
            setup.submit(task)
    finally:  # the fixture unregisters and frees it again: give it a live buffer back
        cudla.mem_unregister(setup.dev, setup.in_ptrs[0])
        setup.in_ptrs[0] = check(runtime.cudaMalloc(setup.in_descs[0].size_))
        cudla.mem_register(setup.dev, setup.in_ptrs[0], setup.in_descs[0].size_, 0)


def test_a_new_timeout_reaches_the_next_task(setup: Setup) -> None:
    task = setup.task()
    setup.submit(task)
    cudla.set_task_timeout_in_ms(setup.dev, 1234)
    setup.submit(task)
    device = DEVICES.get(setup.dev)
    [(_, _, plans)] = device._planned.values()
    assert plans[0].timeout_ms == 1234


def test_api_run_inline_and_queued_give_the_same_outputs(add_mul: bytes) -> None:
    a, b = inputs(3)
    want = expected(a, b)
    with api.Device() as dev, dev.load(add_mul) as module:
        for _ in range(4):  # timed: short from the fourth run on, and run inline
            got = module.run([a, b])
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-6)
        # queued behind blocking work on the default stream: the run waits for it
        gate = threading.Event()
        dev.default_stream._enqueue(lambda: gate.wait(5) and None)
        result: list[list[np.ndarray]] = []
        t = threading.Thread(target=lambda: result.append(module.run([a, b])))
        t.start()
        t.join(0.2)
        assert t.is_alive()  # behind the gate
        gate.set()
        t.join(5)
        for g, w in zip(result[0], want):
            np.testing.assert_allclose(g, w, rtol=1e-6)
        future = module.submit([a, b])
        for g, w in zip(future.result(), want):
            np.testing.assert_allclose(g, w, rtol=1e-6)
