"""CUDA backend: binds a program to GPU kernels over one device arena and replays the whole
module as one CUDA graph.

Binding (once per loaded module): plan the arena (``layout.plan_arena``), upload the
weights, build each layer's kernel, run the module once, then capture it into a CUDA graph.
A loadable tuned at build (``BuildOptions(target="cuda")`` on a GPU machine) names each
layer's tactic in ``target["cuda_tactics"]``: only that candidate is built and nothing is
timed. Otherwise (or where the recorded candidate cannot be built here) every candidate is
built, timed on the GPU, and the fastest kept — which is also how the builder tunes
(``pydla.backends.cuda.tuning``). Built cuDNN plans go to an on-disk cache keyed by graph,
GPU and library versions (``plan_cache``; the build's tuning fills it): a later load on
the same GPU and libraries deserializes them and builds none.

Running: ``enqueue`` puts a task on the caller's stream — device-to-device copies of the
inputs into the arena, the graph launch, copies of the outputs — and returns without
waiting; ``execute`` (the ``BoundProgram`` interface) does the same from host arrays and
waits. Tasks of one module share its arena, so an event orders each task after the
previous one whichever streams they came on.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import cupy as cp
import numpy as np

from pydla.backends.base import LayerHook
from pydla.backends.cuda import kernels as _kernels  # noqa: F401  (registers every kernel)
from pydla.backends.cuda.context import BindContext
from pydla.backends.cuda.driver import (
    Event,
    GraphExec,
    arch_name,
    memcpy_async,
    memcpy_dtoh_async,
    memcpy_htod_async,
    stream_synchronize,
)
from pydla.backends.cuda.instrument import Instrument
from pydla.backends.cuda.kernels.pointwise import Operand, copy_program, elementwise_launch
from pydla.backends.cuda.layout import NHWC, Lifetime, Placement, activation_layout, plan_arena
from pydla.backends.cuda.plan_cache import cache_dir, tuning_env_note
from pydla.backends.cuda.registry import KERNELS, Candidate, Launch
from pydla.errors import IncompatibleLoadableError, KernelError, LoadableError, PydlaError
from pydla.loadable.program import Program


@dataclass(frozen=True)
class LayerChoice:
    layer: str
    op: str
    tactic: str
    ms: float | None  # measured GPU time of the chosen candidate (None: not timed)
    alternatives: dict[str, float]
    source: str = "timed"  # "recorded" (tuned at build), "timed", "only" (one candidate)


class CudaBackend:
    """Options: ``device`` (CUDA ordinal), ``autotune`` (time candidates where the loadable
    records no tactic, else take the first that builds), ``graph`` (replay the module as one
    CUDA graph), ``log``; ``recorded`` (use the tactics the loadable records; the builder
    turns it off to tune), ``reps`` (timed runs per candidate), ``tune_only`` (bind and
    choose, but neither run nor capture: what the builder needs), ``progress(done, total)``,
    ``instrument`` (time tasks on the GPU for task statistics and the task timeout:
    ``pydla.backends.cuda.instrument``; the cuDLA device turns it on), ``plan_cache``
    (read and write the cuDNN plan cache, ``pydla.backends.cuda.plan_cache``; its
    directory comes from ``$PYDLA_CUDNN_PLAN_CACHE``, ``off`` disables it).
    """

    name = "cuda"

    def __init__(self, device: int = 0, autotune: bool = True, graph: bool = True,
                 log: Callable[[str], Any] | None = None, recorded: bool = True,
                 reps: int = 3, tune_only: bool = False,
                 progress: Callable[[int, int], Any] | None = None,
                 instrument: bool = False, plan_cache: bool = True) -> None:
        self.device = device
        self.autotune = autotune
        self.graph = graph
        self.log = log
        self.recorded = recorded
        self.reps = reps
        self.tune_only = tune_only
        self.progress = progress
        self.instrument = instrument  # task statistics and timeout (the cuDLA device)
        self.plan_cache = plan_cache

    def supported_ops(self) -> frozenset[str]:
        return frozenset(KERNELS)

    def bind(self, program: Program) -> CudaProgram:
        return CudaProgram(program, self)


def check_target(program: Program, ordinal: int) -> None:
    """A loadable tuned for one GPU architecture refuses another."""
    target = program.target
    wanted = target.get("cuda_arch") if target.get("backend") == "cuda" else None
    if wanted:
        have = arch_name(ordinal)
        if have != wanted:
            raise IncompatibleLoadableError(0, f"the loadable was built for {wanted}; "
                                               f"this GPU is {have}")


class CudaProgram:
    def __init__(self, program: Program, backend: CudaBackend) -> None:
        self.program = program
        self.backend = backend
        self.lock = threading.Lock()
        self.device = cp.cuda.Device(backend.device)
        self.device.use()
        check_target(program, backend.device)
        self.stream = cp.cuda.Stream(non_blocking=True)
        self.done = Event()
        self.graph: GraphExec | None = None
        self.graph_error: str | None = None
        started = time.perf_counter()
        self._plan_memory()
        self.ctx = BindContext(program, dict(self.placements), self.stream, backend.device,
                               cache_dir() if backend.plan_cache else None)
        self.choices: list[LayerChoice] = []
        self.launches: list[Launch] = []
        self.layer_of_launch: list[int] = []  # layer index per launch (-1: an edge copy)
        recorded = program.target.get("cuda_tactics") if backend.recorded else None
        self.recorded: dict[str, str] = dict(recorded) if isinstance(recorded, dict) else {}
        self._bind_layers()
        self._note_plans()
        # Weights went up through CuPy on the legacy stream, whose host-to-device copies may
        # still be in flight; the module's stream does not wait for that stream by itself.
        self.device.synchronize()
        self.bind_seconds = time.perf_counter() - started
        self.instrument: Instrument | None = None
        self.profiled: GraphExec | None = None
        if backend.tune_only:
            return
        if backend.instrument:
            self.instrument = Instrument(self.ctx, [layer.name for layer in program.layers])
        self._run_eager(int(self.stream.ptr))
        stream_synchronize(int(self.stream.ptr))
        if backend.graph:
            try:
                self.graph = GraphExec(int(self.stream.ptr), lambda: self._record())
                if self.instrument is not None:
                    self.profiled = GraphExec(int(self.stream.ptr),
                                              lambda: self._record(profiled=True))
            except PydlaError as e:  # e.g. a library call that cannot be captured
                self.graph_error = str(e)
                self._log(f"CUDA graph capture failed, running layer by layer: {e}")
        self.ctx.clear_index_checks()  # the runs above read arbitrary indices

    # -- memory ---------------------------------------------------------------------------
    def _plan_memory(self) -> None:
        program = self.program
        tensors = program.tensors
        n_layers = len(program.layers)
        end = n_layers + 2
        first: dict[int, int] = {}
        last: dict[int, int] = {}
        for step, layer in enumerate(program.layers, start=1):
            for i in layer.inputs:
                if i >= 0 and tensors[i].kind != "weight":
                    last[i] = max(last.get(i, step), step)
            for o in layer.outputs:
                first.setdefault(o, step)
        in_ids = {io.tensor for io in program.inputs}
        out_ids = {io.tensor for io in program.outputs}
        # Rank-4 network inputs/outputs are linear for the caller and NHWC for the layers:
        # a "shadow" tensor (id ≥ len(tensors)) holds the NHWC copy.
        self.shadows: dict[int, int] = {}
        lifetimes: list[Lifetime] = []
        next_id = len(tensors)
        for t in tensors:
            if t.kind == "weight":
                continue
            i = t.index
            start = -1 if i in in_ids else first.get(i, 0)
            stop = end if i in out_ids else last.get(i, start)
            if len(t.shape) == 4 and (i in in_ids or i in out_ids):
                self.shadows[i] = next_id
                if i in in_ids:  # io copy read at step 0; the shadow lives for the layers
                    lifetimes.append(Lifetime(i, t.nbytes, -1, 0))
                    lifetimes.append(Lifetime(next_id, t.nbytes, 0, max(stop, 0)))
                else:  # the layers write the shadow; step n+1 copies it out
                    lifetimes.append(Lifetime(next_id, t.nbytes, start, n_layers + 1))
                    lifetimes.append(Lifetime(i, t.nbytes, n_layers + 1, end))
                next_id += 1
            else:
                lifetimes.append(Lifetime(i, t.nbytes, start, stop))
        offsets, size = plan_arena(lifetimes)
        self.arena = cp.cuda.alloc(max(size, 1))
        base = int(self.arena.ptr)
        self._fill_arena(size)
        self.io: dict[int, Placement] = {}
        self.placements: dict[int, Placement] = {}
        for t in tensors:
            if t.kind == "weight":
                continue
            if t.index in self.shadows:
                shadow = self.shadows[t.index]
                self.io[t.index] = Placement(base + offsets[t.index], t.shape, t.dtype, "linear")
                self.placements[t.index] = Placement(base + offsets[shadow], t.shape, t.dtype,
                                                     NHWC)
            else:
                layout = activation_layout(t.shape, t.kind)
                p = Placement(base + offsets[t.index], t.shape, t.dtype, layout)
                self.placements[t.index] = p
                self.io[t.index] = p
        self.arena_bytes = size

    def _fill_arena(self, size: int) -> None:
        """Finite random values: candidates are timed on data, never on zeros or NaNs.

        On the module's own stream, waited for: a device-to-device ``cudaMemcpy`` returns
        before the copy ends, and the legacy stream it runs on does not order the module's
        non-blocking stream — a late fill overwrote the first task's input."""
        halves = size // 2
        if halves:
            with self.stream:
                noise = cp.random.default_rng(0).standard_normal(halves, dtype=cp.float32)
                half = noise.astype(cp.float16)
            memcpy_async(int(self.arena.ptr), int(half.data.ptr), halves * 2,
                         int(self.stream.ptr))
            stream_synchronize(int(self.stream.ptr))

    # -- layers ---------------------------------------------------------------------------
    def _edge_copy(self, src: Placement, dst: Placement, where: str) -> Launch:
        shape, order = dst.shape, dst.physical_order()
        return elementwise_launch(self.ctx, shape, order,
                                  [Operand(src.ptr, src.dtype, src.strides)],
                                  Operand(dst.ptr, dst.dtype, dst.strides),
                                  copy_program(dst.dtype), where)

    def _bind_layers(self) -> None:
        program = self.program
        for io in program.inputs:
            if io.tensor in self.shadows:
                self.launches.append(self._edge_copy(self.io[io.tensor],
                                                     self.placements[io.tensor], "input"))
                self.layer_of_launch.append(-1)
        total = len(program.layers)
        for index, layer in enumerate(program.layers):
            if self.backend.progress is not None:
                self.backend.progress(index, total)
            if KERNELS.get(layer.op) is None:
                raise LoadableError(0, f"layer {layer.name!r}: no CUDA kernel for {layer.op}")
            wanted = self.recorded.get(layer.name)
            candidates = self._candidates(layer, wanted)
            if wanted is not None and not any(c.name == wanted for c in candidates):
                self._log(f"{layer.name}: the recorded tactic {wanted} cannot be built here; "
                          "timing every candidate")
                self.ctx.notes.append(f"{layer.name}: recorded tactic {wanted} unavailable")
                candidates = self._candidates(layer, None)
                wanted = None
            self.launches.append(self._choose(layer.name, layer.op, candidates, wanted))
            self.layer_of_launch.append(index)
        if self.backend.progress is not None:
            self.backend.progress(total, total)
        for io in program.outputs:
            if io.tensor in self.shadows:
                self.launches.append(self._edge_copy(self.placements[io.tensor],
                                                     self.io[io.tensor], "output"))
                self.layer_of_launch.append(-1)

    def _note_plans(self) -> None:
        """Carry the plan cache's notes over; where plans had to be built for a loadable
        tuned under another GPU or cuDNN, say so."""
        plans = self.ctx.plans_used
        if plans is None:
            return
        self.ctx.notes.extend(plans.notes)
        autotune = self.program.build.get("cuda_autotune")
        if plans.stats.built and self.recorded and isinstance(autotune, dict):
            note = tuning_env_note(autotune.get("env"), plans.fingerprint)
            if note is not None:
                self._log(note)
                self.ctx.notes.append(note)

    def _candidates(self, layer: Any, wanted: str | None) -> list[Candidate]:
        binder = KERNELS[layer.op]
        self.ctx.wanted = wanted
        try:
            return binder(self.ctx, layer)
        except PydlaError as e:
            raise LoadableError(0, f"layer {layer.name!r} ({layer.op}): {e}") from e
        except (KeyError, TypeError, ValueError, IndexError) as e:
            raise LoadableError(0, f"layer {layer.name!r} ({layer.op}): bad attributes "
                                f"({type(e).__name__}: {e})") from e
        finally:
            self.ctx.wanted = None

    def _choose(self, name: str, op: str, candidates: list[Candidate],
                wanted: str | None = None) -> Launch:
        chosen = next((c for c in candidates if c.name == wanted), None)
        if chosen is not None:
            self.choices.append(LayerChoice(name, op, chosen.name, None, {}, "recorded"))
            return chosen.launch
        if wanted is not None:  # the recorded kernel was not built here (NVRTC refused it)
            self._log(f"{name}: recorded tactic {wanted} not built; choosing again")
        usable = [c for c in candidates if not c.fallback] or candidates
        if not usable:
            raise LoadableError(0, f"layer {name!r} ({op}): no CUDA kernel could be built")
        times: dict[str, float] = {}
        if self.backend.autotune and len(usable) > 1:
            for c in usable:
                try:
                    times[c.name] = self.ctx.time_ms(c, self.backend.reps)
                except Exception as e:  # noqa: BLE001  (a candidate failing at run time)
                    self._log(f"{name}: candidate {c.name} failed: {e}")
            if not times:
                raise KernelError(name, op, "every candidate failed")
            best = min(usable, key=lambda c: times.get(c.name, float("inf")))
            source = "timed"
        else:
            best = usable[0]
            source = "only" if len(usable) == 1 else "first"
        self.choices.append(LayerChoice(name, op, best.name, times.get(best.name), times,
                                        source))
        return best.launch

    def _log(self, message: str) -> None:
        if self.backend.log is not None:
            self.backend.log(message)

    # -- running --------------------------------------------------------------------------
    def _record(self, profiled: bool = False) -> None:
        stream, instrument = self.stream, self.instrument
        if instrument is not None:
            instrument.start(stream)
        for launch, layer in zip(self.launches, self.layer_of_launch):
            if profiled and instrument is not None and layer >= 0:
                instrument.layer(stream, layer, end=False)
                launch(stream)
                instrument.layer(stream, layer, end=True)
            else:
                launch(stream)
        if instrument is not None:
            instrument.finish(stream)

    def _run_eager(self, stream: int, profiled: bool = False) -> None:
        own = int(self.stream.ptr)
        if stream != own:
            self.done.record(stream)
            self.done.wait_on(own)
        self._record(profiled)
        if stream != own:
            self.done.record(own)
            self.done.wait_on(stream)

    def _run(self, stream: int, profiled: bool = False) -> None:
        graph = self.profiled if profiled else self.graph
        if graph is not None:
            graph.launch(stream)
        else:
            self._run_eager(stream, profiled)

    def enqueue(self, stream: int, inputs: Sequence[int], outputs: Sequence[int],
                statistics: Sequence[int] = (), timeout_ms: int | None = None) -> None:
        """One task on ``stream`` (a raw CUstream), from and to device buffers laid out as the
        module's linear I/O tensors; returns without waiting. ``statistics``: device
        buffers that receive the task's statistics, ``timeout_ms``: the task timeout (both
        need an ``instrument``-ed backend)."""
        with self.lock:
            self.device.use()  # the driver calls below need this GPU's context current
            instrument = self.instrument
            if instrument is not None:
                instrument.set_timeout_ms(timeout_ms)
            self.done.wait_on(stream)
            for io, src in zip(self.program.inputs, inputs):
                p = self.io[io.tensor]
                memcpy_async(p.ptr, int(src), p.nbytes, stream)
            self._run(stream, profiled=bool(statistics) and instrument is not None)
            for io, dst in zip(self.program.outputs, outputs):
                p = self.io[io.tensor]
                memcpy_async(int(dst), p.ptr, p.nbytes, stream)
            if instrument is not None:
                for buf in statistics:
                    memcpy_async(int(buf), instrument.image_ptr, instrument.nbytes, stream)
            self.done.record(stream)

    def execute(self, inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray],
                on_layer: LayerHook | None = None) -> None:
        """Run once from host arrays and wait (``on_layer`` is not called: the module runs
        as one graph)."""
        stream = int(self.stream.ptr)
        with self.lock:
            self.device.use()
            self.done.wait_on(stream)
            staged = []
            for io, x in zip(self.program.inputs, inputs):
                p = self.io[io.tensor]
                host = np.ascontiguousarray(x, dtype=p.dtype.np)
                staged.append(host)
                memcpy_htod_async(p.ptr, host.ctypes.data, p.nbytes, stream)
            self._run(stream)
            results = []
            for io, y in zip(self.program.outputs, outputs):
                p = self.io[io.tensor]
                host = y if y.flags.c_contiguous and y.dtype == p.dtype.np else np.empty(
                    p.shape, p.dtype.np)
                results.append((y, host))
                memcpy_dtoh_async(host.ctypes.data, p.ptr, p.nbytes, stream)
            self.done.record(stream)
            stream_synchronize(stream)
            self.ctx.raise_index_errors()
            for y, host in results:
                if host is not y:
                    np.copyto(y, host.reshape(y.shape), casting="unsafe")

    def synchronize(self) -> None:
        """Wait for the tasks enqueued; a run-time index out of range raises here."""
        self.done.synchronize()
        self.ctx.raise_index_errors()

    def summary(self) -> dict[str, Any]:
        return {"arena_bytes": self.arena_bytes, "bind_seconds": round(self.bind_seconds, 3),
                "graph_nodes": self.graph.node_count if self.graph else None,
                "graph_error": self.graph_error,
                "tactics": {c.layer: c.tactic for c in self.choices},
                "timed_layers": sum(c.source == "timed" for c in self.choices),
                "recorded_layers": sum(c.source == "recorded" for c in self.choices),
                "cudnn_plans": (self.ctx.plans_used.stats.as_dict()
                                if self.ctx.plans_used is not None else None),
                "notes": list(self.ctx.notes)}

    def close(self) -> None:
        with self.lock:
            self.done.synchronize()
            for graph in (self.graph, self.profiled):
                if graph is not None:
                    graph.close()
            self.graph = self.profiled = None
            self.launches.clear()  # their cuDNN graphs go before the handle (ctx.close)
            self.ctx.close()
            self.done.close()
