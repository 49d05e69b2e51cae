"""Short fuzz runs (CI) and every case that ever failed: each ends typed, never untyped.

The long run is ``scripts/fuzz.py``; these run a few hundred cases in this process (fast:
most are refused by the reader) and a small batch in subprocess workers, where a crash
or a hang is caught as such instead of killing the test run.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pydla import cudla
from pydla.engine.status import Status
from tests.fuzz.harness import run_case, run_input, run_pool, seed_names
from tests.fuzz.seed_models import SEED_MODELS

REGRESSIONS = Path(__file__).resolve().parent / "regressions"
INDEX = json.loads((REGRESSIONS / "index.json").read_text())


def _failures(outcomes: dict[str, str]) -> dict[str, str]:
    return {c: o for c, o in outcomes.items() if o.split(":")[0] not in ("ok", "typed")}


LOADABLES = sorted(n for n in INDEX if n.endswith(".pdla"))
MODELS = sorted(n for n in INDEX if n.endswith(".onnx"))


@pytest.mark.parametrize("name", LOADABLES)
def test_regression_is_refused_typed(name: str) -> None:
    """A loadable that once crashed the process or escaped untyped now ends typed."""
    outcome = run_input("structure", (REGRESSIONS / name).read_bytes())
    assert outcome.split(":")[0] in ("ok", "typed"), (INDEX[name], outcome)


@pytest.mark.parametrize("name", LOADABLES)
def test_regression_through_cudla_is_invalid_module(name: str) -> None:
    data = (REGRESSIONS / name).read_bytes()
    dev = cudla.create_device(0, 0)
    try:
        with pytest.raises(cudla.CudlaError) as e:
            cudla.module_load_from_memory(dev, data, len(data), 0)
        assert e.value.status == Status.ErrorInvalidModule
    finally:
        cudla.destroy_device(dev)


@pytest.fixture(scope="module")
def model_outcomes() -> dict[str, str]:
    """The stored ONNX cases, built in one memory-capped worker (some once tried to
    allocate terabytes)."""
    summary = run_pool([f"onnxregression:{n}:0" for n in MODELS], jobs=1, timeout=120,
                       warmup=False)
    outcomes = {f["case"].split(":")[1]: f["outcome"] for f in summary.failures}
    return {n: outcomes.get(n, "typed or ok") for n in MODELS}


@pytest.mark.parametrize("name", [
    pytest.param(n, marks=pytest.mark.xfail(strict=True, reason=INDEX[n]["defect"]))
    if INDEX[n].get("open") else n for n in MODELS])
def test_onnx_regression_ends_typed(model_outcomes: dict[str, str], name: str) -> None:
    """Open ones (``"open": true`` in index.json) are importer defects the fuzzer found and
    nobody has fixed yet: strict xfail, so a fix must also drop the mark."""
    assert model_outcomes[name] == "typed or ok", (INDEX[name], model_outcomes[name])


@pytest.mark.parametrize("mode,count", [("structure", 240), ("bytes", 240)])
def test_mutated_loadables_end_typed(mode: str, count: int) -> None:
    seeds = seed_names()
    outcomes = {f"{mode}:{seeds[i % len(seeds)]}:{i}": "" for i in range(count)}
    for case in outcomes:
        outcomes[case] = run_case(case)
    assert not _failures(outcomes)
    # the mutations must reach past the digest: most are refused, some accepted and run
    kinds = {o.split(":")[0] for o in outcomes.values()}
    assert kinds == {"ok", "typed"} if mode == "structure" else "typed" in kinds


def test_mutated_onnx_models_end_typed() -> None:
    outcomes = {f"onnx:{name}:{i}": "" for i in range(4) for name in sorted(SEED_MODELS)}
    for case in outcomes:
        outcomes[case] = run_case(case)
    assert not _failures(outcomes)


def test_subprocess_guard_catches_crashes_and_hangs() -> None:
    """A small batch in a worker: the pool reports a dead worker's case as a crash."""
    cases = [f"bytes:{name}:{10_000 + i}" for i, name in enumerate(seed_names())]
    summary = run_pool(cases + ["crash:abort:0"] + cases[:1], jobs=1, timeout=120,
                       warmup=False)
    assert summary.cases == len(cases) + 2  # the worker was replaced
    assert [f["case"] for f in summary.failures] == ["crash:abort:0"]
    assert summary.failures[0]["outcome"] == "crash:SIGABRT"
