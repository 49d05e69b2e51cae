"""The Pythonic API of the CPU device: ``Device``, ``Module``, ``Stream``, ``Event``.

::

    with pydla.api.Device(0) as dev:
        module = dev.load("model.loadable")
        features, logits = module.run({"x": x})          # numpy or DLPack in, numpy out
        with dev.stream() as s:
            pending = [module.submit([x], stream=s) for x in batch]
            results = [p.result() for p in pending]        # concurrent.futures.Future

Layouts and types come from the module's descriptors: inputs are cast and packed into the
module's I/O format (chw16, dla_linear, …) and outputs unpacked to the model's shapes and
types (numpy arrays, which are DLPack producers). Submissions from several threads and
streams may overlap; tasks of one module run one at a time on its single arena.
``close()`` (or leaving ``with``) waits for queued work, then releases buffers, modules and
streams, in that order. The same engine backs ``pydla.cudla``, with the same checks.
"""

from __future__ import annotations

import abc
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np

from pydla.engine import layout
from pydla.engine import stream as engine_stream
from pydla.engine.device import DEVICE_COUNT, TASK_STATISTICS, DlaDevice
from pydla.engine.faults import ClosedError, InvalidDeviceError, InvalidParamError
from pydla.engine.inputs import check_input
from pydla.engine.memory import MEMORY
from pydla.engine.module import ProfileShapeError, choose_profile, is_short
from pydla.engine.stats import LayerTime, TaskStatistics, decode_task_statistics
from pydla.engine.task import RawTask, TaskPlan, plan_task
from pydla.formats import TensorDescriptor

pack_tensor = layout.pack
unpack_tensor = layout.unpack
tensor_format = layout.format_of

__all__ = ["Device", "Event", "LayerTime", "Module", "Stream", "TaskStatistics",
           "decode_task_statistics", "pack_tensor", "tensor_format", "unpack_tensor"]


class _Closable(abc.ABC):
    _closed = False

    def _check_open(self) -> None:
        if self._closed:
            raise ClosedError(f"this {type(self).__name__} was closed")

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @abc.abstractmethod
    def close(self) -> None:
        """Release what the object holds; later calls do nothing."""


class Event(_Closable):
    """A point in a stream's work; made by ``Stream.record``."""

    def __init__(self, event: engine_stream.Event) -> None:
        self._event = event

    def synchronize(self) -> None:
        self._check_open()
        self._event.synchronize()

    def query(self) -> bool:
        self._check_open()
        return self._event.query()

    def elapsed_ms(self, end: Event) -> float:
        return self._event.elapsed_ms(end._event)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._event.close()


class Stream(_Closable):
    """An in-order queue of work; ``int(stream)`` is its handle for ``pydla.cudla`` and
    ``pydla.runtime`` calls."""

    def __init__(self, non_blocking: bool = True) -> None:
        self._stream = engine_stream.Stream(engine_stream.NON_BLOCKING if non_blocking else 0)

    def __int__(self) -> int:
        return self._stream.handle

    def _enqueue(self, op: engine_stream.Op, inline: bool = False,
                 deferred: Callable[[], engine_stream.Op] | None = None) -> bool:
        """Queue ``op`` (or what ``deferred`` makes, see engine.stream); returns whether it
        ran (inline) before this returned."""
        self._check_open()
        return self._stream.enqueue(op, inline, deferred)

    def synchronize(self) -> None:
        """Wait for the queued work; raise the first failure reported on the stream."""
        self._check_open()
        error = self._stream.synchronize()
        if error is not None:
            raise error

    def record(self) -> Event:
        self._check_open()
        event = engine_stream.Event()
        event.record(self._stream.handle)
        return Event(event)

    def wait(self, event: Event) -> None:
        """Later work on this stream waits for ``event``."""
        self._enqueue(event._event.make_wait())

    def close(self) -> None:
        if not self._closed:
            self._stream.wait_idle()
            self._closed = True
            self._stream.close()


@dataclass
class _Buffers:
    """Registered device buffers for one submission in flight."""

    inputs: list[tuple[int, np.ndarray]]
    outputs: list[tuple[int, np.ndarray]]
    plan: TaskPlan | None = None  # validated once: the buffers stay registered while kept
    # Typed views of the buffers for linear I/O in the tensor's own type (None where the
    # layout or type needs pydla.engine.layout's conversion): worked out once.
    typed: tuple[list[np.ndarray | None], list[np.ndarray | None]] | None = None


class Module(_Closable):
    """A loaded module with its own cuDLA device handle (one loadable per handle)."""

    def __init__(self, device: Device, data: bytes) -> None:
        self._device = device
        self._dev = DlaDevice(device.index)
        self._mod = self._dev.load(data, 0)
        program = self._mod.loaded.program
        self._inputs = [(program.tensors[io.tensor], io.descriptor) for io in program.inputs]
        self._outputs = [(program.tensors[io.tensor], io.descriptor) for io in program.outputs]
        self._input_names = [t.name for t, _ in self._inputs]
        self._name_set = frozenset(self._input_names)
        self._free: list[_Buffers] = []
        self._all: list[_Buffers] = []
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._inflight = 0
        self._closing = False  # close() waits on _idle: only then is there anyone to wake

    input_names = property(lambda self: list(self._input_names))
    output_names = property(lambda self: [t.name for t, _ in self._outputs])
    layer_names = property(lambda self: list(self._mod.layer_names))

    @property
    def input_descriptors(self) -> list[TensorDescriptor]:
        return [d for _, d in self._inputs]

    @property
    def output_descriptors(self) -> list[TensorDescriptor]:
        return [d for _, d in self._outputs]

    # -- buffers -----------------------------------------------------------------------
    def _allocate(self, desc: TensorDescriptor, flags: int = 0) -> tuple[int, np.ndarray]:
        ptr = MEMORY.allocate(desc.size)
        self._dev.register(ptr, desc.size, flags)
        return ptr, MEMORY.view(ptr, desc.size)

    def _acquire(self) -> _Buffers:
        with self._lock:
            self._check_open()
            self._inflight += 1
            if self._free:
                return self._free.pop()
            bufs = _Buffers([], [])
            self._all.append(bufs)  # close() frees whatever gets allocated, even on failure
        try:
            bufs.inputs.extend(self._allocate(d) for _, d in self._inputs)
            bufs.outputs.extend(self._allocate(d) for _, d in self._outputs)
        except BaseException:
            with self._lock:
                self._all.remove(bufs)
                self._inflight -= 1
                self._idle.notify_all()
            self._free_buffers([bufs])
            raise
        return bufs

    def _free_buffers(self, sets: list[_Buffers]) -> None:
        for bufs in sets:
            for ptr, _ in bufs.inputs + bufs.outputs:
                self._dev.unregister(ptr)
                MEMORY.free(ptr)

    def _release(self, bufs: _Buffers) -> None:
        with self._lock:
            self._free.append(bufs)
            self._inflight -= 1
            if self._closing:
                self._idle.notify_all()

    # -- running -----------------------------------------------------------------------
    def _arrays(self, inputs: Sequence[Any] | Mapping[str, Any]) -> list[np.ndarray]:
        names = self._input_names
        if type(inputs) is dict or isinstance(inputs, Mapping):
            if inputs.keys() != self._name_set:
                raise InvalidParamError(f"inputs {sorted(inputs)} given, the module takes "
                                        f"{names}")
            inputs = [inputs[n] for n in names]
        if len(inputs) != len(names):
            raise InvalidParamError(f"{len(inputs)} inputs given, the module takes {len(names)}")
        # numpy arrays as they are (np.from_dlpack of one costs a microsecond for nothing)
        arrays = [x if type(x) is np.ndarray else
                  np.from_dlpack(x) if hasattr(x, "__dlpack__") else np.asarray(x)
                  for x in inputs]
        if self._other_plan(arrays):
            return arrays  # checked against the plan their shapes pick (_submit_plan)
        return [check_input(tensor.name, arr, tensor.shape, tensor.dtype, InvalidParamError)
                for arr, (tensor, _) in zip(arrays, self._inputs)]

    def _other_plan(self, arrays: list[np.ndarray]) -> bool:
        """Whether an optimization profile's plan other than profile 0 (the shapes cuDLA
        sees) runs these inputs."""
        return self._mod.loaded.profiles is not None and \
            [a.shape for a in arrays] != [t.shape for t, _ in self._inputs]

    def _submit_plan(self, arrays: list[np.ndarray], target: Stream) -> Future[list[np.ndarray]]:
        """Queue a run in the profile plan the shapes pick (bound on first use): the module's
        lock keeps its tasks one at a time, as for profile 0."""
        loaded = self._mod.loaded
        assert loaded.profiles is not None
        try:
            choose_profile(loaded.profiles, [a.shape for a in arrays])
        except ProfileShapeError as e:
            raise InvalidParamError(str(e)) from None
        with self._lock:
            self._check_open()
            self._inflight += 1
        future: Future[list[np.ndarray]] = Future()

        def run() -> None:
            try:
                with self._mod.lock:
                    outputs = loaded.run(arrays)
            except BaseException as e:  # the future carries it to whoever waits
                future.set_exception(e)
            else:
                future.set_result(outputs)
            finally:
                with self._lock:
                    self._inflight -= 1
                    self._idle.notify_all()

        try:
            target._enqueue(run)
        except BaseException:
            with self._lock:
                self._inflight -= 1
                self._idle.notify_all()
            raise
        return future

    def _plan(self, arrays: list[np.ndarray], bufs: _Buffers,
              statistics: int | None = None) -> TaskPlan:
        """Pack the inputs into their buffers and validate the task, as submit_task would."""
        typed = self._typed(bufs)[0]
        for x, (_, desc), (_, view), target in zip(arrays, self._inputs, bufs.inputs, typed):
            if target is not None and x.dtype == target.dtype:  # checked: the tensor's shape
                target[...] = x
            else:
                layout.pack(x, desc, out=view)
        cached = bufs.plan
        if statistics is None and cached is not None and \
                cached.timeout_ms == self._dev.timeout_ms:
            return cached
        outputs = [p for p, _ in bufs.outputs] + ([] if statistics is None else [statistics])
        plan = plan_task(self._dev, RawTask(self._mod.handle, tuple(p for p, _ in bufs.inputs),
                                            tuple(outputs), 0, 0))
        if statistics is None:
            bufs.plan = plan
        return plan

    def _outputs_of(self, bufs: _Buffers) -> list[np.ndarray]:
        return [layout.unpack(view, desc).reshape(t.shape).astype(t.dtype.np, copy=False)
                if typed is None else typed.copy()
                for (t, desc), (_, view), typed in zip(self._outputs, bufs.outputs,
                                                       self._typed(bufs)[1])]

    def _typed(self, bufs: _Buffers) -> tuple[list[np.ndarray | None], list[np.ndarray | None]]:
        if bufs.typed is None:
            def views(tensors: list[tuple[Any, TensorDescriptor]],
                      held: list[tuple[int, np.ndarray]]) -> list[np.ndarray | None]:
                return [view[:t.nbytes].view(t.dtype.np).reshape(t.shape)
                        if layout.format_of(desc) == "chw" and layout.dtype_of(desc) is t.dtype
                        else None for (t, desc), (_, view) in zip(tensors, held)]

            bufs.typed = (views(self._inputs, bufs.inputs), views(self._outputs, bufs.outputs))
        return bufs.typed

    def submit(self, inputs: Sequence[Any] | Mapping[str, Any],
               stream: Stream | None = None) -> Future[list[np.ndarray]]:
        """Queue one inference on ``stream`` (the device's default stream when None); the
        future's result is the list of outputs."""
        result = self._submit(inputs, stream)
        if isinstance(result, Future):
            return result
        future: Future[list[np.ndarray]] = Future()
        if isinstance(result, BaseException):
            future.set_exception(result)
        else:
            future.set_result(result)
        return future

    def run(self, inputs: Sequence[Any] | Mapping[str, Any]) -> list[np.ndarray]:
        """One inference, waited for."""
        result = self._submit(inputs, None)
        if isinstance(result, Future):
            return result.result()
        if isinstance(result, BaseException):
            raise result
        return result

    def _submit(self, inputs: Sequence[Any] | Mapping[str, Any], stream: Stream | None
                ) -> Future[list[np.ndarray]] | list[np.ndarray] | BaseException:
        """Queue one inference: its outputs (or failure) when it ran before this returned
        (a short task on an idle stream, see engine.stream), else a future of them."""
        target = stream or self._device.default_stream
        arrays = self._arrays(inputs)
        if self._other_plan(arrays):
            return self._submit_plan(arrays, target)
        bufs = self._acquire()
        try:
            plan = self._plan(arrays, bufs)
        except BaseException:
            self._release(bufs)
            raise
        # A short task on an idle stream runs inside _enqueue and leaves its outcome in
        # ``box``: no future. Otherwise the stream asks ``deferred`` for the op to queue,
        # which leaves the future in ``box`` instead.
        box: list[Any] = []
        try:
            target._enqueue(partial(self._run, plan, bufs, box.append),
                            inline=is_short(self._mod.loaded),
                            deferred=partial(self._queued, plan, bufs, box))
        except BaseException:
            self._release(bufs)
            raise
        return box[0]

    def _run(self, plan: TaskPlan, bufs: _Buffers, deliver: Callable[[Any], None]) -> None:
        """One inference on its stream; ``deliver`` gets its outputs or its failure."""
        try:
            self._dev.run_plan(plan)
            outcome: list[np.ndarray] | BaseException = self._outputs_of(bufs)
        except BaseException as e:  # the caller, or the future, carries it
            outcome = e
        self._release(bufs)
        deliver(outcome)

    def _queued(self, plan: TaskPlan, bufs: _Buffers, box: list[Any]) -> engine_stream.Op:
        """The op to queue for an inference that does not run inline; its future goes to
        ``box``, for the caller."""
        future: Future[list[np.ndarray]] = Future()
        box.append(future)
        return partial(self._run, plan, bufs, partial(_resolve, future))

    def profile(self, inputs: Sequence[Any] | Mapping[str, Any]
                ) -> tuple[list[np.ndarray], TaskStatistics]:
        """One inference with a task-statistics buffer: outputs and per-layer times (of
        profile 0's shapes: the statistics are cuDLA's, which sees that plan alone)."""
        arrays = self._arrays(inputs)
        if self._other_plan(arrays):
            raise InvalidParamError(f"profile() runs the shapes cuDLA sees, "
                                    f"{[list(t.shape) for t, _ in self._inputs]}; given "
                                    f"{[list(a.shape) for a in arrays]}")
        bufs = self._acquire()
        stats_ptr, stats_view = self._allocate(self._mod.stats_descriptors[0], TASK_STATISTICS)
        try:
            self._dev.run_plan(self._plan(arrays, bufs, statistics=stats_ptr))
            return self._outputs_of(bufs), decode_task_statistics(stats_view)
        finally:
            self._dev.unregister(stats_ptr)
            MEMORY.free(stats_ptr)
            self._release(bufs)

    def close(self) -> None:
        """Wait for this module's queued inferences, then free its buffers and handle."""
        with self._lock:
            if self._closed:
                return
            self._closed = self._closing = True
            while self._inflight:
                self._idle.wait()
        self._free_buffers(self._all)
        self._all.clear()
        self._free.clear()
        self._dev.destroy()
        self._device._forget(self)


def _resolve(future: Future[list[np.ndarray]], outcome: list[np.ndarray] | BaseException
             ) -> None:
    if isinstance(outcome, BaseException):
        future.set_exception(outcome)
    else:
        future.set_result(outcome)


class Device(_Closable):
    """The CPU DLA device: loads modules, makes streams."""

    def __init__(self, index: int = 0) -> None:
        if not 0 <= index < DEVICE_COUNT:
            raise InvalidDeviceError(f"device {index} does not exist (there are {DEVICE_COUNT})")
        self.index = index
        self._modules: list[Module] = []
        self._streams: list[Stream] = []
        self._lock = threading.Lock()
        self.default_stream = Stream()

    def load(self, source: str | os.PathLike[str] | bytes | bytearray | memoryview) -> Module:
        """Load a loadable from a file path or from bytes."""
        self._check_open()
        if isinstance(source, (str, os.PathLike)):
            with open(source, "rb") as f:
                data = f.read()
        else:
            data = bytes(source)
        module = Module(self, data)
        with self._lock:
            self._modules.append(module)
        return module

    def stream(self, non_blocking: bool = True) -> Stream:
        self._check_open()
        s = Stream(non_blocking)
        with self._lock:
            self._streams.append(s)
        return s

    def synchronize(self) -> None:
        for s in [self.default_stream, *self._streams]:
            if not s._closed:
                s.synchronize()

    def _forget(self, module: Module) -> None:
        with self._lock:
            if module in self._modules:
                self._modules.remove(module)

    def close(self) -> None:
        """Drain the streams, then close modules (buffers, handles), then the streams."""
        if self._closed:
            return
        self._closed = True
        streams = [self.default_stream, *self._streams]
        for s in streams:
            if not s._closed:
                s._stream.wait_idle()
        for module in list(self._modules):
            module.close()
        for s in streams:
            s.close()
