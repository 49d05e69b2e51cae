"""DLA readiness of the real-model corpus: per model, the check's summary, the partition
stitched back with onnxruntime against the original (max relative difference, fp32), and
what a standalone build says (the first refused layer and its rule, or success).

    python scripts/dla_corpus.py [--core | --all] [--adjust] [--out results.json]

Models are fetched into the corpus cache first (``python -m tests.models.corpus fetch``);
models not in the cache are listed as skipped.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pydla.builder import BuildOptions  # noqa: E402
from pydla.dla import build as dla_build  # noqa: E402
from pydla.dla.partition import partition_model, run_parts  # noqa: E402
from pydla.dtypes import DType  # noqa: E402
from pydla.errors import PydlaError  # noqa: E402
from tests.models import corpus  # noqa: E402


def one(model: corpus.Model, adjust: bool) -> dict[str, Any]:
    import onnx
    import onnxruntime as ort

    path = model.path()
    shapes = {k: v[0] for k, v in model.inputs.items()}
    feeds = model.random_inputs()
    row: dict[str, Any] = {"model": model.id}
    started = time.perf_counter()
    proto = onnx.load(str(path))  # loaded (and adjusted) once: partition, reference, build
    if adjust:
        from pydla.dla.adjust import adjust_for_dla

        proto = adjust_for_dla(proto)[0]
    with tempfile.TemporaryDirectory() as out:
        try:
            manifest, report = partition_model(proto, out, "fp16", shapes)
        except PydlaError as e:
            row["error"] = f"{type(e).__name__}: {e}"
            return row
        row["summary"] = report.summary()
        row["supported_layers"], row["total_layers"] = report.supported_layers, len(report.layers)
        row["flops_fraction"] = round(report.flops_fraction, 4)
        row["dla_subgraphs"] = len(report.segments)
        refused: dict[str, int] = {}
        for v in report.layers:
            if v.refusal is not None:
                refused[v.refusal.rule] = refused.get(v.refusal.rule, 0) + 1
        row["refused_by_rule"] = dict(sorted(refused.items(), key=lambda kv: -kv[1]))
        row["parts"] = len(manifest["parts"])

        def session(p: str) -> Any:
            return ort.InferenceSession(p, providers=["CPUExecutionProvider"])

        try:
            want = session(proto.SerializeToString()).run(manifest["outputs"], feeds)
            got = run_parts(manifest, out, feeds, session)
            row["stitched_max_rel_diff"] = max(
                float(np.abs(np.asarray(g, np.float64) - np.asarray(w, np.float64)).max())
                / max(float(np.abs(np.asarray(w, np.float64)).max()), 1e-30)
                if np.asarray(w).size and np.issubdtype(np.asarray(w).dtype, np.number) else 0.0
                for w, g in zip(want, got.values()))
        except Exception as e:  # noqa: BLE001  (report the part that failed and go on)
            row["stitch_error"] = f"{type(e).__name__}: {e}"[:300]
    # The build's own DLA step (what --useDLACore without fallback runs before compiling).
    try:
        dla_build.plan(proto, BuildOptions(shapes=shapes, dla_core=0, autocast=DType.FLOAT16))
        row["standalone"] = "builds"
    except PydlaError as e:
        row["standalone"] = str(e).split("; --allowGPUFallback")[0]
    row["seconds"] = round(time.perf_counter() - started, 1)
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--core", action="store_true", help="the 25 core models (default)")
    which.add_argument("--all", action="store_true", help="every corpus model")
    parser.add_argument("--adjust", action="store_true", help="check the --adjust-ed models")
    parser.add_argument("--out", help="write the rows as JSON here")
    args = parser.parse_args(argv)
    rows = []
    for model in corpus.load():
        if not (args.all or model.core):
            continue
        if not corpus.is_cached(model):
            rows.append({"model": model.id, "skipped": "not in the corpus cache"})
            continue
        row = one(model, args.adjust)
        rows.append(row)
        print(json.dumps(row), flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
