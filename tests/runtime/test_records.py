"""Record behaviour: zero-filled, addresses, equality, read-only copies, wrapping memory."""

import ctypes
import gc

import numpy as np
import pytest

from pydla import cudla


def test_new_records_are_zero_filled_and_have_an_address():
    d = cudla.ModuleTensorDescriptor()
    assert (d.name, d.size_, d.n, d.c, d.h, d.w) == ("", 0, 0, 0, 0, 0)
    assert d.stride.shape == (8,) and d.stride.dtype == np.uint32 and not d.stride.any()
    assert bytes(d) == bytes(168)
    for rec in (d, cudla.Task(), cudla.Fence(), cudla.DevAttribute()):
        assert int(rec) == rec.ptr == ctypes.addressof(rec) != 0
    assert repr(cudla.Task()).startswith("<pydla.cudla.Task object at 0x")


def test_equality_compares_contents():
    a, b = cudla.ModuleTensorDescriptor(), cudla.ModuleTensorDescriptor()
    assert a == b and a is not b and a != cudla.Task()
    a.name, b.name = "x", "x"
    a.stride = [1, 2, 3, 4, 5, 6, 7, 8]
    assert a != b
    b.stride = np.arange(1, 9)
    assert a == b
    b.name = "y"
    a.name = "y"
    assert a == b  # a shorter name after a longer one leaves no stale bytes
    with pytest.raises(TypeError):
        hash(a)


def test_descriptor_field_rules():
    d = cudla.ModuleTensorDescriptor()
    d.name = "é" * 40  # 80 UTF-8 bytes: the most a name holds
    assert d.name == "é" * 40
    with pytest.raises(ValueError, match="max length is 80"):
        d.name = "x" * 81
    with pytest.raises(ValueError, match="Expected length 8 for field stride, got 7"):
        d.stride = [0] * 7
    with pytest.raises(OverflowError):
        d.data_type = 256
    with pytest.raises(OverflowError):
        d.size_ = -1
    with pytest.raises(TypeError):
        d.n = 1.5
    d.stride[3] = 9  # stride is a view of the record's memory
    assert d.stride[3] == 9


def test_task_lists_keep_their_counts():
    t = cudla.Task()
    t.input_tensor = [64, 128]
    t.output_tensor = [256]
    assert list(t.input_tensor) == [64, 128] and list(t.output_tensor) == [256]
    assert (t._numInputTensors, t._numOutputTensors) == (2, 1)
    arr = np.zeros(1, cudla.task_dtype)
    arr[0] = np.frombuffer(bytes(t), cudla.task_dtype)[0]
    assert arr["num_input_tensors"][0] == 2 and arr["num_output_tensors"][0] == 1
    t.input_tensor = []
    assert len(t.input_tensor) == 0 and t._numInputTensors == 0
    with pytest.raises(OverflowError):
        t.output_tensor = [-1]


def test_task_pointer_lists_live_as_long_as_the_record_memory():
    tasks = np.zeros(2, cudla.task_dtype)
    cudla.Task.from_ptr(tasks.ctypes.data + 48, owner=tasks).input_tensor = [1, 2, 3]
    gc.collect()  # the wrapper is gone; the list it set must not be
    again = cudla.Task.from_data(tasks[1:2])
    assert list(again.input_tensor) == [1, 2, 3]


def test_read_only_records_refuse_writes():
    src = cudla.ModuleTensorDescriptor()
    d = cudla.ModuleTensorDescriptor.from_ptr(int(src), readonly=True)
    for field, value in (("n", 1), ("name", "x"), ("stride", [0] * 8)):
        with pytest.raises(ValueError, match="This ModuleTensorDescriptor instance is read-only"):
            setattr(d, field, value)
    with pytest.raises(ValueError):
        d.stride[0] = 1


def test_from_buffer_from_data_from_ptr():
    buf = bytearray(16)
    f = cudla.Fence.from_buffer(buf)
    f.fence, f.type = 7, cudla.FenceType.FENCE_SOF
    assert bytes(buf[:8]) == (7).to_bytes(8, "little") and buf[8] == 2
    with pytest.raises(ValueError, match="buffer length must be 16 bytes"):
        cudla.Fence.from_buffer(bytearray(15))
    with pytest.raises(TypeError):
        cudla.Fence.from_buffer(3)

    arr = np.zeros(1, cudla.module_tensor_descriptor_dtype)
    d = cudla.ModuleTensorDescriptor.from_data(arr)
    d.n = 5
    assert arr["n"][0] == 5 and cudla.ModuleTensorDescriptor.from_data(d) is d
    with pytest.raises(TypeError, match="NumPy ndarray"):
        cudla.ModuleTensorDescriptor.from_data([1])
    with pytest.raises(ValueError, match="size of 1"):
        cudla.ModuleTensorDescriptor.from_data(np.zeros(2, cudla.module_tensor_descriptor_dtype))
    with pytest.raises(ValueError, match="module_tensor_descriptor_dtype"):
        cudla.ModuleTensorDescriptor.from_data(np.zeros(1, cudla.task_dtype))
    frozen = arr.copy()
    frozen.flags.writeable = False
    assert cudla.ModuleTensorDescriptor.from_data(frozen)._readonly

    copy = cudla.ModuleTensorDescriptor.from_ptr(int(d))
    assert copy == d and int(copy) != int(d)
    with pytest.raises(ValueError, match="null"):
        cudla.Task.from_ptr(0)
    with pytest.raises(ValueError, match="not .* that pydla knows"):
        cudla.Task.from_ptr(0x1234_5678)  # never dereferenced
    with pytest.raises(ValueError, match="outside"):
        cudla.Task.from_ptr(arr.ctypes.data + 8, owner=np.zeros(8, np.uint8))


def test_events_and_fence_lists():
    w = cudla.WaitEvents()
    f1, f2 = cudla.Fence(), cudla.Fence()
    f1.fence, f2.fence = 11, 22
    w.pre_fences = [f1, f2]
    got = w.pre_fences
    assert [f.fence for f in got] == [11, 22] and w._numEvents == 2
    got[0].fence = 33  # a view of the list inside the record
    assert w.pre_fences[0].fence == 33
    s = cudla.SignalEvents()
    s.dev_ptrs = [5, 6]
    assert list(s.dev_ptrs) == [5, 6]
    with pytest.raises(TypeError):
        w.pre_fences = [1]


def test_setitem_copies_an_array_in():
    t = cudla.Task()
    src = np.zeros(1, cudla.task_dtype)
    src["module_handle"] = 42
    t[0] = src
    assert t.module_handle == 42
    t["wait_events"] = 0
    with pytest.raises(ValueError):
        t[0] = np.zeros(3, np.uint8)


def test_ctypes_arrays_of_tasks_are_consecutive_records():
    tasks = (cudla.Task * 3)()
    tasks[1].module_handle = 9
    assert ctypes.addressof(tasks[1]) == ctypes.addressof(tasks) + 48
    assert np.frombuffer(tasks, cudla.task_dtype)["module_handle"].tolist() == [0, 9, 0]

