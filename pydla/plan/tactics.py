"""Tactic selection: time each candidate kernel of every layer on this machine (or pick by
priority), record the winner in the layer, and remember timings in a timing cache."""

from __future__ import annotations

import hashlib
import json
import os
import platform
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numba
import numpy as np

from pydla.backends.base import LayerSpec, TensorSpec
from pydla.backends.cpu import threads
from pydla.backends.cpu.backend import bind_layer
from pydla.backends.cpu.registry import REFERENCE, candidate_tactics
from pydla.backends.cpu.steps import prebind
from pydla.dtypes import to_storage
from pydla.errors import BuildError, ResourceLimitError
from pydla.ir import Graph, Node
from pydla.passes.base import PassContext
from pydla.plan import precompile

CACHE_VERSION = 1


def machine_id() -> str:
    """Timings only transfer between identical machines: processor, cores, numpy."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"{cpu}|{os.cpu_count()}|numpy {np.__version__}"


@dataclass
class TimingCache:
    """``--timingCacheFile``: layer key → {tactic: milliseconds}, JSON on disk."""

    path: str | None = None
    entries: dict[str, dict[str, float]] = field(default_factory=dict)
    hits: int = 0
    misses: int = 0

    @classmethod
    def load(cls, path: str | None) -> TimingCache:
        cache = cls(path)
        if path and os.path.exists(path):
            try:
                with open(path) as f:
                    data = json.load(f)
            except (OSError, ValueError) as e:
                raise BuildError(f"timing cache {path!r} is unreadable: {e}") from None
            if (not isinstance(data, dict) or data.get("version") != CACHE_VERSION
                    or not isinstance(data.get("entries"), dict)):
                raise BuildError(f"timing cache {path!r} is not a pydla timing cache "
                                 f"(version {CACHE_VERSION})")
            if data.get("machine") == machine_id():
                cache.entries = {str(k): {str(t): float(ms) for t, ms in v.items()}
                                 for k, v in data["entries"].items() if isinstance(v, dict)}
        return cache

    def save(self) -> None:
        if not self.path:
            return
        tmp = f"{self.path}.tmp{os.getpid()}"
        with open(tmp, "w") as f:
            json.dump({"version": CACHE_VERSION, "machine": machine_id(),
                       "entries": self.entries}, f, indent=0, sort_keys=True)
        os.replace(tmp, self.path)


def layer_spec(node: Node) -> LayerSpec:
    return LayerSpec(node.name, node.op, node.attrs,
                     tuple(None if v is None else TensorSpec(v.shape, v.dtype)
                           for v in node.inputs),
                     tuple(TensorSpec(v.shape, v.dtype) for v in node.outputs), node.tactic)


def layer_key(spec: LayerSpec) -> str:
    """What a timing depends on: op, attributes, input/output shapes and types."""
    desc = json.dumps([spec.op, spec.attrs,
                       [None if s is None else [list(s.shape), int(s.dtype)] for s in spec.inputs],
                       [[list(s.shape), int(s.dtype)] for s in spec.outputs]],
                      sort_keys=True, default=str)
    return hashlib.sha256(desc.encode()).hexdigest()[:32]


def layer_consts(node: Node) -> list[np.ndarray | None]:
    """Each input's constant data (None for a tensor computed at run time)."""
    return [None if v is None or not v.is_const else np.asarray(v.const) for v in node.inputs]


def sample_inputs(spec: LayerSpec, consts: Sequence[np.ndarray | None],
                  rng: np.random.Generator) -> list[np.ndarray | None]:
    """Inputs to time ``spec`` on: its constants, random values for the other floats."""
    out: list[np.ndarray | None] = []
    for s, c in zip(spec.inputs, consts):
        if s is None:
            out.append(None)
        elif c is not None:
            # Read-only, as a loadable's weights are: kernels may cache what they derive
            # from them (Winograd's transformed filters).
            const = c.view()
            const.flags.writeable = False
            out.append(const)
        elif s.dtype.is_float:
            out.append(to_storage(rng.standard_normal(s.shape).astype(np.float32), s.dtype))
        else:
            out.append(np.zeros(s.shape, s.dtype.np))
    return out


def _last_level_cache_bytes() -> int:
    """The largest CPU cache's size (Linux sysfs), else 32 MiB."""
    size = 0
    for entry in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*/size"):
        try:
            text = entry.read_text().strip().upper()
            size = max(size, int(text.rstrip("KMG")) * {"K": 1 << 10, "M": 1 << 20,
                                                          "G": 1 << 30}.get(text[-1], 1))
        except (OSError, ValueError):
            continue
    return size or 32 << 20


class _Evictor:
    """Reads a buffer larger than the last-level cache, so that the next timed run finds
    its weights in memory, as a layer inside a network whose weights do not fit that
    cache does (the layers before it pushed them out); timed hot, a kernel that streams more
    weight bytes (Winograd's transformed filters are 16/9 to 4× the filters) looks faster
    than it is there. A network whose weights fit keeps them cached from run to run and
    is timed hot."""

    def __init__(self) -> None:
        self._buf: np.ndarray | None = None

    def __call__(self) -> None:
        if self._buf is None:
            self._buf = np.ones(2 * _last_level_cache_bytes() // 4, np.float32)
        self._buf += 1.0  # read and write every line: the cache now holds this buffer

    def release(self) -> None:
        """Free the buffer (twice the cache: tens of MiB) once the tactics are chosen."""
        self._buf = None


_evict = _Evictor()


def time_tactic(spec: LayerSpec, name: str, inputs: list[np.ndarray | None],
                budget_s: float = 0.05, max_runs: int = 10, cold: bool = True,
                one_thread: bool = False) -> float:
    """Fastest run of one layer under one tactic, in milliseconds, prebound as the executor
    runs it and warmed up once; with ``cold``, each timed run starts with the caches holding
    other data. Not the median: on a shared machine other processes only ever add time,
    and a parallel kernel loses whole time slices at its barrier while a single-threaded
    one does not, so a noisy median would systematically favour the slower tactic.
    ``one_thread``: the kernel's parts run one after another on the calling thread (as the
    thread governor runs them), which contention for the cores affects as little as it
    affects the single-threaded reference."""
    spec = LayerSpec(spec.name, spec.op, spec.attrs, spec.inputs, spec.outputs, name)
    outs = [np.empty(s.shape, s.dtype.np) for s in spec.outputs]
    step = prebind(bind_layer(spec), inputs, outs)
    if not one_thread:
        return _fastest(step, budget_s, max_runs, cold)
    count = threads.current_count()
    numba.set_num_threads(1)
    try:
        return _fastest(step, budget_s, max_runs, cold)
    finally:
        numba.set_num_threads(count)


def _fastest(step: Callable[[], Any], budget_s: float, max_runs: int, cold: bool) -> float:
    with np.errstate(all="ignore"):
        step()
        times = []
        deadline = time.perf_counter() + budget_s
        while len(times) < max_runs and (len(times) < 2 or time.perf_counter() < deadline):
            if cold:
                _evict()
            t = time.perf_counter()
            step()
            times.append((time.perf_counter() - t) * 1e3)
    return float(np.min(times))


# The reference kernel wins a layer only when faster by this factor: it is numpy with
# single-threaded BLAS, which a layer inside a network (sharing the caches and the memory
# bus with its neighbours) runs no better than alone, while the fast tactics split the
# work over every core; a near-tie timed alone is noise.
REFERENCE_MARGIN = 0.9
# A timing-cache entry "<tactic>@1": the tactic timed on one thread (time_tactic's
# one_thread). Taken only where the reference seems to win: on a machine whose cores other
# processes keep busy, every parallel run loses time slices at its barriers and the
# single-threaded reference won 25 of PP-LCNet's 32 convolutions (the network then ran 4×
# slower); on one thread each, the two do the same work under the same contention.
ONE_THREAD = "@1"


def pick(timings: dict[str, float]) -> str:
    """The fastest tactic, the reference only by a clear margin and only if it also beats
    the fastest other tactic run on one thread (where that was timed)."""
    runs = {n: ms for n, ms in timings.items() if not n.endswith(ONE_THREAD)}
    best = min(runs, key=runs.__getitem__)
    if best != REFERENCE:
        return best
    fast = {n: ms for n, ms in runs.items() if n != REFERENCE}
    if fast:
        runner_up = min(fast, key=fast.__getitem__)
        if timings[REFERENCE] >= REFERENCE_MARGIN * fast[runner_up]:
            return runner_up
        single = timings.get(runner_up + ONE_THREAD)
        if single is not None and single < timings[REFERENCE]:
            return runner_up
    return best


def precompile_specs(layers: Sequence[tuple[LayerSpec, Sequence[bool]]],
                     cache: TimingCache | None, cold: bool,
                     progress: Callable[[int, int], Any] | None = None) -> None:
    """Compile, in parallel workers, one layer of each tactic this process has not bound
    yet and whose timing is missing (pydla.plan.precompile); ``layers`` pairs each spec
    with which of its inputs are constants."""
    jobs: dict[tuple[str, str], dict[str, Any]] = {}
    for spec, constant in layers:
        key = layer_key(spec) + (":cold" if cold else "")
        known = cache.entries.get(key, {}) if cache is not None else {}
        for t in candidate_tactics(spec):
            if t.name in known or precompile.seen(spec.op, t.name) or (spec.op, t.name) in jobs:
                continue
            jobs[(spec.op, t.name)] = precompile.encode(
                LayerSpec(spec.name, spec.op, spec.attrs, spec.inputs, spec.outputs, t.name),
                constant, t.bind.__module__)
    precompile.compile_in_workers(list(jobs.values()), progress)


# What a 3×3 convolution's filters may become: Winograd F(4×4)'s transformed filters are
# 36/9 of them (F(2×2)'s 16/9).
DERIVED_3X3 = 4


def resident_bytes(graph: Graph) -> int:
    """The bytes of weights the network's kernels may stream per run: the weights, 3×3
    filters counted as Winograd's transformed ones. Counting the filters alone, YOLOv8n's
    12 MB passed for cache-resident: its layers were timed hot, Winograd won 28 of them,
    and in the network (its transformed filters ≈ 40 MB) the model ran 5 % slower than
    with the tactics timed cold (batch 1: 8.9 vs 8.4 ms)."""
    total = 0
    for node in graph.nodes:
        for i, v in enumerate(node.inputs):
            if v is None or not v.is_const:
                continue
            size = int(np.asarray(v.const).nbytes)
            if node.op == "Conv" and i == 1 and tuple(v.shape[2:]) == (3, 3):
                size *= DERIVED_3X3
            total += size
    return total


class LayerTimer:
    """Times every tactic of a layer spec (the timing cache first) and names the winner:
    what tactic choice and weak typing (pydla.plan.weak_typing) both measure with."""

    def __init__(self, cache: TimingCache | None, cold: bool) -> None:
        self.cache = cache
        self.cold = cold
        self.rng = np.random.default_rng(0)

    def precompile(self, layers: Sequence[tuple[LayerSpec, Sequence[bool]]],
                   progress: Callable[[int, int], Any] | None = None) -> None:
        precompile_specs(layers, self.cache, self.cold, progress)

    def timings(self, spec: LayerSpec, consts: Sequence[np.ndarray | None]
                ) -> dict[str, float]:
        """Milliseconds per tactic (the reference included); empty when no fast tactic
        applies (the reference runs untimed)."""
        try:
            cands = candidate_tactics(spec)
        except MemoryError as e:  # an applies() check sized by a malformed layer's shapes
            raise ResourceLimitError(f"layer {spec.name!r} ({spec.op}): out of memory "
                                     f"choosing its kernel ({e or 'MemoryError'})") from e
        if not cands:
            return {}
        key = layer_key(spec) + (":cold" if self.cold else "")  # the timings differ
        names = [t.name for t in cands] + [REFERENCE]
        cache = self.cache
        known = cache.entries.get(key, {}) if cache is not None else {}
        timings = {n: known[n] for n in [*names, *(n + ONE_THREAD for n in names)]
                   if n in known}
        missing = [n for n in names if n not in timings]
        if cache is not None:
            cache.hits += not missing
            cache.misses += bool(missing)
        inputs: list[np.ndarray | None] | None = None
        if missing:
            inputs = sample_inputs(spec, consts, self.rng)
            for n in missing:
                timings[n] = time_tactic(spec, n, inputs, cold=self.cold)
                precompile.mark(spec.op, n)
        if pick(timings) == REFERENCE and len(names) > 1 and threads.num_threads() > 1:
            fast = {n: timings[n] for n in names if n != REFERENCE}
            runner_up = min(fast, key=fast.__getitem__) + ONE_THREAD
            if runner_up not in timings:
                if inputs is None:
                    inputs = sample_inputs(spec, consts, self.rng)
                timings[runner_up] = time_tactic(spec, runner_up[:-len(ONE_THREAD)], inputs,
                                                 cold=self.cold, one_thread=True)
        if cache is not None and timings.keys() - known.keys():
            cache.entries[key] = {**known, **timings}
        return timings

    def best_ms(self, spec: LayerSpec, consts: Sequence[np.ndarray | None]) -> float:
        """The time of the tactic ``pick`` would choose (the reference's, timed, when it is
        the only kernel)."""
        timings = self.timings(spec, consts)
        if not timings:
            key = layer_key(spec) + (":cold" if self.cold else "")
            known = self.cache.entries.get(key, {}) if self.cache is not None else {}
            if REFERENCE not in known:
                inputs = sample_inputs(spec, consts, self.rng)
                known = {REFERENCE: time_tactic(spec, REFERENCE, inputs, cold=self.cold)}
                if self.cache is not None:
                    self.cache.entries[key] = known
            return known[REFERENCE]
        return timings[pick(timings)]


def timer_for(graph: Graph, cache: TimingCache | None) -> LayerTimer:
    """A timer whose runs are cold where the network's weights do not fit half the
    last-level cache (it also holds the activations)."""
    return LayerTimer(cache, cold=resident_bytes(graph) > _last_level_cache_bytes() // 2)


def choose_tactics(graph: Graph, ctx: PassContext, *, autotune: bool,
                   cache: TimingCache | None = None,
                   progress: Callable[[int, int], Any] | None = None) -> None:
    """Set ``node.tactic`` for every layer."""
    timer = timer_for(graph, cache)
    if autotune:
        compiling = None if progress is None else (
            lambda done, total: progress(done, total, "Compiling kernels"))
        timer.precompile([(layer_spec(n), [v is not None and v.is_const for v in n.inputs])
                          for n in graph.nodes], compiling)
    for i, node in enumerate(graph.nodes):
        if progress is not None:
            progress(i, len(graph.nodes), "Autotuning")
        spec = layer_spec(node)
        if not autotune:
            try:
                cands = candidate_tactics(spec)
            except MemoryError as e:
                raise ResourceLimitError(f"layer {node.name!r} ({node.op}): out of memory "
                                         f"choosing its kernel ({e or 'MemoryError'})") from e
            node.tactic = cands[0].name if cands else REFERENCE
            continue
        timings = timer.timings(spec, layer_consts(node))
        if not timings:
            node.tactic = REFERENCE
            continue
        node.tactic = pick(timings)
        ctx.note(f"tactics: {node.op} {node.name!r} -> {node.tactic} ("
                 + ", ".join(f"{n} {ms:.3f} ms" for n, ms in sorted(timings.items(),
                                                                  key=lambda x: x[1])) + ")")
    _evict.release()
