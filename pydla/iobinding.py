"""``IOBinding``: onnxruntime's I/O binding over a ``pydla.InferenceSession``.

    binding = sess.io_binding()
    binding.bind_input("x", x)             # a torch/CuPy/JAX tensor, any DLPack or CUDA
                                           # Array Interface object, or a numpy array
    binding.bind_output("y", y)            # a buffer to write, or "cuda" / "cpu"
    sess.run_with_iobinding(binding)       # or (binding, stream=torch.cuda.current_stream())
    [y] = binding.get_outputs()            # the bound buffers, or arrays pydla allocated

On ``CUDAExecutionProvider`` device inputs are read and outputs written on the GPU: one
device-to-device copy into and out of the module's own buffers (its CUDA graph holds fixed
addresses), never a trip through host memory. Device tensors are viewed at run time through
``cuda.core``'s ``StridedMemoryView``, which orders the read after the producer's work —
DLPack's stream handshake, or an event on the CUDA Array Interface's ``stream``. With a
``stream`` (an int, or any object with ``__cuda_stream__``, such as torch's or CuPy's
streams; or the provider option ``user_compute_stream``, as onnxruntime spells it) the run
is queued on that stream and the call returns without waiting, ordered with the caller's
own GPU work as a cuDLA task joins its stream; without one it runs on the session's stream
and waits, as onnxruntime's default does.

onnxruntime's pointer forms work as well: ``bind_input(name, "cuda", 0, np.float32, shape,
ptr)`` and ``bind_output(name, "cuda", 0, np.float32, shape, ptr)`` (the caller orders
those buffers itself). On ``CPUExecutionProvider`` the binding takes and returns host
arrays (device tensors are copied to the host), so code written against the binding runs
on either provider.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from pydla.session import InferenceSession, _Tensor


@dataclass
class _Bound:
    """One tensor as a run sees it: where it lives, and what to hand back."""

    ptr: int               # device address (device) or 0 (host)
    device: bool
    shape: tuple[int, ...]
    dtype: np.dtype
    obj: Any = None        # the caller's object, or the array pydla allocated
    host: np.ndarray | None = None


@dataclass
class _Array:
    """A caller's array object, viewed at run time (on the stream the run uses)."""

    obj: Any


_Binding = _Bound | _Array


class IOBinding:
    """Inputs and outputs bound to buffers for ``InferenceSession.run_with_iobinding``."""

    def __init__(self, session: InferenceSession) -> None:
        self._session = session
        self._inputs: dict[str, _Binding] = {}
        self._outputs: dict[str, _Binding | str] = {}  # a str: allocate on that device
        self._results: dict[str, _Bound] = {}
        self._stream = 0  # the stream of the last run, when the caller's (0: waited for)
        self._keep: list[Any] = []  # scratch device memory of the last run

    # -- inputs ---------------------------------------------------------------------------
    def bind_input(self, name: str, device_type: Any = None, device_id: int = 0,
                   element_type: Any = None, shape: Sequence[int] | None = None,
                   buffer_ptr: int | None = None) -> None:
        """``bind_input(name, tensor)``, or onnxruntime's ``bind_input(name, device_type,
        device_id, element_type, shape, buffer_ptr)``."""
        self._session._check_io_name(name, "input")
        if isinstance(device_type, str):
            self._inputs[name] = _from_pointer(f"input {name!r}", device_type, element_type,
                                               shape, buffer_ptr)
        else:
            self._inputs[name] = _Array(device_type)

    def bind_cpu_input(self, name: str, array: Any) -> None:
        self._session._check_io_name(name, "input")
        host = np.ascontiguousarray(array)
        self._inputs[name] = _Bound(0, False, host.shape, host.dtype, host, host)

    # -- outputs --------------------------------------------------------------------------
    def bind_output(self, name: str, device_type: Any = "cpu", device_id: int = 0,
                    element_type: Any = None, shape: Sequence[int] | None = None,
                    buffer_ptr: int | None = None) -> None:
        """``bind_output(name, tensor)`` writes into the caller's buffer;
        ``bind_output(name, "cuda")`` / ``"cpu"`` lets pydla allocate it there;
        ``bind_output(name, "cuda", 0, np.float32, shape, ptr)`` is onnxruntime's form."""
        self._session._check_io_name(name, "output")
        if not isinstance(device_type, str):
            self._outputs[name] = _Array(device_type)
        elif buffer_ptr is not None:
            self._outputs[name] = _from_pointer(f"output {name!r}", device_type,
                                                element_type, shape, buffer_ptr)
        elif device_type.lower() in ("cpu", "cuda"):
            self._outputs[name] = device_type.lower()
        else:
            raise _error(f"output {name!r}: device type {device_type!r}, expected 'cpu' or "
                         "'cuda'")

    def clear_binding_inputs(self) -> None:
        self._inputs.clear()

    def clear_binding_outputs(self) -> None:
        self._outputs.clear()
        self._results.clear()

    def synchronize_inputs(self) -> None:
        """Inputs are ordered at run time (cuda.core's stream handshake): nothing to do."""

    def synchronize_outputs(self) -> None:
        """Wait for a run queued on a caller's stream."""
        if self._stream:
            from pydla.backends.cuda.driver import stream_synchronize

            stream_synchronize(self._stream)

    def get_outputs(self) -> list[Any]:
        """The outputs of the last run, in bind order: the caller's own buffers, or the
        arrays pydla allocated (CuPy arrays on the GPU, numpy arrays on the host)."""
        return [b.obj for b in self._last()]

    def copy_outputs_to_cpu(self) -> list[np.ndarray]:
        self.synchronize_outputs()
        out = []
        for b in self._last():
            if b.device:
                host = np.empty(b.shape, b.dtype)
                _copy_to_host(host, b.ptr)
                out.append(host)
            else:
                out.append(b.host if b.host is not None else np.asarray(b.obj))
        return out

    def _last(self) -> list[_Bound]:
        if not self._results:
            raise _error("no outputs yet: bind outputs and call run_with_iobinding(binding)")
        return list(self._results.values())


def run(binding: IOBinding, inputs: list[_Tensor], outputs: list[_Tensor],
        module_for: Any, on_gpu: bool, stream: int | None) -> None:
    """One ``run_with_iobinding``: ``module_for(shapes)`` gives the session's module for the
    bound input shapes; ``stream`` is the caller's stream (None: the session's, waited)."""
    missing = [t.name for t in inputs if t.name not in binding._inputs]
    if missing:
        raise _error(f"inputs {missing} are not bound")
    if not binding._outputs:
        raise _error("no outputs are bound: bind_output(name, ...) for each output you want")
    consumer = int(stream) if stream else 0
    if on_gpu and not consumer:
        consumer = module_stream()
    views = {t.name: _resolve(f"input {t.name!r}", binding._inputs[t.name], consumer, True)
             for t in inputs}
    from pydla.session import _check_type

    for t in inputs:
        _check_type(t, views[t.name].shape, views[t.name].dtype)
    module = module_for(tuple(views[t.name].shape for t in inputs))
    out_tensors = {t.name: t for t in outputs}
    names = dict(zip(module.output_names, module.program.outputs))
    binding._keep = []
    if on_gpu and hasattr(module.bound, "enqueue"):
        _run_gpu(binding, module, views, out_tensors, names, consumer, bool(stream))
    else:
        _run_host(binding, module, views, inputs, out_tensors)


def _run_host(binding: IOBinding, module: Any, views: dict[str, _Bound],
              inputs: list[_Tensor], out_tensors: dict[str, _Tensor]) -> None:
    from pydla.session import _logical, _storage

    feeds = {}
    for t in inputs:
        b = views[t.name]
        host = b.host
        if host is None:  # a device tensor fed to a CPU session: onnxruntime copies it too
            host = np.empty(b.shape, b.dtype)
            _copy_to_host(host, b.ptr)
        feeds[t.name] = _storage(host, t.dtype)
    results = dict(zip(module.output_names, module.run(feeds)))
    binding._stream = 0
    binding._results = {}
    for name, spec in binding._outputs.items():
        t = out_tensors[name]
        y = _logical(results[name], t.dtype)
        if isinstance(spec, str):
            if spec == "cuda":
                raise _error(f"output {name!r}: the session runs on CPUExecutionProvider; "
                             "bind it to 'cpu' or to a buffer")
            binding._results[name] = _Bound(0, False, y.shape, y.dtype, y, y)
            continue
        target = _resolve(f"output {name!r}", spec, 0, False)
        _check_out(name, t, target, y.shape)
        if target.device:
            _copy_to_device(target.ptr, np.ascontiguousarray(y))
        else:
            np.copyto(target.host, y)
        binding._results[name] = target


def _run_gpu(binding: IOBinding, module: Any, views: dict[str, _Bound],
             out_tensors: dict[str, _Tensor], names: dict[str, Any], stream: int,
             caller_stream: bool) -> None:
    import cupy as cp

    from pydla.backends.cuda.driver import memcpy_dtoh_async, stream_synchronize

    program = module.program
    given = [tuple(views[name].shape) for name in module.input_names]
    planned = [program.tensors[io.tensor].shape for io in program.inputs]
    if given != planned:  # an optimization profile's other plans run through session.run
        raise _error(f"inputs of shapes {given} on device buffers: the loadable's bound "
                     f"program takes {planned} (other shapes of its optimization profile "
                     "run through run(), on host copies)")
    for io in (*program.inputs, *program.outputs):
        t = program.tensors[io.tensor]
        if io.format != "chw" or io.dtype is not t.dtype:
            raise _error(f"tensor {t.name!r}: the loadable's I/O format ({io.format}, "
                         f"{io.dtype.name}) is not the tensor itself; bind through pydla.cudla")
    keep: list[Any] = []
    with cp.cuda.ExternalStream(stream):  # scratch memory freed in this stream's order
        in_ptrs = []
        for name in module.input_names:
            b = views[name]
            if not b.device:
                dev = cp.asarray(np.ascontiguousarray(b.host).view(np.uint8))
                keep.append(dev)
                in_ptrs.append(int(dev.data.ptr))
            else:
                in_ptrs.append(b.ptr)
        out_ptrs, results, copies = [], {}, []
        for name in module.output_names:
            t = out_tensors[name]
            shape = program.tensors[names[name].tensor].shape
            spec = binding._outputs.get(name)
            target = None if spec is None or isinstance(spec, str) else \
                _resolve(f"output {name!r}", spec, stream, False)
            if target is not None:
                _check_out(name, t, target, shape)
            if target is not None and target.device:
                out_ptrs.append(target.ptr)
                results[name] = target
                continue
            dtype = _np_type(t)
            if spec == "cuda":
                if dtype.itemsize == 2 and dtype.kind == "V":
                    raise _error(f"output {name!r} is bfloat16, which CuPy cannot hold: bind a "
                                 "bfloat16 device tensor (torch.empty(..., dtype=torch.bfloat16,"
                                 " device='cuda'))")
                dev = cp.empty(shape, dtype)
                out_ptrs.append(int(dev.data.ptr))
                results[name] = _Bound(int(dev.data.ptr), True, shape, dtype, dev)
                continue
            dev = cp.empty(int(np.prod(shape, dtype=np.int64)) * dtype.itemsize, np.uint8)
            keep.append(dev)
            out_ptrs.append(int(dev.data.ptr))
            if spec is not None:  # to the host: pydla's array or the caller's
                host = target.host if target is not None else np.empty(shape, dtype)
                copies.append((host, int(dev.data.ptr)))
                results[name] = target or _Bound(0, False, shape, dtype, host, host)
        module.bound.enqueue(stream, in_ptrs, out_ptrs)
        for host, ptr in copies:
            memcpy_dtoh_async(host.ctypes.data, ptr, host.nbytes, stream)
    if copies or not caller_stream:
        stream_synchronize(stream)
    binding._keep = keep
    binding._stream = stream if caller_stream else 0
    binding._results = {n: results[n] for n in binding._outputs}


def _resolve(what: str, spec: _Binding, stream: int, readonly: bool) -> _Bound:
    if isinstance(spec, _Bound):
        return spec
    obj = spec.obj
    if not (hasattr(obj, "__dlpack__") or hasattr(obj, "__cuda_array_interface__")) or \
            isinstance(obj, np.ndarray):
        host = np.asarray(obj)
        if not readonly and not host.flags.c_contiguous:
            raise _error(f"{what}: the buffer is not C-contiguous")
        host = host if not readonly else np.ascontiguousarray(host)
        return _Bound(0, False, host.shape, host.dtype, obj, host)
    if hasattr(obj, "__dlpack_device__") and int(obj.__dlpack_device__()[0]) == 1:
        host = np.from_dlpack(obj)  # a host tensor (torch on the CPU)
        return _Bound(0, False, host.shape, host.dtype, obj, host)
    view = strided_view(obj, stream or -1)
    if not view.is_device_accessible or view.device_id < 0:
        raise _error(f"{what}: the tensor is neither on the host nor in GPU memory")
    if not readonly and view.readonly:
        raise _error(f"{what}: the buffer is read-only")
    shape = tuple(int(d) for d in view.shape)
    strides = view.strides
    if strides is not None and tuple(strides) != _c_strides(shape):
        raise _error(f"{what}: the tensor is not C-contiguous (strides {tuple(strides)} "
                     f"elements for shape {list(shape)}); pass .contiguous() or a copy")
    return _Bound(int(view.ptr), True, shape, np.dtype(view.dtype), obj)


def strided_view(obj: Any, stream_ptr: int) -> Any:
    """cuda.core's ``StridedMemoryView`` of ``obj``, ordered before work on ``stream_ptr``
    (-1: no ordering)."""
    try:
        from cuda.core.utils import StridedMemoryView
    except ImportError:
        try:  # cuda.core before 0.4
            from cuda.core.experimental.utils import StridedMemoryView
        except ImportError:
            raise _error("binding device tensors needs cuda.core: pip install "
                         "'pydla[cuda]'") from None
    try:
        return StridedMemoryView(obj, stream_ptr=stream_ptr)
    except (BufferError, TypeError, ValueError, RuntimeError) as e:
        raise _error(f"cannot view {type(obj).__name__} as a GPU tensor: {e}") from None


def module_stream() -> int:
    """The session runs' own stream (one per thread, created on first use)."""
    import cupy as cp

    stream = getattr(_local, "stream", None)
    if stream is None:
        stream = _local.stream = cp.cuda.Stream(non_blocking=True)
    return int(stream.ptr)


_local = threading.local()  # the one piece of state this module keeps


def _check_out(name: str, t: _Tensor, b: _Bound, shape: tuple[int, ...]) -> None:
    want = _np_type(t)
    if b.dtype != want:
        raise _error(f"output {name!r}: the bound buffer is {b.dtype.name}, the output is "
                     f"{want.name}")
    if tuple(b.shape) != tuple(shape):
        raise _error(f"output {name!r}: the bound buffer has shape {list(b.shape)}, the output "
                     f"has {list(shape)}")


def _np_type(t: _Tensor) -> np.dtype:
    from pydla.session import _numpy_type

    return _numpy_type(t.dtype)


def _from_pointer(what: str, device_type: str, element_type: Any,
                  shape: Sequence[int] | None, ptr: int | None) -> _Bound:
    if element_type is None or shape is None or ptr is None:
        raise _error(f"{what}: the pointer form needs element_type, shape and buffer_ptr")
    dtype = np.dtype(element_type)
    dims = tuple(int(d) for d in shape)
    kind = device_type.lower()
    if kind == "cuda":
        return _Bound(int(ptr), True, dims, dtype)
    if kind == "cpu":
        nbytes = int(np.prod(dims, dtype=np.int64)) * dtype.itemsize
        raw = (ctypes.c_ubyte * nbytes).from_address(int(ptr))
        host = np.frombuffer(raw, dtype=dtype).reshape(dims)
        return _Bound(0, False, dims, dtype, host, host)
    raise _error(f"{what}: device type {device_type!r}, expected 'cpu' or 'cuda'")


def _c_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides, step = [], 1
    for d in reversed(shape):
        strides.append(step)
        step *= max(d, 1)
    return tuple(reversed(strides))


def _copy_to_host(host: np.ndarray, ptr: int) -> None:
    from pydla.backends.cuda.driver import memcpy_dtoh_async, stream_synchronize

    memcpy_dtoh_async(host.ctypes.data, ptr, host.nbytes, 0)
    stream_synchronize(0)


def _copy_to_device(ptr: int, host: np.ndarray) -> None:
    from pydla.backends.cuda.driver import memcpy_htod_async, stream_synchronize

    memcpy_htod_async(ptr, host.ctypes.data, host.nbytes, 0)
    stream_synchronize(0)


def _error(message: str) -> Exception:
    from pydla.session import SessionError

    return SessionError(message)
