"""Compile the CPU kernels an autotuned build is about to time in parallel worker processes.

numba compiles a fast kernel in 6–12 s on first use (parallel loops, inlined micro-kernels),
in the building process and one at a time: a first ResNet-50 build after installing pydla
spent over a minute compiling. Each kernel is compiled once per machine into numba's disk
cache (pydla.backends.cpu.kernel_cache), so the builder hands the tactics it has not bound
yet in this process to one worker per core — separate interpreters, as numba compiles
holding the GIL — and then finds them in the cache. Workers get each layer as JSON (shapes,
types, attributes; random data of the right kind) and run it once; a worker's failure only
means the builder compiles that kernel itself.

    python -m pydla.plan.precompile JOBS.json   # what a worker runs
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
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


def compile_in_workers(jobs: Sequence[dict[str, Any]]) -> bool:
    """Run ``jobs`` (``encode``'s layers) in parallel workers; False if not worth it.

    Jobs of one kernel module go to the same worker (Winograd's two tactics share most of
    their code: compiled in two processes it would be compiled twice), the largest groups
    first to the least loaded worker."""
    workers = min(_cores(), len(jobs))
    if len(jobs) < MIN_JOBS or workers < 2:
        return False
    groups: dict[str, list[dict[str, Any]]] = {}
    for job in jobs:
        groups.setdefault(job.get("module", ""), []).append(job)
    shares: list[list[dict[str, Any]]] = [[] for _ in range(workers)]
    for group in sorted(groups.values(), key=len, reverse=True):
        min(shares, key=len).extend(group)
    with tempfile.TemporaryDirectory(prefix="pydla-precompile-") as tmp:
        procs = []
        for w, share in enumerate(shares):
            if not share:
                continue
            path = os.path.join(tmp, f"jobs{w}.json")
            with open(path, "w") as f:
                json.dump(share, f)
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "pydla.plan.precompile", path],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        for p in procs:
            try:
                p.wait(timeout=TIMEOUT_S)
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
    args = list(sys.argv[1:] if argv is None else argv)
    with open(args[0]) as f:
        run_jobs(json.load(f))
    return 0


if __name__ == "__main__":
    sys.exit(main())
