"""``--device``: which device a tool runs the loadable on (bench, run, compare).

``cpu`` (the default), ``cuda`` (GPU 0) or ``cuda:N`` — PyTorch's and onnxruntime's way of
naming a device; a bare ``N`` is trtexec's ``--device=N`` (GPU N). The GPU is checked when
the flag is read, before anything is built or loaded, so a machine without one fails at
once with one line (``DeviceError``) rather than a traceback from CuPy.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydla.errors import DeviceError
from pydla.tools.flags import FlagError

if TYPE_CHECKING:
    from pydla.engine import LoadedModule
    from pydla.loadable import Program

DEVICE_HELP = ("where to run: cpu (default), cuda or cuda:N (GPU N; a bare N as trtexec's "
               "--device=N). cuda needs an NVIDIA GPU and pip install 'pydla[cuda]'")


@dataclass(frozen=True)
class Device:
    kind: str  # "cpu" or "cuda"
    ordinal: int = 0

    @property
    def is_cuda(self) -> bool:
        return self.kind == "cuda"

    def __str__(self) -> str:
        return f"cuda:{self.ordinal}" if self.is_cuda else "cpu"


CPU = Device("cpu")


def parse_device(text: str) -> Device:
    """``cpu``, ``cuda``, ``cuda:N`` or ``N``; FlagError otherwise."""
    value = text.strip().lower()
    if value == "cpu":
        return CPU
    m = re.fullmatch(r"cuda(?::(\d+))?|(\d+)", value)
    if m is None:
        raise FlagError(f"--device={text}: expected cpu, cuda or cuda:N (N a GPU number)")
    return Device("cuda", int(m.group(1) or m.group(2) or 0))


def add_device_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--device", default="cpu", help=DEVICE_HELP)


def cuda_device_count() -> tuple[int, str]:
    """(GPUs the CUDA driver shows, why none when 0) — never raises."""
    try:
        import cupy
    except ImportError:
        return 0, "CuPy is not installed (pip install 'pydla[cuda]')"
    try:
        import cuda.bindings  # noqa: F401  (the backend's driver calls)
    except ImportError:
        return 0, "cuda-bindings is not installed (pip install 'pydla[cuda]')"
    try:
        count = int(cupy.cuda.runtime.getDeviceCount())
    except Exception as e:  # noqa: BLE001  (no driver, a driver too old, no device)
        return 0, f"the CUDA driver is not usable: {str(e).strip() or type(e).__name__}"
    return count, "the CUDA driver shows no GPU" if count == 0 else ""


def resolve_device(args: argparse.Namespace) -> Device:
    """``args.device`` checked against this machine (DeviceError where it is absent). With
    ``--onnx``, building for a GPU run tunes for the GPU: ``--target`` becomes cuda."""
    device = parse_device(args.device)
    if not device.is_cuda:
        return device
    count, why = cuda_device_count()
    if count == 0:
        raise DeviceError(f"--device={args.device}: no CUDA device is available here ({why}); "
                          "run on --device=cpu")
    if device.ordinal >= count:
        raise DeviceError(f"--device={args.device}: this machine has {count} CUDA GPU(s), "
                          f"cuda:0 to cuda:{count - 1}")
    if getattr(args, "target", None) == "cpu":
        args.target = "cuda"
    return device


def missing_kernels(program: Program, ops: Collection[str]) -> list[str]:
    """``name (op)`` of every layer whose op is not in ``ops``, in execution order."""
    return [f"{lay.name!r} ({lay.op})" for lay in program.layers if lay.op not in ops]


def check_kernels(program: Program, ops: Collection[str], device: Device) -> None:
    """DeviceError naming every layer the device has no kernel for (the reader would stop at
    the first, as a malformed file)."""
    missing = missing_kernels(program, ops)
    if missing:
        shown = ", ".join(missing[:10]) + (f" and {len(missing) - 10} more"
                                           if len(missing) > 10 else "")
        raise DeviceError(f"{device}: {len(missing)} layer(s) have no CUDA kernel: {shown}; "
                          "run them on --device=cpu (pydla check --target=cuda lists the "
                          "gaps of a model)")


def load_module(data: Any, device: Device, instrument: bool = False) -> LoadedModule:
    """The loadable bound on ``device``. ``instrument``: the CUDA module also records a
    profiled graph that stamps every layer's start and end (per-layer GPU times); its plain
    graph then carries two tiny stamp kernels more."""
    from pydla.engine import LoadedModule

    if not device.is_cuda:
        return LoadedModule(data)
    from pydla.backends.cuda import CudaBackend
    from pydla.loadable import read_loadable

    backend = CudaBackend(device=device.ordinal, instrument=instrument)
    check_kernels(read_loadable(data), backend.supported_ops(), device)
    return LoadedModule(data, backend)
