"""The misuse matrix: every function × bad handle, pointer, size, count and flag gives its
documented status (docs/cudla.md), and nothing ever reads an address pydla does not know."""

from dataclasses import dataclass

import numpy as np
import pytest

from pydla import cudla, driver, runtime
from tests.runtime.conftest import Setup, check, close_setup, open_setup

S = cudla.Status
M = cudla.ModuleAttributeType


@dataclass
class Ctx:
    s: Setup
    loadable: bytes
    dead_dev: int  # a destroyed device handle
    dead_module: int  # an unloaded module handle
    stream: int
    spare: int  # 1 KiB of unregistered device memory
    task: cudla.Task


@pytest.fixture(scope="module")
def ctx(add_mul):
    s = open_setup(add_mul)
    dead = cudla.create_device(0, 0)
    dead_module = cudla.module_load_from_memory(dead, add_mul, len(add_mul), 0)
    cudla.module_unload(dead_module, 0)
    cudla.destroy_device(dead)
    stream = int(check(runtime.cudaStreamCreate()))
    spare = check(runtime.cudaMalloc(1024))
    yield Ctx(s, add_mul, dead, dead_module, stream, spare, s.task())
    check(runtime.cudaFree(spare))
    check(runtime.cudaStreamDestroy(stream))
    close_setup(s)


def _task(c: Ctx, **fields) -> cudla.Task:
    t = c.s.task()
    for k, v in fields.items():
        setattr(t, k, v)
    return t


BAD_HANDLES = [0, 1, -1, 0x1234_5678, 2**64 - 1]
CASES = {
    # create_device
    "create/index 1": (lambda c: cudla.create_device(1, 0), S.ErrorInvalidDevice),
    "create/index -1": (lambda c: cudla.create_device(-1, 0), S.ErrorInvalidDevice),
    "create/index 2**40": (lambda c: cudla.create_device(2**40, 0), S.ErrorInvalidDevice),
    "create/standalone": (lambda c: cudla.create_device(0, cudla.Mode.STANDALONE),
                          S.ErrorUnsupportedOperation),
    "create/standalone, bad index": (lambda c: cudla.create_device(5, 1),
                                     S.ErrorUnsupportedOperation),
    "create/flag 2": (lambda c: cudla.create_device(0, 2), S.ErrorInvalidParam),
    # destroy_device
    "destroy/destroyed": (lambda c: cudla.destroy_device(c.dead_dev), S.ErrorInvalidDevice),
    "destroy/module handle": (lambda c: cudla.destroy_device(c.s.module), S.ErrorInvalidDevice),
    "destroy/stream handle": (lambda c: cudla.destroy_device(c.stream), S.ErrorInvalidDevice),
    # mem_register
    "register/destroyed": (lambda c: cudla.mem_register(c.dead_dev, c.spare, 64, 0),
                           S.ErrorInvalidDevice),
    "register/NULL": (lambda c: cudla.mem_register(c.s.dev, 0, 64, 0), S.ErrorInvalidAddress),
    "register/unaligned": (lambda c: cudla.mem_register(c.s.dev, c.spare + 8, 64, 0),
                           S.ErrorInvalidAddress),
    "register/unknown": (lambda c: cudla.mem_register(c.s.dev, 0x10_0000_0000, 64, 0),
                         S.ErrorInvalidAddress),
    "register/size 0": (lambda c: cudla.mem_register(c.s.dev, c.spare, 0, 0),
                        S.ErrorInvalidAddress),
    "register/size -64": (lambda c: cudla.mem_register(c.s.dev, c.spare, -64, 0),
                          S.ErrorInvalidAddress),
    "register/size past end": (lambda c: cudla.mem_register(c.s.dev, c.spare, 1025, 0),
                               S.ErrorInvalidAddress),
    "register/flag 3": (lambda c: cudla.mem_register(c.s.dev, c.spare, 64, 3),
                        S.ErrorInvalidParam),
    "register/flag 4": (lambda c: cudla.mem_register(c.s.dev, c.spare, 64, 4),
                        S.ErrorInvalidParam),
    "register/twice": (lambda c: cudla.mem_register(c.s.dev, c.s.in_ptrs[0], 64, 0),
                       S.ErrorMemoryRegistered),
    "register/read-only array": (lambda c: cudla.mem_register(c.s.dev, _frozen(), 64, 0),
                                 S.ErrorInvalidParam),
    # mem_unregister
    "unregister/destroyed": (lambda c: cudla.mem_unregister(c.dead_dev, c.s.in_ptrs[0]),
                             S.ErrorInvalidDevice),
    "unregister/NULL": (lambda c: cudla.mem_unregister(c.s.dev, 0), S.ErrorInvalidAddress),
    "unregister/not registered": (lambda c: cudla.mem_unregister(c.s.dev, c.spare),
                                  S.ErrorInvalidAddress),
    "unregister/inside a registration": (
        lambda c: cudla.mem_unregister(c.s.dev, c.s.in_ptrs[0] + 32), S.ErrorInvalidAddress),
    # module_load_from_memory
    "load/destroyed": (lambda c: cudla.module_load_from_memory(c.dead_dev, c.loadable,
                                                               len(c.loadable), 0),
                       S.ErrorInvalidDevice),
    "load/second module": (lambda c: cudla.module_load_from_memory(c.s.dev, c.loadable,
                                                                   len(c.loadable), 0),
                           S.ErrorUnsupportedOperation),
    "load/size -1": (lambda c: _fresh_load(c.loadable, len(c.loadable) - 1), S.ErrorInvalidParam),
    "load/size +1": (lambda c: _fresh_load(c.loadable, len(c.loadable) + 1), S.ErrorInvalidParam),
    "load/NULL": (lambda c: _fresh_load(0, 64), S.ErrorInvalidAddress),
    "load/unknown address": (lambda c: _fresh_load(0x10_0000_0000, 64), S.ErrorInvalidAddress),
    "load/address, size 0": (lambda c: _fresh_load(c.spare, 0), S.ErrorInvalidParam),
    "load/address past end": (lambda c: _fresh_load(c.spare, 4096), S.ErrorInvalidAddress),
    "load/not a buffer": (lambda c: _fresh_load([1, 2], 2), S.ErrorInvalidParam),
    "load/2-D buffer": (lambda c: _fresh_load(np.zeros((2, 2), np.uint8), 4), S.ErrorInvalidParam),
    "load/garbage": (lambda c: _fresh_load(bytes(512), 512), S.ErrorInvalidModule),
    "load/truncated": (lambda c: _fresh_load(c.loadable[:200], 200), S.ErrorInvalidModule),
    "load/flag 2": (lambda c: _fresh_load(c.loadable, len(c.loadable), 2), S.ErrorInvalidParam),
    # module_get_attributes / module_unload
    "attributes/NULL module": (lambda c: cudla.module_get_attributes(0, 0), S.ErrorInvalidDevice),
    "attributes/unloaded module": (lambda c: cudla.module_get_attributes(c.dead_module, 2),
                                   S.ErrorInvalidDevice),
    "attributes/device handle": (lambda c: cudla.module_get_attributes(c.s.dev, 0),
                                 S.ErrorInvalidDevice),
    "unload/unloaded module": (lambda c: cudla.module_unload(c.dead_module, 0),
                               S.ErrorInvalidDevice),
    "unload/flag 1": (lambda c: cudla.module_unload(c.s.module, 1), S.ErrorInvalidParam),
    # submit_task
    "submit/destroyed": (lambda c: cudla.submit_task(c.dead_dev, int(c.task), 1, 0, 0),
                         S.ErrorInvalidDevice),
    "submit/NULL tasks": (lambda c: cudla.submit_task(c.s.dev, 0, 1, 0, 0), S.ErrorInvalidParam),
    "submit/unknown tasks": (lambda c: cudla.submit_task(c.s.dev, 0x10_0000_0000, 1, 0, 0),
                             S.ErrorInvalidAddress),
    "submit/task inside device memory": (lambda c: cudla.submit_task(c.s.dev, c.spare, 1, 0, 0),
                                         S.ErrorInvalidParam),  # zeros: module 0
    "submit/0 tasks": (lambda c: cudla.submit_task(c.s.dev, int(c.task), 0, 0, 0),
                       S.ErrorInvalidParam),
    "submit/2 tasks, 1 record": (lambda c: cudla.submit_task(c.s.dev, int(c.task), 2, 0, 0),
                                 S.ErrorInvalidAddress),
    "submit/2**32 tasks": (lambda c: cudla.submit_task(c.s.dev, int(c.task), 2**32, 0, 0),
                           S.ErrorInvalidParam),
    "submit/unknown stream": (lambda c: cudla.submit_task(c.s.dev, int(c.task), 1, 0x999, 0),
                              S.ErrorInvalidParam),
    "submit/flag 8": (lambda c: cudla.submit_task(c.s.dev, int(c.task), 1, 0, 8),
                      S.ErrorInvalidParam),
    "submit/diagnostics": (lambda c: cudla.submit_task(c.s.dev, int(c.task), 1, 0, 4),
                           S.ErrorUnsupportedOperation),
    "submit/unregistered input": (lambda c: _submit(c, input_tensor=[c.spare, c.s.in_ptrs[1]]),
                                  S.ErrorInvalidAddress),
    "submit/unknown input": (lambda c: _submit(c, input_tensor=[8, c.s.in_ptrs[1]]),
                             S.ErrorInvalidAddress),
    "submit/1 input of 2": (lambda c: _submit(c, input_tensor=c.s.in_ptrs[:1]),
                            S.ErrorInvalidParam),
    "submit/3 inputs of 2": (lambda c: _submit(c, input_tensor=c.s.in_ptrs * 2),
                             S.ErrorInvalidParam),
    "submit/4 outputs of 2(+1)": (lambda c: _submit(c, output_tensor=c.s.out_ptrs * 2),
                                  S.ErrorInvalidParam),
    "submit/module of another device": (lambda c: _submit(c, module_handle=c.dead_module),
                                        S.ErrorInvalidParam),
    "submit/signal events": (lambda c: _submit(c, signal_events=64), S.ErrorInvalidParam),
    "submit/list pointer unknown": (lambda c: _submit_raw(c, input_ptr=0x10_0000_0000),
                                    S.ErrorInvalidAddress),
    "submit/list pointer NULL": (lambda c: _submit_raw(c, input_ptr=0), S.ErrorInvalidAddress),
    # device_get_attribute / set_task_timeout_in_ms
    "dev attribute/destroyed": (lambda c: cudla.device_get_attribute(c.dead_dev, 0),
                                S.ErrorInvalidDevice),
    "dev attribute/kind 7": (lambda c: cudla.device_get_attribute(c.s.dev, 7),
                             S.ErrorInvalidAttribute),
    "timeout/destroyed": (lambda c: cudla.set_task_timeout_in_ms(c.dead_dev, 10),
                          S.ErrorInvalidDevice),
    "timeout/0": (lambda c: cudla.set_task_timeout_in_ms(c.s.dev, 0), S.ErrorInvalidParam),
    "timeout/-5": (lambda c: cudla.set_task_timeout_in_ms(c.s.dev, -5), S.ErrorInvalidParam),
    "timeout/1000001": (lambda c: cudla.set_task_timeout_in_ms(c.s.dev, 1_000_001),
                        S.ErrorInvalidParam),
}
for h in BAD_HANDLES:
    CASES[f"destroy/handle {h}"] = (lambda c, h=h: cudla.destroy_device(h), S.ErrorInvalidDevice)
    CASES[f"register/handle {h}"] = (lambda c, h=h: cudla.mem_register(h, c.spare, 64, 0),
                                     S.ErrorInvalidDevice)
    CASES[f"submit/handle {h}"] = (lambda c, h=h: cudla.submit_task(h, int(c.task), 1, 0, 0),
                                   S.ErrorInvalidDevice)
    CASES[f"attributes/module {h}"] = (lambda c, h=h: cudla.module_get_attributes(h, 1),
                                       S.ErrorInvalidDevice)
    CASES[f"unload/module {h}"] = (lambda c, h=h: cudla.module_unload(h, 0),
                                   S.ErrorInvalidDevice)
    CASES[f"timeout/handle {h}"] = (lambda c, h=h: cudla.set_task_timeout_in_ms(h, 5),
                                    S.ErrorInvalidDevice)


def _frozen() -> np.ndarray:
    a = np.zeros(128, np.uint8)[:64]
    a.flags.writeable = False
    return a


def _fresh_load(p_module, size, flags=0):
    dev = cudla.create_device(0, 0)
    try:
        cudla.module_load_from_memory(dev, p_module, size, flags)
    finally:
        cudla.destroy_device(dev)


def _submit(c: Ctx, **fields) -> None:
    task = _task(c, **fields)
    cudla.submit_task(c.s.dev, int(task), 1, c.stream, 0)


def _submit_raw(c: Ctx, input_ptr: int) -> None:
    task = c.s.task()
    task._inputTensor = input_ptr  # the C field, as a C program could set it
    cudla.submit_task(c.s.dev, int(task), 1, 0, 0)


@pytest.mark.parametrize("case", sorted(CASES))
def test_misuse_gives_the_documented_status(ctx, case):
    call, status = CASES[case]
    with pytest.raises(cudla.CudlaError) as e:
        call(ctx)
    assert e.value.status == status, f"{case}: {e.value} ({e.value.__cause__})"
    assert cudla.get_last_error(ctx.s.dev) == 0  # a refused call is not a task failure


def test_the_module_still_works_after_the_matrix(ctx):
    ctx.s.submit()
    check(runtime.cudaStreamSynchronize(ctx.stream))


@pytest.mark.parametrize("bad", ["1", 1.5, None, object()])
def test_non_integer_arguments_raise_type_error(ctx, bad):
    calls = [lambda: cudla.create_device(bad, 0), lambda: cudla.destroy_device(bad),
             lambda: cudla.mem_register(ctx.s.dev, ctx.spare, bad, 0),
             lambda: cudla.mem_unregister(bad, 0), lambda: cudla.module_unload(bad, 0),
             lambda: cudla.module_get_attributes(ctx.s.module, bad),
             lambda: cudla.submit_task(ctx.s.dev, bad, 1, 0, 0),
             lambda: cudla.device_get_attribute(bad, 0),
             lambda: cudla.set_task_timeout_in_ms(ctx.s.dev, bad)]
    for call in calls:
        with pytest.raises(TypeError):
            call()
    assert cudla.get_last_error(bad) == S.ErrorInvalidDevice  # never raises


def test_random_addresses_never_crash(ctx):
    """Addresses near and far from real memory: refused or used safely, never read blindly."""
    rng = np.random.default_rng(0)
    real = [ctx.spare, int(ctx.task), *ctx.s.in_ptrs, *ctx.s.out_ptrs]
    candidates = [r + int(d) for r in real for d in rng.integers(-4096, 4096, 12)]
    candidates += [int(x) for x in rng.integers(1, 2**62, 40)]
    for addr in candidates:
        for call, args in ((cudla.submit_task, (ctx.s.dev, addr, 1, ctx.stream, 0)),
                           (cudla.mem_register, (ctx.s.dev, addr, 64, 0)),
                           (_fresh_load, (addr, 256)), (cudla.Task.from_ptr, (addr,))):
            try:
                result = call(*args)
            except (cudla.CudlaError, ValueError):
                continue
            if isinstance(result, int) and result == addr:  # a lucky, valid registration
                cudla.mem_unregister(ctx.s.dev, addr)
    check(runtime.cudaStreamSynchronize(ctx.stream))


E = runtime.cudaError_t
K = runtime.cudaMemcpyKind


@pytest.fixture
def host_and_device():
    ptr = check(runtime.cudaMalloc(256))
    yield np.zeros(256, np.uint8), ptr
    runtime.cudaFree(ptr)


def test_runtime_misuse(host_and_device):
    host, ptr = host_and_device
    h2d, d2h = K.cudaMemcpyHostToDevice, K.cudaMemcpyDeviceToHost
    cases = [
        (runtime.cudaMalloc(-1), (E.cudaErrorInvalidValue, None)),
        (runtime.cudaFree(0x10_0000_0000), (E.cudaErrorInvalidValue,)),
        (runtime.cudaFree(ptr + 64), (E.cudaErrorInvalidValue,)),
        (runtime.cudaMemcpyAsync(0x10_0000_0000, host, 16, h2d, 0), (E.cudaErrorInvalidValue,)),
        (runtime.cudaMemcpyAsync(ptr, host, 512, h2d, 0), (E.cudaErrorInvalidValue,)),
        (runtime.cudaMemcpyAsync(ptr + 200, host, 100, h2d, 0), (E.cudaErrorInvalidValue,)),
        (runtime.cudaMemcpyAsync(host, ptr, 16, h2d, 0), (E.cudaErrorInvalidMemcpyDirection,)),
        (runtime.cudaMemcpyAsync(ptr, host, 16, d2h, 0), (E.cudaErrorInvalidMemcpyDirection,)),
        (runtime.cudaMemcpyAsync(ptr, host, 16, 9, 0), (E.cudaErrorInvalidMemcpyDirection,)),
        (runtime.cudaMemcpyAsync(ptr, host, -1, h2d, 0), (E.cudaErrorInvalidValue,)),
        (runtime.cudaMemcpyAsync(b"frozen" * 4, ptr, 16, d2h, 0), (E.cudaErrorInvalidValue,)),
        (runtime.cudaMemcpyAsync(ptr, host, 16, h2d, 0x999), (E.cudaErrorInvalidResourceHandle,)),
        (runtime.cudaMemsetAsync(host, 0, 16, 0), (E.cudaErrorInvalidValue,)),
        (runtime.cudaMemsetAsync(ptr, 0, 257, 0), (E.cudaErrorInvalidValue,)),
        (runtime.cudaStreamSynchronize(0x999), (E.cudaErrorInvalidResourceHandle,)),
        (runtime.cudaStreamDestroy(0x999), (E.cudaErrorInvalidResourceHandle,)),
        (runtime.cudaStreamCreateWithFlags(4), (E.cudaErrorInvalidValue, None)),
        (runtime.cudaEventRecord(0x999, 0), (E.cudaErrorInvalidResourceHandle,)),
        (runtime.cudaEventSynchronize(0x999), (E.cudaErrorInvalidResourceHandle,)),
        (runtime.cudaSetDevice(1), (E.cudaErrorInvalidDevice,)),
    ]
    for got, want in cases:
        assert got == want
    err, a = runtime.cudaEventCreate()
    err, b = runtime.cudaEventCreate()
    assert runtime.cudaEventElapsedTime(a, b) == (E.cudaErrorInvalidResourceHandle, None)
    assert runtime.cudaEventDestroy(a) == (E.cudaSuccess,)
    assert runtime.cudaEventDestroy(a) == (E.cudaErrorInvalidResourceHandle,)
    runtime.cudaEventDestroy(b)
    with pytest.raises(TypeError):
        runtime.cudaMemcpyAsync(ptr, host, "16", h2d, 0)


def test_driver_needs_cu_init(monkeypatch):
    monkeypatch.setattr(driver, "_initialized", False)
    R = driver.CUresult
    assert driver.cuStreamCreate(0) == (R.CUDA_ERROR_NOT_INITIALIZED, None)
    assert driver.cuMemAlloc(64) == (R.CUDA_ERROR_NOT_INITIALIZED, None)
    assert driver.cuInit(1) == (R.CUDA_ERROR_INVALID_VALUE,)
    assert driver.cuInit(0) == (R.CUDA_SUCCESS,)
    assert driver.cuMemAlloc(0) == (R.CUDA_ERROR_INVALID_VALUE, None)
    assert driver.cuStreamDestroy(driver.CUstream(0x999)) == (R.CUDA_ERROR_INVALID_HANDLE,)
    assert driver.cuDeviceGet(3) == (R.CUDA_ERROR_INVALID_DEVICE, None)
