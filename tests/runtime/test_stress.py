"""Thread safety: 4 threads × 2 streams × 200 tasks on one device and one module give the
same bytes as serial runs (cuDLA path and Pythonic path)."""

import threading

import numpy as np

from pydla import api, cudla, runtime
from tests.runtime.conftest import check, close_setup, inputs, open_setup

THREADS, STREAMS_PER_THREAD, TASKS = 4, 2, 200
K = runtime.cudaMemcpyKind


def _seed(t: int, k: int, i: int) -> int:
    return (t * STREAMS_PER_THREAD + k) * TASKS + i


def _serial(add_mul: bytes) -> dict[int, list[np.ndarray]]:
    with api.Device() as dev:
        m = dev.load(add_mul)
        return {seed: m.run(inputs(seed))
                for seed in range(THREADS * STREAMS_PER_THREAD * TASKS)}


def test_cudla_threads_and_streams_match_serial(add_mul):
    want = _serial(add_mul)
    s = open_setup(add_mul)  # one device handle, one module, shared by every thread
    results: dict[int, list[np.ndarray]] = {}
    errors: list[BaseException] = []

    def worker(t: int) -> None:
        try:
            lanes = []
            for _ in range(STREAMS_PER_THREAD):  # each stream has its own registered buffers
                stream = check(runtime.cudaStreamCreate())
                bufs = [check(runtime.cudaMalloc(d.size_)) for d in s.in_descs + s.out_descs]
                regs = [cudla.mem_register(s.dev, p, d.size_, 0)
                        for p, d in zip(bufs, s.in_descs + s.out_descs)]
                task = cudla.Task()
                task.module_handle = s.module
                task.input_tensor, task.output_tensor = regs[:2], regs[2:]
                lanes.append((stream, bufs, regs, task))
            for i in range(TASKS):
                for k, (stream, bufs, _, task) in enumerate(lanes):
                    seed = _seed(t, k, i)
                    for ptr, x in zip(bufs[:2], inputs(seed)):
                        check(runtime.cudaMemcpyAsync(ptr, x, x.nbytes,
                                                      K.cudaMemcpyHostToDevice, stream))
                    cudla.submit_task(s.dev, int(task), 1, int(stream), 0)
                    outs = [np.empty((1, 4, 2, 3), np.float32) for _ in range(2)]
                    for host, ptr in zip(outs, bufs[2:]):
                        check(runtime.cudaMemcpyAsync(host, ptr, host.nbytes,
                                                      K.cudaMemcpyDeviceToHost, stream))
                    results[seed] = outs
            for stream, bufs, regs, _ in lanes:
                check(runtime.cudaStreamSynchronize(stream))
                for r in regs:
                    cudla.mem_unregister(s.dev, r)
                for p in bufs:
                    check(runtime.cudaFree(p))
                check(runtime.cudaStreamDestroy(stream))
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(THREADS)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    close_setup(s)
    assert not errors, errors
    assert results.keys() == want.keys()
    for seed, outs in results.items():
        for got, ref in zip(outs, want[seed]):
            assert np.array_equal(got, ref), seed
    assert cudla.get_last_error(s.dev) == cudla.Status.ErrorInvalidDevice  # closed


def test_pythonic_threads_and_streams_match_serial(add_mul):
    want = _serial(add_mul)
    results: dict[int, list[np.ndarray]] = {}
    with api.Device() as dev:
        m = dev.load(add_mul)

        def worker(t: int) -> None:
            streams = [dev.stream() for _ in range(STREAMS_PER_THREAD)]
            futures = {}
            for i in range(TASKS):
                for k, stream in enumerate(streams):
                    seed = _seed(t, k, i)
                    futures[seed] = m.submit(inputs(seed), stream=stream)
            for seed, f in futures.items():
                results[seed] = f.result(timeout=60)

        threads = [threading.Thread(target=worker, args=(t,)) for t in range(THREADS)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
    assert results.keys() == want.keys()
    for seed, outs in results.items():
        for got, ref in zip(outs, want[seed]):
            assert np.array_equal(got, ref), seed
