"""Ray Data batch inference: ``Dataset.map_batches(PydlaPredictor, …)``.

::

    data = pydla.ray.build_once("model.onnx", shapes="x:8x3x224x224")   # once, on the driver
    ref = ray.put(data)                                                  # one copy per node
    ds.map_batches(PydlaPredictor, fn_constructor_kwargs={"loadable": ref, "device": "cpu"},
                   concurrency=2, num_cpus=1, batch_size=64)

Each actor loads the loadable once in its constructor and pins pydla's thread count to the
CPUs Ray gave it (``num_cpus``), so two actors on a two-core node run one thread each
instead of four threads fighting over two cores. Nothing here imports Ray unless it is
already running: the class also works in a plain process (tests, a GPU check).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from pydla.backends.cpu import threads
from pydla.engine import LoadedModule
from pydla.errors import RequestError
from pydla.ray.batching import BatchRunner

LoadableSource = Any  # bytes, bytearray, memoryview, a path, or a ray.ObjectRef of bytes


def loadable_bytes(source: LoadableSource) -> bytes:
    """The loadable's bytes from bytes, a file path, or an object-store reference."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        return bytes(source)
    if isinstance(source, (str, os.PathLike)):
        with open(source, "rb") as f:
            return f.read()
    if type(source).__module__.startswith("ray"):  # an ObjectRef: fetched from the store
        import ray

        return loadable_bytes(ray.get(source))
    raise RequestError(f"loadable must be bytes, a file path or a ray.ObjectRef of bytes, "
                       f"not {type(source).__name__}")


def assigned_cpus() -> float | None:
    """The CPUs Ray reserved for the calling actor or task; None outside a Ray worker."""
    if "ray" not in sys.modules:
        return None
    import ray

    if not ray.is_initialized():
        return None
    context = ray.get_runtime_context()
    if context.get_actor_id() is None and context.get_task_id() is None:
        return None  # the driver: nothing was reserved for it
    return float(context.get_assigned_resources().get("CPU", 0.0)) or None


def pin_threads(num_threads: int | None = None) -> int:
    """Pin pydla's CPU thread count for modules loaded from now on in this process:
    ``num_threads`` if given, else the CPUs Ray reserved for this actor (at least one),
    else pydla's default (``PYDLA_NUM_THREADS``, or the process's cores). Returns it."""
    if num_threads is None:
        cpus = assigned_cpus()
        if cpus is not None:
            num_threads = max(1, int(cpus))
    threads.set_num_threads(num_threads)
    return threads.num_threads()


def load_module(data: bytes, device: str = "cpu", gpu: int = 0) -> LoadedModule:
    """Bind a loadable on the CPU backend or on CUDA device ``gpu`` (under Ray with
    ``num_gpus=1`` the actor sees its GPU as device 0)."""
    if device == "cpu":
        return LoadedModule(data)
    if device == "cuda":
        from pydla.backends.cuda import CudaBackend

        return LoadedModule(data, CudaBackend(device=gpu))
    raise RequestError(f"device must be 'cpu' or 'cuda', not {device!r}")


class PydlaPredictor:
    """A callable class for ``Dataset.map_batches``: ``{input name: rows}`` in,
    ``{output name: rows}`` out (plus the ``passthrough`` columns, copied unchanged).

    Batches of any size run: cut into the loadable's batch, the last chunk padded and the
    padding dropped (``pydla.ray.batching``).
    """

    def __init__(self, loadable: LoadableSource, device: str = "cpu", *,
                 num_threads: int | None = None, passthrough: Sequence[str] = (),
                 gpu: int = 0) -> None:
        data = loadable_bytes(loadable)
        # Before the load: a program sizes its per-thread scratch when it is bound.
        self.num_threads = pin_threads(num_threads) if device == "cpu" else num_threads
        self.device = device
        self.runner = BatchRunner(load_module(data, device, gpu))
        self.passthrough = tuple(passthrough)
        clash = sorted(set(self.passthrough) & set(self.runner.output_names))
        if clash:
            raise RequestError(f"passthrough columns {clash} have the names of outputs")

    @property
    def input_names(self) -> list[str]:
        return self.runner.input_names

    @property
    def output_names(self) -> list[str]:
        return self.runner.output_names

    @property
    def batch(self) -> int:
        """The batch the loadable was built for."""
        return self.runner.batch

    def __call__(self, batch: Mapping[str, Any]) -> dict[str, np.ndarray]:
        outputs = self.runner.run(batch, allow_extra=True)
        for column in self.passthrough:
            if column not in batch:
                raise RequestError(f"passthrough column {column!r} is not in the batch "
                                   f"(columns: {sorted(batch)})")
            outputs[column] = np.asarray(batch[column])
        return outputs
