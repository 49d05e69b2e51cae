"""Device semantics of pydla.cudla on the CPU: tasks, streams, timeouts, statistics."""

import ctypes
import time

import numpy as np
import pytest

from pydla import cudla, driver, runtime
from pydla.api import decode_task_statistics, pack_tensor, unpack_tensor
from pydla.loadable.format import HEADER_FIELDS
from tests.runtime.conftest import check, close_setup, expected, inputs, open_setup

S = cudla.Status
K = runtime.cudaMemcpyKind


def status_of(fn, *args):
    with pytest.raises(cudla.CudlaError) as e:
        fn(*args)
    return e.value.status


def outputs_as_float(setup):
    return [buf.view(np.float32).reshape(1, 4, 2, 3) for buf in setup.read_outputs()]


def test_stream_zero_runs_the_task_before_returning(setup):
    a, b = inputs(0)
    setup.write_inputs([a, b])
    task = setup.task()
    cudla.submit_task(setup.dev, int(task), 1, 0, 0)
    for got, want in zip(outputs_as_float(setup), expected(a, b)):
        np.testing.assert_allclose(got, want, rtol=1e-6)
    assert cudla.get_last_error(setup.dev) == 0


def test_a_stream_runs_copies_and_tasks_in_order(setup):
    stream = check(runtime.cudaStreamCreate())
    results = []
    for seed in range(3):
        a, b = inputs(seed)
        for ptr, x in zip(setup.in_ptrs, (a, b)):
            check(runtime.cudaMemcpyAsync(ptr, x, x.nbytes, K.cudaMemcpyHostToDevice, stream))
        setup.submit(stream=int(stream))
        host = np.zeros(setup.out_descs[1].size_, np.uint8)
        check(runtime.cudaMemcpyAsync(host, setup.out_ptrs[1], host.size,
                                      K.cudaMemcpyDeviceToHost, stream))
        results.append((host, a * b))
    check(runtime.cudaStreamSynchronize(stream))
    for host, want in results:
        np.testing.assert_allclose(host.view(np.float32).reshape(want.shape), want, rtol=1e-6)
    check(runtime.cudaStreamDestroy(stream))


def test_other_streams_are_asynchronous(slow):
    s = open_setup(slow)
    try:
        check(driver.cuInit(0))
        stream = check(driver.cuStreamCreate(0))
        t0 = time.perf_counter()
        for _ in range(3):
            s.submit(stream=int(stream))
        returned = time.perf_counter() - t0
        assert driver.cuStreamQuery(stream)[0] == driver.CUresult.CUDA_ERROR_NOT_READY
        check(driver.cuStreamSynchronize(stream))
        took = time.perf_counter() - t0
        assert returned < took / 3, (returned, took)
        check(driver.cuStreamDestroy(stream))
    finally:
        close_setup(s)


def test_consecutive_task_records_run_in_order(setup):
    a, b = inputs(1)
    setup.write_inputs([a, b])
    extra = [check(runtime.cudaMalloc(d.size_)) for d in setup.out_descs]
    regs = [cudla.mem_register(setup.dev, p, d.size_, 0) for p, d in zip(extra, setup.out_descs)]
    tasks = (cudla.Task * 2)()
    for rec, outs in zip(tasks, (setup.out_ptrs, regs)):
        rec.module_handle = setup.module
        rec.input_tensor = setup.in_ptrs
        rec.output_tensor = outs
    cudla.submit_task(setup.dev, ctypes.addressof(tasks), 2, 0, 0)
    for ptr in regs:
        host = np.zeros(setup.out_descs[0].size_, np.uint8)
        check(runtime.cudaMemcpy(host, ptr, host.size, K.cudaMemcpyDeviceToHost))
        assert host.any()
    # a numpy array of task_dtype works the same way
    arr = np.zeros(2, cudla.task_dtype)
    for i in range(2):
        arr[i] = np.frombuffer(bytes(tasks[i]), cudla.task_dtype)[0]
    cudla.Task.from_data(arr[:1])  # makes the array's memory known
    cudla.submit_task(setup.dev, arr.ctypes.data, 2, 0, 0)
    for p in regs:
        cudla.mem_unregister(setup.dev, p)
    for p in extra:
        check(runtime.cudaFree(p))


def test_submit_noop_validates_but_runs_nothing(setup):
    for p, d in zip(setup.out_ptrs, setup.out_descs):
        check(runtime.cudaMemset(p, 0xAB, d.size_))
    setup.submit(flags=cudla.SubmissionFlags.SUBMIT_NOOP)
    assert all((buf == 0xAB).all() for buf in setup.read_outputs())
    bad = setup.task(outputs=setup.out_ptrs[:1])
    assert status_of(setup.submit, bad, 0, 1) == S.ErrorInvalidParam


def test_timeout_on_stream_zero_raises_and_is_the_last_error(slow):
    s = open_setup(slow)
    try:
        cudla.set_task_timeout_in_ms(s.dev, 1)
        assert status_of(s.submit) == S.ErrorDlaErrEngineTimeout
        assert cudla.get_last_error(s.dev) == S.ErrorDlaErrEngineTimeout
        cudla.set_task_timeout_in_ms(s.dev, 1_000_000)
        s.submit()
        assert cudla.get_last_error(s.dev) == S.Success
    finally:
        close_setup(s)


def test_timeout_on_a_stream_is_reported_by_the_stream_then_last_error(slow):
    s = open_setup(slow)
    try:
        cudla.set_task_timeout_in_ms(s.dev, 1)
        stream = check(runtime.cudaStreamCreate())
        s.submit(stream=int(stream))  # accepted
        assert runtime.cudaStreamSynchronize(stream) == (
            runtime.cudaError_t.cudaErrorLaunchTimeout,)
        assert cudla.get_last_error(s.dev) == S.ErrorDlaErrEngineTimeout
        check(runtime.cudaStreamSynchronize(stream))  # reported once
        check(runtime.cudaStreamDestroy(stream))
    finally:
        close_setup(s)


def test_task_statistics_record_every_layer(setup):
    kinds = cudla.ModuleAttributeType
    assert cudla.module_get_attributes(setup.module, kinds.NUM_OUTPUT_TASK_STATISTICS) == 1
    (desc,) = setup.stats_descs
    assert desc.name == "pydla_task_statistics"
    assert desc.data_type == cudla.DataType.UINT8 and (desc.size_ - 64) % 96 == 0
    ptr = check(runtime.cudaMalloc(desc.size_))
    flags = cudla.AccessPermissionFlags.TASK_STATISTICS
    stats = cudla.mem_register(setup.dev, ptr, desc.size_, flags)
    setup.write_inputs(inputs(2))
    setup.submit(setup.task(setup.out_ptrs + [stats]))
    host = np.zeros(desc.size_, np.uint8)
    check(runtime.cudaMemcpy(host, ptr, desc.size_, K.cudaMemcpyDeviceToHost))
    st = decode_task_statistics(host)
    assert st.status == S.Success and st.layers_run == len(st.layers) == (desc.size_ - 64) // 96
    assert st.layers[-1].name == "Mul_2"  # layers keep their names (fused ones: the first)
    times = [st.start_ns] + [v for t in st.layers for v in (t.start_ns, t.end_ns)] + [st.end_ns]
    assert times == sorted(times) and all(t.duration_ns >= 0 for t in st.layers)
    # a plain output buffer in the statistics slot, or statistics as an output, is refused
    assert status_of(setup.submit, setup.task(setup.out_ptrs + [setup.out_ptrs[0]])) \
        == S.ErrorInvalidParam
    assert status_of(setup.submit, setup.task([stats, setup.out_ptrs[1]])) == S.ErrorInvalidParam
    cudla.mem_unregister(setup.dev, stats)
    check(runtime.cudaFree(ptr))


def test_statistics_of_a_timed_out_task(slow):
    s = open_setup(slow)
    try:
        (desc,) = s.stats_descs
        stats_buf = np.zeros(desc.size_ + 64, np.uint8)
        stats_buf = stats_buf[(-stats_buf.ctypes.data) % 64:][:desc.size_]
        stats = cudla.mem_register(s.dev, stats_buf, desc.size_, 2)  # a numpy array
        cudla.set_task_timeout_in_ms(s.dev, 1)
        status_of(s.submit, s.task(s.out_ptrs + [stats]))
        st = decode_task_statistics(stats_buf)
        assert st.status == S.ErrorDlaErrEngineTimeout
        assert 1 <= st.layers_run < len(st.layers) == 6
        assert st.layers[-1].start_ns == 0
        cudla.mem_unregister(s.dev, stats)
    finally:
        close_setup(s)


def test_one_module_per_handle_loaded_once(add_mul):
    dev = cudla.create_device(0, cudla.Mode.CUDA_DLA)
    module = cudla.module_load_from_memory(dev, add_mul, len(add_mul), 0)
    load = cudla.module_load_from_memory
    assert status_of(load, dev, add_mul, len(add_mul), 0) == S.ErrorUnsupportedOperation
    cudla.module_unload(module, 0)
    assert status_of(load, dev, add_mul, len(add_mul), 0) == S.ErrorUnsupportedOperation
    assert status_of(cudla.module_get_attributes, module, 0) == S.ErrorInvalidDevice
    cudla.destroy_device(dev)


def test_module_sources_and_invalid_loadables(add_mul):
    dev = cudla.create_device(0, cudla.Mode.CUDA_DLA)
    load = cudla.module_load_from_memory
    try:
        assert status_of(load, dev, add_mul, len(add_mul) - 1, 0) == S.ErrorInvalidParam
        assert status_of(load, dev, b"not a loadable" * 20, 280, 0) == S.ErrorInvalidModule
        newer = bytearray(add_mul)
        newer[HEADER_FIELDS["version_major"]] += 1
        assert status_of(load, dev, newer, len(newer), 0) == S.ErrorIncompatibleDlaSWVersion
        assert status_of(load, dev, 0x1000, len(add_mul), 0) == S.ErrorInvalidAddress
        # an int address of memory pydla knows, holding the loadable
        ptr = check(runtime.cudaMalloc(len(add_mul)))
        check(runtime.cudaMemcpy(ptr, add_mul, len(add_mul), K.cudaMemcpyHostToDevice))
        module = load(dev, ptr, len(add_mul), 0)
        assert cudla.module_get_attributes(module, 0) == 2
        check(runtime.cudaFree(ptr))
    finally:
        cudla.destroy_device(dev)


def test_registration_rules(setup):
    dev = setup.dev
    ptr = check(runtime.cudaMalloc(1024))
    reg = cudla.mem_register
    assert status_of(reg, dev, ptr + 16, 64, 0) == S.ErrorInvalidAddress  # not 32-aligned
    assert status_of(reg, dev, ptr, 0, 0) == S.ErrorInvalidAddress
    assert status_of(reg, dev, ptr, 2048, 0) == S.ErrorInvalidAddress  # past the allocation
    assert status_of(reg, dev, 0x7F00_0000_0000, 64, 0) == S.ErrorInvalidAddress  # unknown
    assert reg(dev, ptr, 512, 0) == ptr
    assert status_of(reg, dev, ptr, 512, 0) == S.ErrorMemoryRegistered
    assert status_of(reg, dev, ptr + 256, 64, 0) == S.ErrorMemoryRegistered  # overlaps
    assert reg(dev, ptr + 512, 512, 0) == ptr + 512
    cudla.mem_unregister(dev, ptr)
    assert status_of(cudla.mem_unregister, dev, ptr) == S.ErrorInvalidAddress
    cudla.mem_unregister(dev, ptr + 512)
    check(runtime.cudaFree(ptr))


def test_submit_checks_registrations_sizes_and_counts(setup):
    ptr = check(runtime.cudaMalloc(setup.out_descs[0].size_))
    assert status_of(setup.submit, setup.task([ptr, setup.out_ptrs[1]])) \
        == S.ErrorInvalidAddress  # not registered
    small = cudla.mem_register(setup.dev, ptr, 32, 0)
    assert status_of(setup.submit, setup.task([small, setup.out_ptrs[1]])) \
        == S.ErrorInvalidParam  # registered bytes do not cover size_
    cudla.mem_unregister(setup.dev, small)
    assert status_of(setup.submit, setup.task(setup.out_ptrs[:1])) == S.ErrorInvalidParam
    t = setup.task()
    t.input_tensor = setup.in_ptrs[:1]
    assert status_of(setup.submit, t) == S.ErrorInvalidParam
    t = setup.task()
    t.module_handle = setup.module + 16
    assert status_of(setup.submit, t) == S.ErrorInvalidParam
    t = setup.task()
    events = cudla.WaitEvents()
    t.wait_events = int(events)
    assert status_of(setup.submit, t) == S.ErrorInvalidParam
    # freed memory that is still registered
    reg = cudla.mem_register(setup.dev, ptr, setup.out_descs[0].size_, 0)
    check(runtime.cudaFree(ptr))
    assert status_of(setup.submit, setup.task([reg, setup.out_ptrs[1]])) \
        == S.ErrorInvalidAddress
    cudla.mem_unregister(setup.dev, reg)


def test_half_chw16_module_through_cudla(add_mul_chw16):
    s = open_setup(add_mul_chw16)
    try:
        for d in s.in_descs + s.out_descs:
            assert d.data_type == cudla.DataType.HALF
            assert d.data_format == cudla.DataFormat.NCxHWx
            assert (d.n, d.c, d.h, d.w) == (1, 4, 2, 3)
            assert d.size_ == 1 * 16 * 2 * 3 * 2  # channels padded to 16, fp16
            assert list(d.stride[:4]) == [2, 3 * 16 * 2, 2 * 3 * 16 * 2, 2 * 3 * 16 * 2]
        a, b = inputs(3)
        s.write_inputs([pack_tensor(a, s.in_descs[0]), pack_tensor(b, s.in_descs[1])])
        s.submit()
        got = [unpack_tensor(buf, d) for buf, d in zip(s.read_outputs(), s.out_descs)]
        want = expected(a.astype(np.float16).astype(np.float32),
                        b.astype(np.float16).astype(np.float32))
        for g, w in zip(got, want):
            assert g.dtype == np.float16
            np.testing.assert_allclose(g.astype(np.float32), w, rtol=2e-3, atol=2e-3)
    finally:
        close_setup(s)


def test_attributes_are_read_only_copies(setup):
    kinds = cudla.ModuleAttributeType
    descs = cudla.module_get_attributes(setup.module, kinds.INPUT_TENSOR_DESCRIPTORS)
    assert [d.name for d in descs] == ["a", "b"]
    assert (descs[0].size_, descs[0].data_type, descs[0].data_format) == (96, 1, 1)
    with pytest.raises(ValueError, match="read-only"):
        descs[0].n = 3
    again = cudla.module_get_attributes(setup.module, kinds.INPUT_TENSOR_DESCRIPTORS)
    assert again == descs and again[0] is not descs[0]
    with pytest.raises(ValueError, match="Unknown attribute type: 99"):
        cudla.module_get_attributes(setup.module, 99)


def test_destroy_waits_for_queued_tasks_and_frees_the_handle(slow):
    s = open_setup(slow)
    stream = check(runtime.cudaStreamCreate())
    s.submit(stream=int(stream))
    for p in s.in_ptrs + s.out_ptrs:
        cudla.mem_unregister(s.dev, p)
    cudla.destroy_device(s.dev)  # waits for the queued task
    assert runtime.cudaStreamQuery(stream) == (runtime.cudaError_t.cudaSuccess,)
    assert cudla.get_last_error(s.dev) == S.ErrorInvalidDevice
    assert status_of(cudla.destroy_device, s.dev) == S.ErrorInvalidDevice
    assert status_of(cudla.module_unload, s.module, 0) == S.ErrorInvalidDevice
    for p in s.in_ptrs + s.out_ptrs:
        check(runtime.cudaFree(p))
    check(runtime.cudaStreamDestroy(stream))
