"""Compile the CPU kernels an autotuned build is about to time in parallel worker processes.

numba compiles a fast kernel in 5–15 s on first use (micro-kernels, the epilogue
interpreter; see pydla.backends.cpu.fork), in the building process and one at a time: a
first ResNet-50 build after installing pydla would spend a minute compiling. Each kernel is
compiled once per machine into numba's disk cache (pydla.backends.cpu.kernel_cache), so the
builder hands the tactics it has not bound yet in this process to one worker per core —
separate interpreters, as numba compiles holding the GIL — and then finds them in the
cache. Workers get each layer as JSON (shapes, types, attributes; random data of the right
kind) and run it once; a worker's failure only means the builder compiles that kernel
itself.

    python -m pydla.plan.precompile   # what a worker runs: groups of jobs on stdin
"""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from pydla.backends.base import LayerSpec, TensorSpec
from pydla.backends.cpu.threads import cores as _cores
from pydla.dtypes import DType

MIN_JOBS = 3  # fewer new kernels than this: not worth starting interpreters
TIMEOUT_S = 600
_SEEN: set[tuple[str, str]] = set()  # (op, tactic) bound by this process


def seen(op: str, tactic: str) -> bool:
    return (op, tactic) in _SEEN


def mark(op: str, tactic: str) -> None:
    _SEEN.add((op, tactic))


def encode(spec: LayerSpec, constant: Sequence[bool], module: str) -> dict[str, Any]:
    """A layer as JSON: what its kernel's types depend on (read-only weights included);
    ``module``, where the tactic's kernels live."""
    return {"name": spec.name, "op": spec.op, "tactic": spec.tactic, "module": module,
            "attrs": json.loads(json.dumps(spec.attrs, default=_plain)),
            "inputs": [None if s is None else [list(s.shape), int(s.dtype), bool(c)]
                       for s, c in zip(spec.inputs, constant)],
            "outputs": [[list(s.shape), int(s.dtype)] for s in spec.outputs]}


def _plain(value: Any) -> Any:
    return value.tolist() if hasattr(value, "tolist") else str(value)


# What a job's kernel costs to compile, roughly, in seconds on a Zen 3 core (ResNet-50's:
# a matrix product with its fused epilogue 8, convolutions 4-10 — Winograd's two tactics
# 16 together —, the rest a second or two). The longest go first, so that the last ones
# to finish are short.
COMPILE_S = {"Gemm": 9, "MatMul": 9, "Conv": 8, "ConvTranspose": 8, "LSTM": 8, "GRU": 8,
             "RNN": 8}


def weight(group: Sequence[dict[str, Any]]) -> int:
    return sum(COMPILE_S.get(job["op"], 1) for job in group)


def groups_in_order(jobs: Sequence[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """``jobs`` by kernel module and layouts, the slowest groups first. Tactics of one
    module on the same layouts share their kernel (Winograd F(4×4) and F(2×2): compiled in
    two processes, it would be compiled twice); on blocked and on planar tensors they do
    not (steps.Fixed), and may go to different workers."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for job in jobs:
        layouts = str(job.get("attrs", {}).get("layouts"))
        groups.setdefault((job.get("module", ""), layouts), []).append(job)
    return sorted(groups.values(), key=weight, reverse=True)


def compile_in_workers(jobs: Sequence[dict[str, Any]],
                       progress: Callable[[int, int], Any] | None = None) -> bool:
    """Run ``jobs`` (``encode``'s layers) in parallel workers; False if not worth it.
    ``progress(done, total)`` counts compiled jobs (the CLI's "Compiling kernels" bar).

    Each worker takes the next group (groups_in_order) when it has compiled its last:
    dealt out in advance by count, one of two workers got Winograd, the 1×1 GEMM and the
    matrix product — 170 of ResNet-50's 250 s of compiling."""
    workers = min(_cores(), len(jobs))
    if len(jobs) < MIN_JOBS or workers < 2:
        return False
    pending: queue.SimpleQueue[list[dict[str, Any]]] = queue.SimpleQueue()
    for group in groups_in_order(jobs):
        pending.put(group)
    deadline = time.monotonic() + TIMEOUT_S
    done = [0]
    lock = threading.Lock()
    procs = [subprocess.Popen([sys.executable, "-m", "pydla.plan.precompile"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, text=True)
             for _ in range(workers)]

    def feed(proc: subprocess.Popen[str]) -> None:
        assert proc.stdin is not None and proc.stdout is not None
        try:
            while True:
                try:
                    group = pending.get_nowait()
                except queue.Empty:
                    break
                proc.stdin.write(json.dumps(group) + "\n")
                proc.stdin.flush()
                if not proc.stdout.readline():  # the worker died: the builder compiles
                    break
                with lock:
                    done[0] += len(group)
                    if progress is not None:
                        progress(done[0], len(jobs))
            proc.stdin.close()
        except OSError:
            pass

    threads = [threading.Thread(target=feed, args=(p,), daemon=True) for p in procs]
    for t in threads:
        t.start()
    for t, p in zip(threads, procs):
        t.join(max(0.0, deadline - time.monotonic()))
        try:
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
    return True


def _array(shape: Sequence[int], dtype: DType, constant: bool,
           rng: np.random.Generator) -> np.ndarray:
    a = (rng.standard_normal(shape).astype(dtype.np) if dtype.is_float
         else np.zeros(shape, dtype.np))
    if constant:
        a.flags.writeable = False
    return a


def run_jobs(jobs: Sequence[dict[str, Any]]) -> None:
    from pydla.backends.cpu.backend import bind_layer
    from pydla.backends.cpu.steps import prebind

    rng = np.random.default_rng(0)
    for job in jobs:
        try:
            ins = [None if i is None else TensorSpec(tuple(i[0]), DType(i[1]))
                   for i in job["inputs"]]
            outs = [TensorSpec(tuple(o[0]), DType(o[1])) for o in job["outputs"]]
            spec = LayerSpec(job["name"], job["op"], job["attrs"], tuple(ins), tuple(outs),
                             job["tactic"])
            arrays = [None if i is None else _array(i[0], DType(i[1]), i[2], rng)
                      for i in job["inputs"]]
            results = [np.empty(o.shape, o.dtype.np) for o in outs]
            with np.errstate(all="ignore"):
                prebind(bind_layer(spec), arrays, results)()
        except Exception:  # noqa: BLE001  (the builder compiles it itself)
            continue


def main(argv: Sequence[str] | None = None) -> int:
    """A worker: a group of jobs (JSON) per line of stdin, "done" on stdout after each."""
    del argv
    for line in sys.stdin:
        run_jobs(json.loads(line))
        print("done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
