"""Fault injection through pydla.cudla: a task timing out, an exception inside a kernel, a
stream destroyed with work pending, a module unloaded with tasks queued, a device destroyed
from another thread. Each ends with the status docs/cudla.md documents, the device usable
(or cleanly gone), and every other task's output intact."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import numpy as np
import pytest

from pydla import cudla, runtime
from pydla.engine.device import MODULES
from pydla.engine.stream import run_on
from pydla.errors import KernelError
from tests.runtime.conftest import check, close_setup, expected, inputs, open_setup

S = cudla.Status
E = runtime.cudaError_t
K = runtime.cudaMemcpyKind
POISON = np.float32(1234.5)  # a first input element that makes the injected kernel fail


class Lane:
    """A stream with its own registered buffers on a device that has add_mul loaded."""

    def __init__(self, dev: int, module: int, stream: object | None = None) -> None:
        self.dev, self.module = dev, module
        self.stream = stream if stream is not None else check(runtime.cudaStreamCreate())
        kinds = cudla.ModuleAttributeType
        descs = (cudla.module_get_attributes(module, kinds.INPUT_TENSOR_DESCRIPTORS)
                 + cudla.module_get_attributes(module, kinds.OUTPUT_TENSOR_DESCRIPTORS))
        self.ptrs = [check(runtime.cudaMalloc(d.size_)) for d in descs]
        self.regs = [cudla.mem_register(dev, p, d.size_, 0) for p, d in zip(self.ptrs, descs)]
        self.task = cudla.Task()
        self.task.module_handle = module
        self.task.input_tensor, self.task.output_tensor = self.regs[:2], self.regs[2:]

    def run(self, xs: list[np.ndarray]) -> list[np.ndarray]:
        """Queue copy-in, the task and copy-out; the returned arrays fill when it has run."""
        for ptr, x in zip(self.ptrs[:2], xs):
            check(runtime.cudaMemcpyAsync(ptr, x, x.nbytes, K.cudaMemcpyHostToDevice,
                                          self.stream))
        cudla.submit_task(self.dev, int(self.task), 1, int(self.stream), 0)
        outs = [np.zeros((1, 4, 2, 3), np.float32) for _ in range(2)]
        for host, ptr in zip(outs, self.ptrs[2:]):
            check(runtime.cudaMemcpyAsync(host, ptr, host.nbytes, K.cudaMemcpyDeviceToHost,
                                          self.stream))
        return outs

    def sync(self) -> tuple:
        return runtime.cudaStreamSynchronize(self.stream)

    def close(self, device_alive: bool = True) -> None:
        if device_alive:
            for r in self.regs:
                cudla.mem_unregister(self.dev, r)
        for p in self.ptrs:
            check(runtime.cudaFree(p))
        runtime.cudaStreamDestroy(self.stream)  # may already be destroyed by the test


def correct(outs: list[np.ndarray], xs: list[np.ndarray]) -> bool:
    return all(np.array_equal(o, w) for o, w in zip(outs, expected(*xs)))


def gate(stream: object) -> threading.Event:
    """Hold a stream's queue until the returned event is set (work queued behind stays
    pending, deterministically)."""
    opened = threading.Event()
    run_on(int(stream), lambda: opened.wait(30) and None)
    return opened


@pytest.fixture
def device(add_mul: bytes) -> Iterator[tuple[int, int]]:
    dev = cudla.create_device(0, cudla.Mode.CUDA_DLA)
    module = cudla.module_load_from_memory(dev, add_mul, len(add_mul), 0)
    yield dev, module
    try:
        cudla.destroy_device(dev)
    except cudla.CudlaError:
        pass  # the test destroyed it


def inject(module: int, layer: int = 0) -> list[float]:
    """Make one layer of the loaded module raise ZeroDivisionError whenever the task's
    first input starts with POISON; returns the start times of that layer's runs."""
    bound = MODULES.get(module).loaded.bound
    first_input, thunk = bound.input_views[0], bound.thunks[layer]
    starts: list[float] = []

    def faulty() -> None:
        starts.append(time.perf_counter())
        if first_input.flat[0] == POISON:
            raise ZeroDivisionError("injected")
        thunk()

    bound.thunks[layer] = faulty
    return starts


def poisoned(seed: int) -> list[np.ndarray]:
    xs = inputs(seed)
    xs[0].flat[0] = POISON
    return xs


def test_timeout_fails_that_task_only(slow: bytes) -> None:
    s = open_setup(slow)
    try:
        x = np.random.default_rng(3).standard_normal((1, 512, 512)).astype(np.float32)
        s.write_inputs([x])
        cudla.set_task_timeout_in_ms(s.dev, 1_000_000)
        s.submit()
        reference = s.read_outputs()[0]
        for p, d in zip(s.out_ptrs, s.out_descs):
            check(runtime.cudaMemset(p, 0, d.size_))
        stream = check(runtime.cudaStreamCreate())
        cudla.set_task_timeout_in_ms(s.dev, 1)
        s.submit(stream=int(stream))  # times out after its first layer
        cudla.set_task_timeout_in_ms(s.dev, 1_000_000)
        s.submit(stream=int(stream))  # the limit at submission applies: this one completes
        assert runtime.cudaStreamSynchronize(stream) == (E.cudaErrorLaunchTimeout,)
        assert np.array_equal(s.read_outputs()[0], reference)
        assert cudla.get_last_error(s.dev) == S.Success  # the last task succeeded
        check(runtime.cudaStreamDestroy(stream))
    finally:
        close_setup(s)


def test_kernel_exception_fails_only_its_tasks(device: tuple[int, int]) -> None:
    dev, module = device
    inject(module)
    results: dict[tuple[int, int], tuple[list, list, tuple]] = {}
    errors: list[BaseException] = []

    def worker(t: int) -> None:
        try:
            lanes = [Lane(dev, module) for _ in range(2)]
            for i in range(24):
                for k, lane in enumerate(lanes):
                    seed = (t * 2 + k) * 100 + i
                    xs = poisoned(seed) if i % 5 == 2 else inputs(seed)
                    outs = lane.run(xs)
                    results[(seed, i % 5 == 2)] = (xs, outs, lane.sync())
            for lane in lanes:
                lane.close()
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors
    assert len(results) == 4 * 2 * 24
    for (seed, bad), (xs, outs, status) in results.items():
        if bad:
            assert status == (E.cudaErrorLaunchFailure,), seed
        else:
            assert status == (E.cudaSuccess,) and correct(outs, xs), seed
    # On the legacy stream the failure is the call's: a CudlaError naming the layer.
    lane = Lane(dev, module, stream=0)
    with pytest.raises(cudla.CudlaError) as info:
        lane.run(poisoned(1))
    assert info.value.status == S.ErrorUnknown
    assert isinstance(info.value.__cause__, KernelError)
    assert "ZeroDivisionError: injected" in str(info.value.__cause__)
    assert cudla.get_last_error(dev) == S.ErrorUnknown
    xs = inputs(2)
    assert correct(lane.run(xs), xs)  # the device carries on
    assert cudla.get_last_error(dev) == S.Success
    lane.close()


def test_destroyed_stream_finishes_its_work(device: tuple[int, int]) -> None:
    dev, module = device
    inject(module)
    lane = Lane(dev, module)
    opened = gate(lane.stream)
    xs = [poisoned(99) if i == 3 else inputs(i) for i in range(8)]
    outs = [lane.run(x) for x in xs]
    check(runtime.cudaStreamDestroy(lane.stream))  # returns with all of it pending
    assert not any(o[0].any() for o in outs)
    with pytest.raises(cudla.CudlaError) as info:  # the handle is gone at once
        cudla.submit_task(dev, int(lane.task), 1, int(lane.stream), 0)
    assert info.value.status == S.ErrorInvalidParam
    opened.set()
    # the device-wide synchronize waits for the destroyed stream and reports its failure once
    assert runtime.cudaDeviceSynchronize() == (E.cudaErrorLaunchFailure,)
    check(runtime.cudaDeviceSynchronize())
    for i, (x, o) in enumerate(zip(xs, outs)):
        assert i == 3 or correct(o, x), i
    lane.close()


def _blocked_call(call: Callable[[], None]) -> tuple[threading.Thread, list]:
    done: list = []

    def run() -> None:
        try:
            call()
            done.append(None)
        except BaseException as e:  # noqa: BLE001
            done.append(e)

    th = threading.Thread(target=run)
    th.start()
    return th, done


def test_unload_waits_for_queued_tasks(device: tuple[int, int]) -> None:
    dev, module = device
    starts = inject(module)
    lane = Lane(dev, module)
    opened = gate(lane.stream)
    xs = [inputs(i) for i in range(6)]
    outs = [lane.run(x) for x in xs]
    th, done = _blocked_call(lambda: cudla.module_unload(module, 0))
    time.sleep(0.2)
    assert th.is_alive() and not done  # unload waits for the six queued tasks
    opened.set()
    th.join(30)
    unloaded_at = time.perf_counter()
    assert done == [None]
    assert all(correct(o, x) for o, x in zip(outs, xs)) and len(starts) == 6
    assert max(starts) < unloaded_at
    with pytest.raises(cudla.CudlaError) as info:
        lane.run(inputs(0))
    assert info.value.status == S.ErrorInvalidParam  # the task names an unloaded module
    with pytest.raises(cudla.CudlaError) as info:
        cudla.module_get_attributes(module, cudla.ModuleAttributeType.NUM_INPUT_TENSORS)
    assert info.value.status == S.ErrorInvalidDevice
    check(lane.sync())
    lane.close()  # registrations outlive the module; the device handle still works


def test_unload_racing_submissions(device: tuple[int, int]) -> None:
    """Submissions from other threads while the module unloads: each is either refused or
    runs to a correct output before module_unload returns."""
    dev, module = device
    starts = inject(module)
    stop = threading.Event()
    outcomes: list[tuple[list, list | None, object]] = []

    ready = threading.Barrier(4)

    def submitter() -> None:
        lane = Lane(dev, module)
        ready.wait(30)
        seed = 0
        while not stop.is_set():
            xs = inputs(seed)
            seed += 1
            try:
                outs = lane.run(xs)
            except cudla.CudlaError as e:
                outcomes.append((xs, None, e.status))
                continue
            outcomes.append((xs, outs, lane.sync()))
        lane.close()

    threads = [threading.Thread(target=submitter) for _ in range(3)]
    for th in threads:
        th.start()
    ready.wait(30)
    while len(outcomes) < 6:  # every thread is submitting
        time.sleep(0.01)
    cudla.module_unload(module, 0)
    unloaded_at = time.perf_counter()
    time.sleep(0.2)
    stop.set()
    for th in threads:
        th.join(30)
    ran = [(xs, outs) for xs, outs, status in outcomes if outs is not None]
    refused = [status for _, outs, status in outcomes if outs is None]
    assert ran and refused and set(refused) == {S.ErrorInvalidParam}
    assert all(correct(outs, xs) for xs, outs in ran)
    assert max(starts) < unloaded_at  # no task ran on the module once it was unloaded


def test_destroy_device_from_another_thread(add_mul: bytes, device: tuple[int, int]) -> None:
    dev, module = device
    other = open_setup(add_mul)  # another handle keeps working throughout
    other_lane = Lane(other.dev, other.module)
    lane = Lane(dev, module)
    opened = gate(lane.stream)
    xs = [inputs(i) for i in range(5)]
    outs = [lane.run(x) for x in xs]
    th, done = _blocked_call(lambda: cudla.destroy_device(dev))
    time.sleep(0.2)
    assert th.is_alive()  # destroy waits for the handle's queued tasks
    with pytest.raises(cudla.CudlaError) as info:  # but takes no new ones
        lane.run(inputs(0))
    assert info.value.status == S.ErrorInvalidDevice
    ys = [inputs(100 + i) for i in range(5)]
    other_outs = [other_lane.run(y) for y in ys]
    opened.set()
    th.join(30)
    assert done == [None]
    assert all(correct(o, x) for o, x in zip(outs, xs))
    check(other_lane.sync())
    assert all(correct(o, y) for o, y in zip(other_outs, ys))
    assert cudla.get_last_error(dev) == S.ErrorInvalidDevice
    with pytest.raises(cudla.CudlaError) as info:
        cudla.mem_unregister(dev, lane.regs[0])
    assert info.value.status == S.ErrorInvalidDevice
    check(lane.sync())
    lane.close(device_alive=False)
    other_lane.close()
    close_setup(other)
