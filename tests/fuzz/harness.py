"""Run fuzz cases and classify them; a pool of subprocess workers catches crashes and hangs.

A case is ``mode:seed:number`` (modes: ``structure`` and ``bytes`` mutate a seed loadable,
``onnx`` a seed model). Outcomes: ``ok`` (accepted and ran), ``typed:<Error>`` (a PydlaError:
the refusal we want), ``untyped:<Exception>: …``, ``crash:<signal>`` and ``hang``
(failures); ``harness:…`` when the mutator itself failed to make the case (counted, not a
finding about pydla).
A worker reads one case name on stdin at a time and answers with its outcome, so the parent
knows which case a dead or stuck worker was running.
"""

from __future__ import annotations

import json
import os
import resource
import selectors
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
SEEDS = Path(__file__).resolve().parent / "seeds"
REGRESSIONS = Path(__file__).resolve().parent / "regressions"
FAILURES = ("untyped", "crash", "hang")
PROGRESS_EVERY = int(os.environ.get("PYDLA_FUZZ_PROGRESS", "1000"))


def seed_names() -> list[str]:
    return sorted(p.stem for p in SEEDS.glob("*.pdla"))


def case_bytes(case: str) -> bytes:
    """The input of a case: a mutated loadable, or a mutated serialized ONNX model."""
    from tests.fuzz.loadables import mutated_loadable
    from tests.fuzz.onnx_models import mutated_model

    mode, seed, number = case.split(":")
    if mode in ("regression", "onnxregression"):  # a stored case: tests/fuzz/regressions/<seed>
        return (REGRESSIONS / seed).read_bytes()
    if mode == "onnx":
        return mutated_model(seed, int(number))
    return mutated_loadable((SEEDS / f"{seed}.pdla").read_bytes(), mode, int(number))


def run_input(mode: str, data: bytes) -> str:
    """Load (or build, then load) and run; the outcome string."""
    from pydla.builder import BuildOptions, build
    from pydla.engine import LoadedModule
    from pydla.errors import PydlaError
    from tests.fuzz.loadables import random_inputs

    try:
        if mode == "onnx":
            data = build(data, BuildOptions(autotune=False))
        module = LoadedModule(data)
        module.run(random_inputs(module, np.random.default_rng(0)))
        return "ok"
    except PydlaError as e:
        return f"typed:{type(e).__name__}"
    except Exception as e:  # noqa: BLE001  (any other exception is the finding)
        return f"untyped:{type(e).__name__}: {str(e)[:300]}"


def run_case(case: str) -> str:
    if case == "crash:abort:0":  # the pool's self-test: a worker that dies by a signal
        os.abort()
    mode = case.split(":")[0]
    return run_input("onnx" if mode == "onnxregression" else mode, case_bytes(case))


def limit_memory(gib: float) -> None:
    """Cap the address space, so a huge allocation is a MemoryError, not a swap storm."""
    soft = int(gib * (1 << 30))
    resource.setrlimit(resource.RLIMIT_AS, (soft, resource.getrlimit(resource.RLIMIT_AS)[1]))


def worker_main() -> None:
    """Loop: read a case on stdin, run it, write its outcome."""
    os.environ.setdefault("NUMBA_NUM_THREADS", "1")
    limit_memory(float(os.environ.get("PYDLA_FUZZ_MEMORY_GIB", "8")))
    # Compile every seed's kernels first: a worker's first run of a kernel family compiles
    # it (tens of seconds on a busy machine), which is no hang.
    if os.environ.get("PYDLA_FUZZ_WARMUP", "1") == "1":
        for name in seed_names():
            run_input("structure", (SEEDS / f"{name}.pdla").read_bytes())
    out = sys.stdout
    out.write("ready\n")
    out.flush()
    for line in sys.stdin:
        case = line.strip()
        if not case:
            continue
        try:
            outcome = run_case(case)
        except Exception as e:  # noqa: BLE001  (making the case failed: the fuzzer's bug)
            outcome = f"harness:{type(e).__name__}: {e}"
        out.write(f"done {case} {json.dumps(outcome)}\n")
        out.flush()


@dataclass
class Summary:
    counts: Counter[str] = field(default_factory=Counter)
    failures: list[dict[str, str]] = field(default_factory=list)
    cases: int = 0
    seconds: float = 0.0

    def record(self, case: str, outcome: str) -> None:
        self.cases += 1
        kind = outcome.split(":")[0]
        self.counts[f"{case.split(':')[0]}/{kind}"] += 1
        if kind in FAILURES:
            self.failures.append({"case": case, "outcome": outcome})

    def to_json(self) -> dict[str, object]:
        by_kind: Counter[str] = Counter()
        for key, n in self.counts.items():
            by_kind[key.split("/")[1]] += n
        return {"cases": self.cases, "seconds": round(self.seconds, 1),
                "crashes": by_kind["crash"], "hangs": by_kind["hang"],
                "untyped": by_kind["untyped"], "counts": dict(sorted(self.counts.items())),
                "failures": self.failures}


class _Worker:
    def __init__(self, env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", "from tests.fuzz.harness import worker_main; worker_main()"],
            cwd=REPO, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL, text=True, bufsize=1)
        self.case: str | None = None
        self.ready = False  # until it has warmed up, a worker's silence is no hang
        self.since = 0.0
        self.pending = b""

    def lines(self) -> list[str] | None:
        """Complete lines available now; None once the worker has died."""
        assert self.proc.stdout is not None
        chunk = os.read(self.proc.stdout.fileno(), 1 << 16)
        if not chunk:
            return None
        *done, self.pending = (self.pending + chunk).split(b"\n")
        return [line.decode() for line in done]

    def send(self, case: str) -> None:
        self.case, self.since = case, time.monotonic()
        assert self.proc.stdin is not None
        self.proc.stdin.write(case + "\n")
        self.proc.stdin.flush()

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()


def run_pool(cases: Iterable[str], jobs: int, timeout: float,
             progress: bool = False, warmup: bool = True,
             seconds: float | None = None,
             checkpoint: Callable[[Summary], None] | None = None) -> Summary:
    """Run every case in ``jobs`` subprocess workers; a dead worker is a crash of its case,
    one silent for ``timeout`` seconds a hang (it is killed); both are replaced.
    ``warmup``: workers first compile the seeds' kernels (off: their first case does);
    ``seconds``: no new case starts after that long (the run stops early, cleanly);
    ``checkpoint`` receives the summary so far every PROGRESS_EVERY cases."""
    env = dict(os.environ, PYTHONPATH=str(REPO), PYTHONFAULTHANDLER="",
               PYDLA_FUZZ_WARMUP="1" if warmup else "0")
    todo: Iterator[str] = iter(cases)
    summary = Summary()
    start = time.monotonic()
    sel = selectors.DefaultSelector()
    workers: list[_Worker] = []

    def feed(w: _Worker) -> bool:
        if seconds is not None and time.monotonic() - start > seconds:
            return False
        case = next(todo, None)
        if case is None:
            return False
        w.send(case)
        return True

    def spawn() -> None:
        w = _Worker(env)
        assert w.proc.stdout is not None
        sel.register(w.proc.stdout, selectors.EVENT_READ, w)
        workers.append(w)
        if not feed(w):
            retire(w)

    def retire(w: _Worker) -> None:
        sel.unregister(w.proc.stdout)  # type: ignore[arg-type]
        workers.remove(w)
        w.kill()

    for _ in range(jobs):
        spawn()
    while workers:
        for key, _ in sel.select(timeout=1.0):
            w: _Worker = key.data
            lines = w.lines()
            if lines is None:  # died
                rc = w.proc.wait()
                name = signal.Signals(-rc).name if rc < 0 else f"exit {rc}"
                summary.record(w.case or "?", f"crash:{name}")
                retire(w)
                spawn()
                continue
            for line in lines:
                if line == "ready":  # warmed up: the case's clock starts now
                    w.ready, w.since = True, time.monotonic()
                    continue
                _, case, outcome = line.split(" ", 2)
                summary.record(case, json.loads(outcome))
                if summary.cases % PROGRESS_EVERY == 0:
                    summary.seconds = time.monotonic() - start
                    if progress:
                        print(f"{summary.cases} cases, {summary.seconds:.0f} s",
                              file=sys.stderr, flush=True)
                    if checkpoint is not None:
                        checkpoint(summary)
                if not feed(w):
                    retire(w)
        now = time.monotonic()
        for w in [w for w in workers if w.ready and now - w.since > timeout]:
            summary.record(w.case or "?", "hang")
            retire(w)
            spawn()
    summary.seconds = time.monotonic() - start
    return summary
