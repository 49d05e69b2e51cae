"""Pin the cuDLA surface: function names and signatures, enum values (both spellings),
record fields and C layouts, error text and pickling."""

import ctypes
import inspect
import pickle

import pytest

from pydla import cudla

FUNCTIONS = {
    "get_version": [], "device_get_count": [], "create_device": ["device", "flags"],
    "destroy_device": ["dev_handle"], "mem_register": ["dev_handle", "ptr", "size", "flags"],
    "mem_unregister": ["dev_handle", "dev_ptr"],
    "module_load_from_memory": ["dev_handle", "p_module", "module_size", "flags"],
    "module_get_attributes": ["h_module", "attr_type"], "module_unload": ["h_module", "flags"],
    "submit_task": ["dev_handle", "ptr_to_tasks", "num_tasks", "stream", "flags"],
    "device_get_attribute": ["dev_handle", "attrib"], "get_last_error": ["dev_handle"],
    "set_task_timeout_in_ms": ["dev_handle", "timeout"],
}


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_function_names_and_arguments(name):
    fn = getattr(cudla, name)
    assert list(inspect.signature(fn).parameters) == FUNCTIONS[name]


def test_thirteen_functions_and_helpers():
    assert len(FUNCTIONS) == 13
    assert callable(cudla.check_status)
    cudla.check_status(0)
    with pytest.raises(cudla.CudlaError) as e:
        cudla.check_status(4)
    assert e.value.status == 4


STATUS = {
    "Success": 0, "ErrorInvalidParam": 1, "ErrorOutOfResources": 2, "ErrorCreationFailed": 3,
    "ErrorInvalidAddress": 4, "ErrorOs": 5, "ErrorCuda": 6, "ErrorUmd": 7,
    "ErrorInvalidDevice": 8, "ErrorInvalidAttribute": 9, "ErrorIncompatibleDlaSWVersion": 10,
    "ErrorMemoryRegistered": 11, "ErrorInvalidModule": 12, "ErrorUnsupportedOperation": 13,
    "ErrorNvSci": 14, "ErrorDriverNotFound": 15, "ErrorDlaErrInvalidInput": 0x40000001,
    "ErrorDlaErrInvalidPreAction": 0x40000002, "ErrorDlaErrNoMem": 0x40000003,
    "ErrorDlaErrProcessorBusy": 0x40000004, "ErrorDlaErrTaskStatusMismatch": 0x40000005,
    "ErrorDlaErrEngineTimeout": 0x40000006, "ErrorDlaErrDataMismatch": 0x40000007,
    "ErrorUnknown": 0x7FFFFFFF,
}
STATUS_ALIASES = {
    "SUCCESS": 0, "ERROR_INVALID_PARAM": 1, "ERROR_OUT_OF_RESOURCES": 2,
    "ERROR_CREATION_FAILED": 3, "ERROR_INVALID_ADDRESS": 4, "ERROR_OS": 5, "ERROR_CUDA": 6,
    "ERROR_UMD": 7, "ERROR_INVALID_DEVICE": 8, "ERROR_INVALID_ATTRIBUTE": 9,
    "ERROR_INCOMPATIBLE_DLA_SW_VERSION": 10, "ERROR_MEMORY_REGISTERED": 11,
    "ERROR_INVALID_MODULE": 12, "ERROR_UNSUPPORTED_OPERATION": 13, "ERROR_NV_SCI": 14,
    "ERROR_DRIVER_NOT_FOUND": 15, "ERROR_DLA_ERR_INVALID_INPUT": 0x40000001,
    "ERROR_DLA_ERR_INVALID_PRE_ACTION": 0x40000002, "ERROR_DLA_ERR_NO_MEM": 0x40000003,
    "ERROR_DLA_ERR_PROCESSOR_BUSY": 0x40000004, "ERROR_DLA_ERR_TASK_STATUS_MISMATCH": 0x40000005,
    "ERROR_DLA_ERR_ENGINE_TIMEOUT": 0x40000006, "ERROR_DLA_ERR_DATA_MISMATCH": 0x40000007,
    "ERROR_UNKNOWN": 0x7FFFFFFF,
}
ENUMS = {
    "Mode": ({"CUDA_DLA": 0, "STANDALONE": 1}, {}),
    "ModuleAttributeType": ({"NUM_INPUT_TENSORS": 0, "NUM_OUTPUT_TENSORS": 1,
                             "INPUT_TENSOR_DESCRIPTORS": 2, "OUTPUT_TENSOR_DESCRIPTORS": 3,
                             "NUM_OUTPUT_TASK_STATISTICS": 4,
                             "OUTPUT_TASK_STATISTICS_DESCRIPTORS": 5}, {}),
    "DevAttributeType": ({"UNIFIED_ADDRESSING": 0, "DEVICE_VERSION": 1}, {}),
    "FenceType": ({"NVSCISYNC_FENCE": 1, "NVSCISYNC_FENCE_SOF": 2},
                  {"FENCE": 1, "FENCE_SOF": 2}),
    "ModuleLoadFlags": ({"MODULE_DEFAULT": 0, "MODULE_ENABLE_FAULT_DIAGNOSTICS": 1},
                        {"DEFAULT": 0, "ENABLE_FAULT_DIAGNOSTICS": 1}),
    "SubmissionFlags": ({"SUBMIT_NOOP": 1, "SUBMIT_SKIP_LOCK_ACQUIRE": 2,
                         "SUBMIT_DIAGNOSTICS_TASK": 4},
                        {"NOOP": 1, "SKIP_LOCK_ACQUIRE": 2, "DIAGNOSTICS_TASK": 4}),
    "AccessPermissionFlags": ({"READ_WRITE_PERM": 0, "READ_ONLY_PERM": 1,
                               "TASK_STATISTICS": 2}, {}),
    "ScratchMemoryConfig": ({"DEFAULT": 0, "SHARED_STATIC": 2, "CONFIG_MAX": 0x7FFFFFFF},
                            {"SCRATCH_MEMORY_DEFAULT": 0, "SCRATCH_MEMORY_SHARED_STATIC": 2,
                             "MAX": 0x7FFFFFFF}),
    "Status": (STATUS, STATUS_ALIASES),
    # descriptor codes (C header values; pydla's enums)
    "DataFormat": ({"UNKNOWN": 0, "NCHW": 1, "NHWC": 2, "NCxHWx": 3}, {}),
    "DataType": ({"UNKNOWN": 0, "FLOAT": 1, "HALF": 2, "INT16": 3, "INT8": 4, "UINT8": 5,
                  "UINT16": 6}, {}),
    "DataCategory": ({"IMAGE": 0, "WEIGHT": 1, "FEATURE": 2, "PLANAR": 3, "BIAS": 4}, {}),
    "PixelMapping": ({"PITCH_LINEAR": 0, "BLOCK_LINEAR": 1}, {}),
    "PixelFormat": ({"FEATURE": 36, "UNKNOWN": 37}, {}),
}


@pytest.mark.parametrize("name", sorted(ENUMS))
def test_enum_values_and_aliases(name):
    enum = getattr(cudla, name)
    canonical, aliases = ENUMS[name]
    assert {m.name: m.value for m in enum} == canonical  # iteration skips aliases
    assert {k: int(v) for k, v in enum.__members__.items()} == {**canonical, **aliases}
    for alias, value in aliases.items():
        assert enum[alias] is enum(value)  # an alias is the same member


@pytest.mark.parametrize("name,value", sorted(STATUS.items()))
def test_error_text_and_pickle(name, value):
    err = cudla.CudlaError(value)
    assert isinstance(err, Exception)
    assert err.status == value
    assert str(err) == f"{name} ({value})"
    assert err.__reduce__() == (cudla.CudlaError, (value,))
    again = pickle.loads(pickle.dumps(err))
    assert type(again) is cudla.CudlaError and again.status == value and str(again) == str(err)


def test_error_from_a_call_names_the_status_and_keeps_the_cause():
    with pytest.raises(cudla.CudlaError) as e:
        cudla.destroy_device(12345)
    assert str(e.value) == "ErrorInvalidDevice (8)"
    assert e.value.status == cudla.Status.ErrorInvalidDevice
    assert "12345" not in str(e.value) and "0x3039" in str(e.value.__cause__)


# (Python name, C offset, C size) — the x86-64 layout of cudla.h
RECORDS = {
    "Task": (48, [("module_handle", 0), ("output_tensor", 8), ("num_output_tensors", 16),
                  ("num_input_tensors", 20), ("input_tensor", 24), ("wait_events", 32),
                  ("signal_events", 40)]),
    "ModuleTensorDescriptor": (168, [("name", 0), ("size_", 88), ("n", 96), ("c", 104),
                                     ("h", 112), ("w", 120), ("data_format", 128),
                                     ("data_type", 129), ("data_category", 130),
                                     ("pixel_format", 131), ("pixel_mapping", 132),
                                     ("stride", 136)]),
    "ModuleAttribute": (8, [("num_input_tensors", 0), ("num_output_tensors", 0),
                            ("input_tensor_desc", 0), ("output_tensor_desc", 0)]),
    "DevAttribute": (4, [("unified_addressing_supported", 0), ("device_version", 0)]),
    "Fence": (16, [("fence", 0), ("type", 8)]),
    "WaitEvents": (16, [("pre_fences", 0), ("num_events", 8)]),
    "SignalEvents": (24, [("dev_ptrs", 0), ("eof_fences", 8), ("num_events", 16)]),
    "ExternalMemoryHandleDesc": (16, [("ext_buf_object", 0), ("size_", 8)]),
    "ExternalSemaphoreHandleDesc": (8, [("ext_sync_object", 0)]),
}
DTYPES = {"Task": "task_dtype", "ModuleTensorDescriptor": "module_tensor_descriptor_dtype",
          "ModuleAttribute": "module_attribute_dtype", "DevAttribute": "dev_attribute_dtype",
          "Fence": "fence_dtype", "WaitEvents": "wait_events_dtype",
          "SignalEvents": "signal_events_dtype",
          "ExternalMemoryHandleDesc": "external_memory_handle_desc_dtype",
          "ExternalSemaphoreHandleDesc": "external_semaphore_handle_desc_dtype"}
PROPERTIES = {  # the attributes upstream records offer (their numpy-only count fields aside)
    "Task": {"module_handle", "input_tensor", "output_tensor", "wait_events", "signal_events"},
    "ModuleTensorDescriptor": {"name", "size_", "n", "c", "h", "w", "data_format", "data_type",
                               "data_category", "pixel_format", "pixel_mapping", "stride"},
    "ModuleAttribute": {"num_input_tensors", "num_output_tensors", "input_tensor_desc",
                        "output_tensor_desc"},
    "DevAttribute": {"unified_addressing_supported", "device_version"},
    "Fence": {"fence", "type"}, "WaitEvents": {"pre_fences"},
    "SignalEvents": {"dev_ptrs", "eof_fences"},
    "ExternalMemoryHandleDesc": {"ext_buf_object", "size_"},
    "ExternalSemaphoreHandleDesc": {"ext_sync_object"},
}


@pytest.mark.parametrize("name", sorted(RECORDS))
def test_record_layout_fields_and_dtype(name):
    cls = getattr(cudla, name)
    size, fields = RECORDS[name]
    assert isinstance(cls(), (ctypes.Structure, ctypes.Union))
    assert ctypes.sizeof(cls) == size
    dtype = getattr(cudla, DTYPES[name])
    assert dtype.itemsize == size
    assert [(n, dtype.fields[n][1]) for n in dtype.names] == fields
    public = {a for a in dir(cls) if not a.startswith("_")}
    assert PROPERTIES[name] | {"ptr", "from_buffer", "from_data", "from_ptr"} <= public


def test_module_exports_what_upstream_exports():
    upstream = {  # dir(cuda.bindings.cudla) of cuda-bindings 13.3.1, private names aside
        "AccessPermissionFlags", "CudlaError", "DevAttribute", "DevAttributeType",
        "ExternalMemoryHandleDesc", "ExternalSemaphoreHandleDesc", "Fence", "FenceType", "Mode",
        "ModuleAttribute", "ModuleAttributeType", "ModuleLoadFlags", "ModuleTensorDescriptor",
        "SignalEvents", "Status", "SubmissionFlags", "Task", "WaitEvents", "check_status",
        "create_device", "destroy_device", "dev_attribute_dtype", "device_get_attribute",
        "device_get_count", "external_memory_handle_desc_dtype",
        "external_semaphore_handle_desc_dtype", "fence_dtype", "get_last_error", "get_version",
        "mem_register", "mem_unregister", "module_attribute_dtype", "module_get_attributes",
        "module_load_from_memory", "module_tensor_descriptor_dtype", "module_unload",
        "set_task_timeout_in_ms", "signal_events_dtype", "submit_task", "task_dtype",
        "wait_events_dtype"}
    assert upstream <= set(cudla.__all__)
    assert all(hasattr(cudla, n) for n in cudla.__all__)


def test_version_count_and_device_attributes():
    assert cudla.get_version() == 1_005_000
    assert cudla.device_get_count() == 1
    dev = cudla.create_device(0, cudla.Mode.CUDA_DLA)
    try:
        ua = cudla.device_get_attribute(dev, cudla.DevAttributeType.UNIFIED_ADDRESSING)
        ver = cudla.device_get_attribute(dev, cudla.DevAttributeType.DEVICE_VERSION)
        assert isinstance(ua, cudla.DevAttribute) and ua.unified_addressing_supported == 1
        assert ver.device_version == 2
        assert cudla.get_last_error(dev) == 0
    finally:
        cudla.destroy_device(dev)
