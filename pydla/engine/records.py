"""cuDLA's records as fixed-layout ctypes structures (the C layout of ``cudla.h``).

Each record behaves like its ``cuda.bindings.cudla`` counterpart: zero-filled when new,
``int(obj)`` and ``obj.ptr`` give the address of its memory, ``==`` compares the bytes,
snake_case properties read and write the C fields (``ValueError`` on a read-only record),
``from_buffer``/``from_data``/``from_ptr`` wrap existing memory, and a numpy dtype with the
same layout (``task_dtype`` …) describes arrays of them.

The C fields themselves carry a leading underscore (``_moduleHandle``) so the Python names
can be the upstream ones. Pointer-array fields (``Task.input_tensor`` …) are stored in numpy
arrays that live as long as the record's memory, and both are entered in the memory map,
which is how ``submit_task`` can read tasks back from a bare integer address safely.
"""

from __future__ import annotations

import ctypes
import operator
from collections.abc import Iterable
from typing import Any

import numpy as np

from pydla.engine.faults import InvalidAddressError
from pydla.engine.memory import DEVICE, HOST, MEMORY, RECORD, Region, as_bytes
from pydla.formats import TensorDescriptor

ALL_KINDS = (DEVICE, HOST, RECORD)
_u8, _u32, _u64, _i32 = ctypes.c_uint8, ctypes.c_uint32, ctypes.c_uint64, ctypes.c_int32
NAME_BYTES = 81  # char name[80 + 1]
NUM_STRIDES = 8


class _Record:
    """Upstream record behaviour shared by every layout below."""

    _readonly = False
    _owner: Any = None

    @property
    def ptr(self) -> int:
        """The address of the record's memory."""
        return self._address()

    def __int__(self) -> int:
        return self._address()

    def _address(self) -> int:
        self._region()  # an address handed out must be one pydla can read back
        return ctypes.addressof(self)  # type: ignore[arg-type]

    def _region(self) -> Region:
        addr, size = ctypes.addressof(self), ctypes.sizeof(self)  # type: ignore[arg-type]
        try:
            return MEMORY.find(addr, size, ALL_KINDS)
        except InvalidAddressError:
            base = self
            while getattr(base, "_b_base_", None) is not None:  # element of a ctypes array
                base = base._b_base_  # type: ignore[attr-defined]
            return MEMORY.track(base, RECORD)

    def _check_writable(self) -> None:
        if self._readonly:
            raise ValueError(f"This {type(self).__name__} instance is read-only")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, type(self)) and bytes(self) == bytes(other)  # type: ignore

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"<pydla.cudla.{type(self).__name__} object at {hex(id(self))}>"

    def __setitem__(self, key: Any, val: Any) -> None:
        if key == 0 and isinstance(val, np.ndarray):
            self._check_writable()
            data = as_bytes(np.ascontiguousarray(val))
            size = ctypes.sizeof(self)  # type: ignore[arg-type]
            if data.size != size:
                raise ValueError(f"array holds {data.size} bytes, a {type(self).__name__} "
                                 f"has {size}")
            ctypes.memmove(ctypes.addressof(self), data.ctypes.data, size)  # type: ignore
        else:
            setattr(self, key, val)

    @classmethod
    def from_buffer(cls, buffer: Any) -> Any:
        """A record over the memory of a buffer of exactly ``sizeof`` bytes."""
        try:
            data = np.frombuffer(buffer, dtype=np.uint8)
        except (TypeError, ValueError, BufferError):
            raise TypeError("buffer argument does not support the buffer protocol") from None
        if data.size != ctypes.sizeof(cls):  # type: ignore[arg-type]
            raise ValueError(f"buffer length must be {ctypes.sizeof(cls)} bytes")  # type: ignore
        return cls._wrap(data.ctypes.data, not data.flags.writeable, buffer)

    @classmethod
    def from_data(cls, data: Any) -> Any:
        """A record over a one-element numpy array of the record's dtype."""
        if isinstance(data, cls):
            return data
        if not isinstance(data, np.ndarray):
            raise TypeError("data argument must be a NumPy ndarray")
        if data.size != 1:
            raise ValueError("data array must have a size of 1")
        if data.dtype != cls._dtype:  # type: ignore[attr-defined]
            raise ValueError(f"data array must be of dtype {cls._dtype_name}")  # type: ignore
        return cls._wrap(data.ctypes.data, not data.flags.writeable, data)

    @classmethod
    def from_ptr(cls, ptr: int, readonly: bool = False, owner: Any = None) -> Any:
        """A record at ``ptr``: a view when ``owner`` holds the memory, else a copy. The
        address must lie in ``owner``'s buffer or in memory pydla knows."""
        ptr = operator.index(ptr)
        if ptr == 0:
            raise ValueError("ptr must not be null (0)")
        if owner is None:
            obj = cls.from_buffer_copy(_known(ptr, ctypes.sizeof(cls)))  # type: ignore
            obj._readonly = readonly
            return obj
        return cls._wrap(ptr, readonly, owner)

    @classmethod
    def _wrap(cls, ptr: int, readonly: bool, owner: Any) -> Any:
        size = ctypes.sizeof(cls)  # type: ignore[arg-type]
        try:
            data = np.frombuffer(owner, dtype=np.uint8)
        except (TypeError, ValueError, BufferError):
            data = None
        if data is None:
            _known(ptr, size)
        else:
            lo = data.ctypes.data
            if not lo <= ptr <= lo + data.size - size:
                raise ValueError(f"ptr {ptr:#x} is outside the owner's {data.size}-byte buffer")
            if not data.flags.writeable:  # never alias memory that must not be written
                obj = cls.from_buffer_copy(data[ptr - lo:ptr - lo + size])  # type: ignore
                obj._readonly = True
                return obj
        obj = cls.from_address(ptr)  # type: ignore[attr-defined]
        obj._owner, obj._readonly = owner, readonly
        if data is not None:
            MEMORY.track(owner, RECORD, lifetime=obj)
        return obj


def _known(ptr: int, size: int) -> np.ndarray:
    try:
        return MEMORY.view(ptr, size, ALL_KINDS)
    except InvalidAddressError as e:
        raise ValueError(str(e)) from None


class _Field:
    """A scalar C field under its upstream name, range-checked like Cython's conversions."""

    def __init__(self, c_name: str, ctype: Any) -> None:
        self.c_name = c_name
        bits = ctypes.sizeof(ctype) * 8
        signed = ctype(-1).value == -1
        self.lo, self.hi = (-(1 << (bits - 1)), 1 << (bits - 1)) if signed else (0, 1 << bits)

    def __get__(self, obj: Any, objtype: Any = None) -> Any:
        return self if obj is None else getattr(obj, self.c_name)

    def __set__(self, obj: _Record, value: Any) -> None:
        obj._check_writable()
        v = operator.index(value)
        if not self.lo <= v < self.hi:
            raise OverflowError(f"value {v} is out of range for this field")
        setattr(obj, self.c_name, v)


def _keep(obj: _Record, c_name: str, arr: Any) -> int:
    """Tie ``arr`` to the record's memory and return its address for the pointer field."""
    region = obj._region()
    MEMORY.track(arr, RECORD)
    field = getattr(type(obj), c_name)
    region.keep[ctypes.addressof(obj) + field.offset] = arr  # type: ignore[arg-type]
    return as_bytes(arr).ctypes.data


class _PointerList:
    """A ``uint64_t**`` field with its count: assign a list of ints, read an int64 array."""

    def __init__(self, ptr_field: str, count_field: str) -> None:
        self.ptr_field, self.count_field = ptr_field, count_field

    def __get__(self, obj: Any, objtype: Any = None) -> Any:
        if obj is None:
            return self
        n, p = getattr(obj, self.count_field), getattr(obj, self.ptr_field)
        if n == 0 or p == 0:
            return np.zeros(0, np.int64)
        arr = _known(p, 8 * n).view(np.int64)
        if obj._readonly:
            arr = arr.view()
            arr.flags.writeable = False
        return arr

    def __set__(self, obj: _Record, val: Iterable[int]) -> None:
        obj._check_writable()
        values = np.array([operator.index(v) for v in val], dtype=np.uint64)
        setattr(obj, self.count_field, values.size)
        if values.size:
            setattr(obj, self.ptr_field, _keep(obj, self.ptr_field, values))


class _FenceList:
    """A ``CudlaFence*`` field with its count: assign Fence records, read Fence views."""

    def __init__(self, ptr_field: str, count_field: str) -> None:
        self.ptr_field, self.count_field = ptr_field, count_field

    def __get__(self, obj: Any, objtype: Any = None) -> Any:
        if obj is None:
            return self
        n, p = getattr(obj, self.count_field), getattr(obj, self.ptr_field)
        if n == 0 or p == 0:
            return []
        size = ctypes.sizeof(Fence)
        try:
            owner = MEMORY.find(p, size * n, ALL_KINDS).buffer()
        except InvalidAddressError as e:
            raise ValueError(str(e)) from None
        return [Fence._wrap(p + i * size, obj._readonly, owner) for i in range(n)]

    def __set__(self, obj: _Record, val: Any) -> None:
        obj._check_writable()
        fences = [val] if isinstance(val, Fence) else list(val)
        if not all(isinstance(f, Fence) for f in fences):
            raise TypeError("assign Fence records (or a list of them)")
        arr = (Fence * len(fences))(*fences)
        setattr(obj, self.count_field, len(fences))
        if fences:
            setattr(obj, self.ptr_field, _keep(obj, self.ptr_field, arr))


class _Name:
    """``char name[81]``: a str of at most 80 UTF-8 bytes, NUL-padded."""

    def __get__(self, obj: Any, objtype: Any = None) -> Any:
        return self if obj is None else obj._name.decode("utf-8", "replace")

    def __set__(self, obj: _Record, val: str) -> None:
        obj._check_writable()
        raw = val.encode()
        if len(raw) >= NAME_BYTES:
            raise ValueError("String too long for field name, max length is 80")
        ctypes.memmove(ctypes.addressof(obj) + type(obj)._name.offset,  # type: ignore
                       raw.ljust(NAME_BYTES, b"\0"), NAME_BYTES)


class _Stride:
    """``uint32_t stride[8]``: reads as a uint32 array sharing the record's memory."""

    def __get__(self, obj: Any, objtype: Any = None) -> Any:
        if obj is None:
            return self
        arr = np.ctypeslib.as_array(obj._stride)
        if obj._readonly:
            arr.flags.writeable = False
        return arr

    def __set__(self, obj: _Record, val: Any) -> None:
        obj._check_writable()
        if len(val) != NUM_STRIDES:
            raise ValueError(f"Expected length {NUM_STRIDES} for field stride, got {len(val)}")
        np.ctypeslib.as_array(obj._stride)[:] = np.asarray(val, dtype=np.uint32)


def _finish(cls: Any, dtype_name: str, numpy_fields: list[tuple[str, str, Any]]) -> np.dtype:
    """Attach the numpy dtype (upstream field names, C offsets) to a record class."""
    dtype = np.dtype({"names": [n for n, _, _ in numpy_fields],
                      "formats": [f for _, _, f in numpy_fields],
                      "offsets": [getattr(cls, c).offset for _, c, _ in numpy_fields],
                      "itemsize": ctypes.sizeof(cls)})
    cls._dtype, cls._dtype_name = dtype, dtype_name
    return dtype


class ExternalMemoryHandleDesc(_Record, ctypes.Structure):
    _fields_ = [("_extBufObject", _u64), ("_size", _u64)]
    ext_buf_object = _Field("_extBufObject", _u64)
    size_ = _Field("_size", _u64)


class ExternalSemaphoreHandleDesc(_Record, ctypes.Structure):
    _fields_ = [("_extSyncObject", _u64)]
    ext_sync_object = _Field("_extSyncObject", _u64)


class ModuleTensorDescriptor(_Record, ctypes.Structure):
    _fields_ = [("_name", ctypes.c_char * NAME_BYTES), ("_size", _u64), ("_n", _u64),
                ("_c", _u64), ("_h", _u64), ("_w", _u64), ("_dataFormat", _u8),
                ("_dataType", _u8), ("_dataCategory", _u8), ("_pixelFormat", _u8),
                ("_pixelMapping", _u8), ("_stride", _u32 * NUM_STRIDES)]
    name = _Name()
    size_ = _Field("_size", _u64)
    n = _Field("_n", _u64)
    c = _Field("_c", _u64)
    h = _Field("_h", _u64)
    w = _Field("_w", _u64)
    data_format = _Field("_dataFormat", _u8)
    data_type = _Field("_dataType", _u8)
    data_category = _Field("_dataCategory", _u8)
    pixel_format = _Field("_pixelFormat", _u8)
    pixel_mapping = _Field("_pixelMapping", _u8)
    stride = _Stride()

    def __repr__(self) -> str:
        """What a reader of a module's I/O needs at a glance: name, type:format, logical
        n,c,h,w, bytes and strides (the upstream repr shows only the address)."""
        from pydla.engine.layout import dtype_of, format_of

        try:
            kind = f"{dtype_of(self).short}:{format_of(self)}"
        except ValueError:  # a zero-filled or hand-made record: show the raw codes
            kind = f"data_type={self.data_type} data_format={self.data_format}"
        strides = tuple(int(s) for s in self._stride[:4])
        return (f"<pydla.cudla.ModuleTensorDescriptor {self.name!r} {kind} n,c,h,w="
                f"({self.n}, {self.c}, {self.h}, {self.w}) size={self.size_:,} "
                f"stride={strides}>")


class Fence(_Record, ctypes.Structure):
    _fields_ = [("_fence", _u64), ("_type", _i32)]
    fence = _Field("_fence", _u64)
    type = _Field("_type", _i32)


class DevAttribute(_Record, ctypes.Union):
    _fields_ = [("_unifiedAddressingSupported", _u8), ("_deviceVersion", _u32)]
    unified_addressing_supported = _Field("_unifiedAddressingSupported", _u8)
    device_version = _Field("_deviceVersion", _u32)


class ModuleAttribute(_Record, ctypes.Union):
    _fields_ = [("_numInputTensors", _u32), ("_numOutputTensors", _u32),
                ("_inputTensorDesc", _u64), ("_outputTensorDesc", _u64)]
    num_input_tensors = _Field("_numInputTensors", _u32)
    num_output_tensors = _Field("_numOutputTensors", _u32)
    input_tensor_desc = _Field("_inputTensorDesc", _u64)
    output_tensor_desc = _Field("_outputTensorDesc", _u64)


class WaitEvents(_Record, ctypes.Structure):
    _fields_ = [("_preFences", _u64), ("_numEvents", _u32)]
    pre_fences = _FenceList("_preFences", "_numEvents")


class SignalEvents(_Record, ctypes.Structure):
    _fields_ = [("_devPtrs", _u64), ("_eofFences", _u64), ("_numEvents", _u32)]
    dev_ptrs = _PointerList("_devPtrs", "_numEvents")
    eof_fences = _FenceList("_eofFences", "_numEvents")


class Task(_Record, ctypes.Structure):
    _fields_ = [("_moduleHandle", _u64), ("_outputTensor", _u64), ("_numOutputTensors", _u32),
                ("_numInputTensors", _u32), ("_inputTensor", _u64), ("_waitEvents", _u64),
                ("_signalEvents", _u64)]
    module_handle = _Field("_moduleHandle", _u64)
    output_tensor = _PointerList("_outputTensor", "_numOutputTensors")
    input_tensor = _PointerList("_inputTensor", "_numInputTensors")
    wait_events = _Field("_waitEvents", _u64)
    signal_events = _Field("_signalEvents", _u64)


_ptr = np.intp
external_memory_handle_desc_dtype = _finish(
    ExternalMemoryHandleDesc, "external_memory_handle_desc_dtype",
    [("ext_buf_object", "_extBufObject", _ptr), ("size_", "_size", np.uint64)])
external_semaphore_handle_desc_dtype = _finish(
    ExternalSemaphoreHandleDesc, "external_semaphore_handle_desc_dtype",
    [("ext_sync_object", "_extSyncObject", _ptr)])
module_tensor_descriptor_dtype = _finish(
    ModuleTensorDescriptor, "module_tensor_descriptor_dtype",
    [("name", "_name", (np.int8, NAME_BYTES)), ("size_", "_size", np.uint64),
     ("n", "_n", np.uint64), ("c", "_c", np.uint64), ("h", "_h", np.uint64),
     ("w", "_w", np.uint64), ("data_format", "_dataFormat", np.uint8),
     ("data_type", "_dataType", np.uint8), ("data_category", "_dataCategory", np.uint8),
     ("pixel_format", "_pixelFormat", np.uint8), ("pixel_mapping", "_pixelMapping", np.uint8),
     ("stride", "_stride", (np.uint32, NUM_STRIDES))])
fence_dtype = _finish(Fence, "fence_dtype",
                      [("fence", "_fence", _ptr), ("type", "_type", np.int32)])
dev_attribute_dtype = _finish(
    DevAttribute, "dev_attribute_dtype",
    [("unified_addressing_supported", "_unifiedAddressingSupported", np.uint8),
     ("device_version", "_deviceVersion", np.uint32)])
module_attribute_dtype = _finish(
    ModuleAttribute, "module_attribute_dtype",
    [("num_input_tensors", "_numInputTensors", np.uint32),
     ("num_output_tensors", "_numOutputTensors", np.uint32),
     ("input_tensor_desc", "_inputTensorDesc", _ptr),
     ("output_tensor_desc", "_outputTensorDesc", _ptr)])
wait_events_dtype = _finish(WaitEvents, "wait_events_dtype",
                            [("pre_fences", "_preFences", _ptr),
                             ("num_events", "_numEvents", np.uint32)])
signal_events_dtype = _finish(SignalEvents, "signal_events_dtype",
                              [("dev_ptrs", "_devPtrs", _ptr), ("eof_fences", "_eofFences", _ptr),
                               ("num_events", "_numEvents", np.uint32)])
task_dtype = _finish(
    Task, "task_dtype",
    [("module_handle", "_moduleHandle", _ptr), ("output_tensor", "_outputTensor", _ptr),
     ("num_output_tensors", "_numOutputTensors", np.uint32),
     ("num_input_tensors", "_numInputTensors", np.uint32),
     ("input_tensor", "_inputTensor", _ptr), ("wait_events", "_waitEvents", _ptr),
     ("signal_events", "_signalEvents", _ptr)])


def descriptor_record(d: TensorDescriptor) -> ModuleTensorDescriptor:
    """A read-only ModuleTensorDescriptor copy of an engine descriptor (names cut to 80
    bytes at a UTF-8 boundary)."""
    rec = ModuleTensorDescriptor()
    rec.name = d.name.encode()[:NAME_BYTES - 1].decode("utf-8", "ignore")
    rec.size_, rec.n, rec.c, rec.h, rec.w = d.size, d.n, d.c, d.h, d.w
    rec.data_format, rec.data_type, rec.data_category = d.data_format, d.data_type, d.data_category
    rec.pixel_format, rec.pixel_mapping = d.pixel_format, d.pixel_mapping
    rec.stride = list(d.stride)
    rec._readonly = True
    return rec
