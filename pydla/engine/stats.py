"""Task statistics: pydla's layout of the buffer that a TASK_STATISTICS registration receives.

Upstream the content is opaque; pydla writes per-layer start/end times, little-endian:

header, 64 bytes::

    0   char[8]   magic b"PDLASTAT"
    8   uint32    layout version (1)
    12  uint32    number of layers of the module
    16  uint32    layers that ran (fewer than the layers when a timeout stopped the task)
    20  uint32    cuDLA Status of the task (0, or ErrorDlaErrEngineTimeout …)
    24  uint64    task start, ns
    32  uint64    task end, ns
    40  -         reserved (zero) up to 64

then one 96-byte record per layer, in execution order::

    0   uint64    layer start, ns
    8   uint64    layer end, ns
    16  char[80]  layer name, UTF-8, NUL-padded (cut to 79 bytes)

Times are ``time.perf_counter_ns()`` of the process that ran the task; a layer that did
not run has zeros. ``decode_task_statistics`` reads a buffer back.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from pydla import formats
from pydla.dtypes import DType
from pydla.engine.enums import Status

MAGIC = b"PDLASTAT"
VERSION = 1
HEADER = np.dtype({"names": ["magic", "version", "num_layers", "layers_run", "status",
                             "task_start_ns", "task_end_ns"],
                   "formats": ["S8", "<u4", "<u4", "<u4", "<u4", "<u8", "<u8"],
                   "offsets": [0, 8, 12, 16, 20, 24, 32], "itemsize": 64})
LAYER = np.dtype([("start_ns", "<u8"), ("end_ns", "<u8"), ("name", "S80")])
NAME = "pydla_task_statistics"


def buffer_size(num_layers: int) -> int:
    return HEADER.itemsize + LAYER.itemsize * num_layers


def descriptor(num_layers: int) -> formats.TensorDescriptor:
    """The descriptor of the one statistics buffer a module writes: w bytes of UINT8."""
    size = buffer_size(num_layers)
    return formats.TensorDescriptor(
        name=NAME, size=size, n=1, c=1, h=1, w=size, data_format=formats.DATA_FORMAT_NCHW,
        data_type=formats.DATA_TYPE_CODES[DType.UINT8],
        data_category=formats.DATA_CATEGORY_FEATURE, pixel_format=formats.PIXEL_FORMAT_FEATURE,
        pixel_mapping=formats.PIXEL_MAPPING_PITCH_LINEAR, stride=(1, size, size, size, 0, 0, 0, 0))


class Recorder:
    """Collects layer times during one task (the executor's ``on_layer`` hook feeds it)."""

    def __init__(self, layer_names: Sequence[str]) -> None:
        self.records = np.zeros(len(layer_names), LAYER)
        self.records["name"] = [n.encode()[:79] for n in layer_names]
        self.layers_run = 0
        self.start_ns = 0
        self.end_ns = 0

    def layer(self, index: int, start_ns: int, end_ns: int) -> None:
        self.records[index]["start_ns"] = start_ns
        self.records[index]["end_ns"] = end_ns
        self.layers_run = index + 1

    def write(self, out: np.ndarray, status: int) -> None:
        """Fill a uint8 buffer of at least ``buffer_size`` bytes."""
        header = np.zeros(1, HEADER)
        header[0] = (MAGIC, VERSION, len(self.records), self.layers_run, status,
                     self.start_ns, self.end_ns)
        out[:HEADER.itemsize] = header.view(np.uint8)
        body = self.records.view(np.uint8)
        out[HEADER.itemsize:HEADER.itemsize + body.size] = body


@dataclass(frozen=True)
class LayerTime:
    index: int
    name: str
    start_ns: int
    end_ns: int

    @property
    def duration_ns(self) -> int:
        return self.end_ns - self.start_ns


@dataclass(frozen=True)
class TaskStatistics:
    status: Status | int
    start_ns: int
    end_ns: int
    layers_run: int
    layers: tuple[LayerTime, ...]

    @property
    def duration_ns(self) -> int:
        return self.end_ns - self.start_ns


def decode_task_statistics(buf: object) -> TaskStatistics:
    """Read a statistics buffer (any contiguous buffer: numpy uint8 array, bytes…)."""
    data = np.frombuffer(buf, dtype=np.uint8)  # type: ignore[call-overload]
    if data.size < HEADER.itemsize:
        raise ValueError(f"a statistics buffer has at least {HEADER.itemsize} bytes, not "
                         f"{data.size}")
    head = data[:HEADER.itemsize].view(HEADER)[0]
    if bytes(head["magic"]) != MAGIC:
        raise ValueError(f"not a pydla statistics buffer (magic {bytes(head['magic'])!r})")
    if int(head["version"]) != VERSION:
        raise ValueError(f"statistics layout version {int(head['version'])} is not {VERSION}")
    n = int(head["num_layers"])
    if data.size < buffer_size(n):
        raise ValueError(f"buffer of {data.size} bytes is shorter than the {buffer_size(n)} "
                         f"its {n} layers need")
    recs = data[HEADER.itemsize:buffer_size(n)].view(LAYER)
    layers = tuple(LayerTime(i, bytes(r["name"]).decode(errors="replace"), int(r["start_ns"]),
                             int(r["end_ns"])) for i, r in enumerate(recs))
    status = int(head["status"])
    return TaskStatistics(Status(status) if status in Status._value2member_map_ else status,
                          int(head["task_start_ns"]), int(head["task_end_ns"]),
                          int(head["layers_run"]), layers)
