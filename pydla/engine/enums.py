"""The enums of ``cuda.bindings.cudla`` with their exact values (``pydla.cudla`` re-exports).

Names follow cuda-bindings 13.3; the aliases that 13.5 added (UPPER_SNAKE ``Status`` names,
short flag names, ``ScratchMemoryConfig``) are defined after them, so the 13.3 spelling stays
the canonical ``.name`` and errors print as ``ErrorInvalidDevice (8)``.
"""

from __future__ import annotations

from enum import IntEnum


class Status(IntEnum):
    Success = 0
    ErrorInvalidParam = 1
    ErrorOutOfResources = 2
    ErrorCreationFailed = 3
    ErrorInvalidAddress = 4
    ErrorOs = 5
    ErrorCuda = 6
    ErrorUmd = 7
    ErrorInvalidDevice = 8
    ErrorInvalidAttribute = 9
    ErrorIncompatibleDlaSWVersion = 10
    ErrorMemoryRegistered = 11
    ErrorInvalidModule = 12
    ErrorUnsupportedOperation = 13
    ErrorNvSci = 14
    ErrorDriverNotFound = 15
    ErrorDlaErrInvalidInput = 0x40000001
    ErrorDlaErrInvalidPreAction = 0x40000002
    ErrorDlaErrNoMem = 0x40000003
    ErrorDlaErrProcessorBusy = 0x40000004
    ErrorDlaErrTaskStatusMismatch = 0x40000005
    ErrorDlaErrEngineTimeout = 0x40000006
    ErrorDlaErrDataMismatch = 0x40000007
    ErrorUnknown = 0x7FFFFFFF
    # cuda-bindings 13.5 spellings (aliases)
    SUCCESS = 0
    ERROR_INVALID_PARAM = 1
    ERROR_OUT_OF_RESOURCES = 2
    ERROR_CREATION_FAILED = 3
    ERROR_INVALID_ADDRESS = 4
    ERROR_OS = 5
    ERROR_CUDA = 6
    ERROR_UMD = 7
    ERROR_INVALID_DEVICE = 8
    ERROR_INVALID_ATTRIBUTE = 9
    ERROR_INCOMPATIBLE_DLA_SW_VERSION = 10
    ERROR_MEMORY_REGISTERED = 11
    ERROR_INVALID_MODULE = 12
    ERROR_UNSUPPORTED_OPERATION = 13
    ERROR_NV_SCI = 14
    ERROR_DRIVER_NOT_FOUND = 15
    ERROR_DLA_ERR_INVALID_INPUT = 0x40000001
    ERROR_DLA_ERR_INVALID_PRE_ACTION = 0x40000002
    ERROR_DLA_ERR_NO_MEM = 0x40000003
    ERROR_DLA_ERR_PROCESSOR_BUSY = 0x40000004
    ERROR_DLA_ERR_TASK_STATUS_MISMATCH = 0x40000005
    ERROR_DLA_ERR_ENGINE_TIMEOUT = 0x40000006
    ERROR_DLA_ERR_DATA_MISMATCH = 0x40000007
    ERROR_UNKNOWN = 0x7FFFFFFF


class Mode(IntEnum):
    CUDA_DLA = 0
    STANDALONE = 1


class ModuleAttributeType(IntEnum):
    NUM_INPUT_TENSORS = 0
    NUM_OUTPUT_TENSORS = 1
    INPUT_TENSOR_DESCRIPTORS = 2
    OUTPUT_TENSOR_DESCRIPTORS = 3
    NUM_OUTPUT_TASK_STATISTICS = 4
    OUTPUT_TASK_STATISTICS_DESCRIPTORS = 5


class DevAttributeType(IntEnum):
    UNIFIED_ADDRESSING = 0
    DEVICE_VERSION = 1


class FenceType(IntEnum):
    NVSCISYNC_FENCE = 1
    NVSCISYNC_FENCE_SOF = 2
    FENCE = 1
    FENCE_SOF = 2


class ModuleLoadFlags(IntEnum):
    MODULE_DEFAULT = 0
    MODULE_ENABLE_FAULT_DIAGNOSTICS = 1
    DEFAULT = 0
    ENABLE_FAULT_DIAGNOSTICS = 1


class SubmissionFlags(IntEnum):
    SUBMIT_NOOP = 1
    SUBMIT_SKIP_LOCK_ACQUIRE = 2
    SUBMIT_DIAGNOSTICS_TASK = 4
    NOOP = 1
    SKIP_LOCK_ACQUIRE = 2
    DIAGNOSTICS_TASK = 4


class AccessPermissionFlags(IntEnum):
    READ_WRITE_PERM = 0
    READ_ONLY_PERM = 1
    TASK_STATISTICS = 2


class ScratchMemoryConfig(IntEnum):
    DEFAULT = 0
    SHARED_STATIC = 2
    CONFIG_MAX = 0x7FFFFFFF
    SCRATCH_MEMORY_DEFAULT = 0
    SCRATCH_MEMORY_SHARED_STATIC = 2
    MAX = 0x7FFFFFFF


# Tensor descriptor codes (cudla.h constants; upstream Python has no enums for them).
class DataFormat(IntEnum):
    UNKNOWN = 0
    NCHW = 1
    NHWC = 2
    NCxHWx = 3


class DataType(IntEnum):
    UNKNOWN = 0
    FLOAT = 1
    HALF = 2
    INT16 = 3
    INT8 = 4
    UINT8 = 5
    UINT16 = 6


class DataCategory(IntEnum):
    IMAGE = 0
    WEIGHT = 1
    FEATURE = 2
    PLANAR = 3
    BIAS = 4


class PixelMapping(IntEnum):
    PITCH_LINEAR = 0
    BLOCK_LINEAR = 1


class PixelFormat(IntEnum):
    FEATURE = 36
    UNKNOWN = 37
