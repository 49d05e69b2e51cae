"""What binders share while a program is bound: placements, weights, NVRTC, cuDNN, timing."""

from __future__ import annotations

import ctypes
import glob
import os
import sys
import sysconfig
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import cupy as cp
import numpy as np

from pydla.backends.cuda.codegen import PRELUDE
from pydla.backends.cuda.driver import arch_name
from pydla.backends.cuda.layout import LINEAR, Placement
from pydla.backends.cuda.plan_cache import Fingerprint, PlanCache
from pydla.backends.cuda.registry import Candidate, Launch
from pydla.errors import KernelError
from pydla.loadable.program import Program

BLOCK = 256
_SLOTS = 64  # index-check slots per device buffer
MAX_BLOCKS = 132 * 16  # grid-stride loops: a few waves of the H200's 132 SMs are plenty


def _preload_cudnn() -> None:
    """Make libcudnn findable for the cuDNN frontend: the nvidia-cudnn wheel may sit in
    another site directory than the frontend (e.g. a carried ``--target`` install)."""
    dirs = {sysconfig.get_path("purelib"), *sys.path}
    for d in dirs:
        for path in glob.glob(os.path.join(d or ".", "nvidia", "cudnn", "lib", "libcudnn.so.9")):
            ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
            return


_CUDNN: Any = None


def cudnn_module() -> Any:
    """The cuDNN frontend module, or None where it is not installed."""
    global _CUDNN
    if _CUDNN is None:
        try:
            _preload_cudnn()
            import cudnn

            _CUDNN = cudnn
        except (ImportError, OSError):
            _CUDNN = False
    return _CUDNN or None


_FINGERPRINTS: dict[int, Fingerprint] = {}


def fingerprint(ordinal: int) -> Fingerprint:
    """The GPU and library versions a serialized cuDNN plan is valid for (once per
    process and device)."""
    found = _FINGERPRINTS.get(ordinal)
    if found is None:
        name = cp.cuda.runtime.getDeviceProperties(ordinal)["name"]
        cudnn = cudnn_module()
        found = Fingerprint(
            gpu=name.decode() if isinstance(name, bytes) else str(name),
            arch=arch_name(ordinal), driver=int(cp.cuda.runtime.driverGetVersion()),
            cudnn=int(cudnn.backend_version()) if cudnn else 0,
            frontend=str(getattr(cudnn, "__version__", "")) if cudnn else "")
        _FINGERPRINTS[ordinal] = found
    return found


class BindContext:
    def __init__(self, program: Program, placements: dict[int, Placement],
                 stream: cp.cuda.Stream, ordinal: int = 0,
                 plan_dir: Path | None = None) -> None:
        self.program = program
        self.placements = placements
        self.stream = stream
        self.ordinal = ordinal
        self._plan_dir = plan_dir  # the cuDNN plan cache's directory (None: off)
        self._plans: PlanCache | None = None
        self.keep: list[Any] = []  # device buffers the bound layers read (weights, staging)
        self._functions: dict[tuple[str, str], Any] = {}
        self._cudnn_handle: Any = None
        self.workspace: cp.ndarray | None = None
        self.notes: list[str] = []  # why candidates were not built (cuDNN refusals…)
        # The tactic recorded for the layer being bound (a loadable tuned at build): binders
        # skip building the other candidates. None: build every candidate.
        self.wanted: str | None = None
        # Index checks: a kernel reading run-time indices clamps them (never an out-of-bounds
        # read) and records a bad one in its slot, (flag, index) as two int64s; the backend
        # raises the CPU backend's KernelError once the task has been waited for.
        self._checks: list[tuple[str, str, str, int, str]] = []  # (layer, op, what, size,
        #                                                           valid range as text)
        self._check_bufs: list[cp.ndarray] = []

    def wants(self, name: str) -> bool:
        """Whether to build candidate ``name`` (or, ending in "/", a family of them)."""
        if self.wanted is None:
            return True
        return self.wanted.startswith(name) if name.endswith("/") else self.wanted == name

    # -- tensors -----------------------------------------------------------------------
    def is_weight(self, index: int) -> bool:
        return self.program.tensors[index].kind == "weight"

    def host(self, index: int) -> np.ndarray:
        t = self.program.tensors[index]
        if t.kind != "weight":
            raise KernelError(t.name, "cuda", "a constant was expected here")
        return self.program.weight(t)

    def place(self, index: int) -> Placement:
        """The device placement of a tensor; a weight is uploaded (row-major) on first use."""
        found = self.placements.get(index)
        if found is None:
            t = self.program.tensors[index]
            found = Placement(self.upload(self.host(index)), t.shape, t.dtype, LINEAR)
            self.placements[index] = found
        return found

    def upload(self, array: np.ndarray) -> int:
        dev = cp.asarray(np.ascontiguousarray(array))
        self.keep.append(dev)
        return int(dev.data.ptr)

    def scratch(self, nbytes: int) -> int:
        buf = cp.empty(max(nbytes, 1), dtype=cp.uint8)
        self.keep.append(buf)
        return int(buf.data.ptr)

    # -- run-time index checks ------------------------------------------------------------
    def index_check(self, layer: str, op: str, what: str, size: int,
                    valid: str | None = None) -> int:
        """Device address of a fresh (flag, index) slot for a kernel checking indices
        into ``what`` of ``size`` elements (``valid``: the accepted range, as the error
        states it; default ``-size..size-1``)."""
        slot = len(self._checks)
        if slot % _SLOTS == 0:
            self._check_bufs.append(cp.zeros((_SLOTS, 2), dtype=cp.int64))
        self._checks.append((layer, op, what, size, valid or f"{-size}..{size - 1}"))
        return int(self._check_bufs[-1].data.ptr) + (slot % _SLOTS) * 16

    def clear_index_checks(self) -> None:
        """Forget what binding's timing runs (on arbitrary data) recorded."""
        for buf in self._check_bufs:
            buf.fill(0)
        cp.cuda.Device().synchronize()

    def raise_index_errors(self) -> None:
        """After a task was waited for: the first bad index recorded, as a KernelError."""
        for b, buf in enumerate(self._check_bufs):
            host = cp.asnumpy(buf)
            hits = host[:, 0].nonzero()[0]
            if hits.size:
                buf.fill(0)
                layer, op, what, size, valid = self._checks[b * _SLOTS + int(hits[0])]
                raise KernelError(layer, op, f"index {int(host[hits[0], 1])} is out of range "
                                  f"for {what} of size {size} (valid: {valid})")

    # -- NVRTC -------------------------------------------------------------------------
    def function(self, source: str, name: str) -> Any:
        key = (source, name)
        fn = self._functions.get(key)
        if fn is None:
            module = cp.RawModule(code=PRELUDE + source, options=("--std=c++17",))
            fn = module.get_function(name)
            self._functions[key] = fn
        return fn

    def kernel_launch(self, source: str, name: str, threads: int, args: Sequence[Any],
                      block: int = BLOCK, lazy: bool = False) -> Launch:
        """Enqueue ``name`` over ``threads`` threads (grid-stride loops cap the grid);
        ``lazy`` defers compiling to the first launch (fallbacks that rarely run)."""
        grid = max(1, min((threads + block - 1) // block, MAX_BLOCKS))
        args = tuple(args)
        compiled: list[Any] = [] if lazy else [self.function(source, name)]

        def launch(stream: Any) -> None:
            if not compiled:
                compiled.append(self.function(source, name))
            compiled[0]((grid,), (block,), args, stream=stream)

        return launch

    # -- cuDNN ---------------------------------------------------------------------------
    @property
    def cudnn(self) -> Any:
        return cudnn_module()

    @property
    def cudnn_handle(self) -> Any:
        if self._cudnn_handle is None:
            self._cudnn_handle = self.cudnn.create_handle()
        return self._cudnn_handle

    @property
    def plans(self) -> PlanCache:
        """The cuDNN plan cache (made on first use: a program without cuDNN graphs never
        queries the library versions)."""
        if self._plans is None:
            self._plans = PlanCache(self._plan_dir, fingerprint(self.ordinal))
        return self._plans

    @property
    def plans_used(self) -> PlanCache | None:
        return self._plans

    def need_workspace(self, nbytes: int) -> None:
        if nbytes and (self.workspace is None or self.workspace.nbytes < nbytes):
            self.workspace = cp.empty(nbytes, dtype=cp.uint8)

    @property
    def workspace_ptr(self) -> int:
        return 0 if self.workspace is None else int(self.workspace.data.ptr)

    # -- autotuning ------------------------------------------------------------------------
    def time_ms(self, candidate: Candidate, reps: int = 3) -> float:
        """GPU time of one run (mean of ``reps`` after one warm-up)."""
        candidate.launch(self.stream)
        self.stream.synchronize()
        start, end = cp.cuda.Event(), cp.cuda.Event()
        start.record(self.stream)
        for _ in range(reps):
            candidate.launch(self.stream)
        end.record(self.stream)
        end.synchronize()
        return cp.cuda.get_elapsed_time(start, end) / reps

    def close(self) -> None:
        # the cuDNN graphs (in ``keep``) go before the handle they were built with
        self.keep.clear()
        self.workspace = None
        if self._cudnn_handle is not None:
            self.cudnn.destroy_handle(self._cudnn_handle)
            self._cudnn_handle = None


def dims_strides(p: Placement) -> tuple[list[int], list[int]]:
    """cuDNN's description of a placement: logical dims, element strides."""
    return list(p.shape), list(p.strides)


def vec_width(*counts: int, itemsize: int = 2) -> int:
    """Elements per vector access: 16 bytes when every count divides, else smaller."""
    for vec in (16 // itemsize, 4, 2):
        if vec >= 1 and all(c % vec == 0 for c in counts):
            return vec
    return 1
