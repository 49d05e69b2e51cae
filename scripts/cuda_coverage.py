"""CUDA kernel coverage of the real-model corpus: per model, ``pydla check --target=cuda``'s
summary and the layers without a CUDA kernel; then per op the number of models it blocks —
the to-do list of GPU coverage (issue 26). No GPU needed.

    python scripts/cuda_coverage.py [--core | --all] [--out benchmarks/results/cuda_coverage.json]

Models are fetched into the corpus cache first (``python -m tests.models.corpus fetch``);
models not in the cache are listed as skipped. Prints the gap table as Markdown.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pydla.backends.cuda.coverage import CPU_ONLY, check_cuda_model  # noqa: E402
from pydla.errors import PydlaError  # noqa: E402
from tests.models import corpus  # noqa: E402


def one(model: corpus.Model) -> dict[str, Any]:
    row: dict[str, Any] = {"model": model.id}
    started = time.perf_counter()
    shapes = {k: v[0] for k, v in model.inputs.items()}
    try:
        report = check_cuda_model(model.path(), shapes=shapes)
        built = check_cuda_model(model.path(), shapes=shapes, built=True)
    except PydlaError as e:
        row["error"] = f"{type(e).__name__}: {e}"[:300]
        return row
    # the same check over the layers a cuda build lowers (fused programs, epilogues)
    row["as_built"] = {"summary": built.summary(), "gaps": dict(sorted(built.gaps().items()))}
    row["summary"] = report.summary()
    row["supported_layers"], row["total_layers"] = report.supported_layers, len(report.layers)
    row["flops_fraction"] = round(report.flops_fraction, 4)
    gaps: dict[str, Counter] = {}
    examples: dict[str, str] = {}
    for v in report.layers:
        if v.refusal is not None:
            gaps.setdefault(v.op, Counter())[v.refusal.rule] += 1
            examples.setdefault(v.op, f"{v.name}: {v.refusal.detail}")
    row["gaps"] = {op: dict(rules) for op, rules in sorted(gaps.items())}
    row["examples"] = dict(sorted(examples.items()))
    row["seconds"] = round(time.perf_counter() - started, 1)
    return row


def gap_table(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """op → models it blocks, layers, the rules (no kernel / types / shape), the reason."""
    models: Counter = Counter()
    layers: Counter = Counter()
    rules: dict[str, set[str]] = {}
    example: dict[str, str] = {}
    for row in rows:
        for op, by_rule in row.get("gaps", {}).items():
            models[op] += 1
            layers[op] += sum(by_rule.values())
            rules.setdefault(op, set()).update(by_rule)
            example.setdefault(op, f"{row['model']} {row['examples'][op]}")
    return [{"op": op, "models": n, "layers": layers[op], "rules": sorted(rules[op]),
             "why": CPU_ONLY.get(op) or f"e.g. {example[op]}"}
            for op, n in sorted(models.items(), key=lambda kv: (-kv[1], kv[0]))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--core", action="store_true", help="the core models (default)")
    which.add_argument("--all", action="store_true", help="every corpus model")
    parser.add_argument("--out", help="write the rows and the gap table as JSON here")
    args = parser.parse_args(argv)
    rows = []
    for model in corpus.load():
        if not (args.all or model.core):
            continue
        if not corpus.is_cached(model):
            rows.append({"model": model.id, "skipped": "not in the corpus cache"})
            continue
        rows.append(one(model))
        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    table = gap_table(rows)
    checked = [r for r in rows if "summary" in r]
    clean = [r["model"] for r in checked if not r["gaps"]]
    built_clean = [r["model"] for r in checked if not r["as_built"]["gaps"]]
    print(f"{len(checked)} models checked, {len(clean)} without a gap ({len(built_clean)} as "
          f"built, the same models: {clean == built_clean}); "
          f"{len(rows) - len(checked)} not checked (import error or not cached)\n")
    print("| op | models | layers | rule | why |\n|---|---|---|---|---|")
    for g in table:
        print(f"| {g['op']} | {g['models']} | {g['layers']} | {', '.join(g['rules'])} | "
              f"{g['why']} |")
    if args.out:
        Path(args.out).write_text(json.dumps({"models": rows, "gaps": table, "clean": clean,
                                              "clean_as_built": built_clean}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
