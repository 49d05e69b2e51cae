"""The TreeEnsemble kernel against onnxruntime on the corpus' LightGBM classifier
(luscinia/P3_0017_full: 9,988 trees, 4.85 M nodes, 8 classes, 132 features), through the
Pythonic API and onnxruntime's ``session.run``, alternating in rounds in one process.

    PYDLA_CORPUS_JSON=/work/shared/corpus/corpus.json \\
        python -m benchmarks.ml_trees [--batches 1 64 1000]   # writes results/ml_trees.json

Both run with every core this process may use (onnxruntime's intra-op threads set to
the same count); the inputs are standard normal features with a few NaN (missing) values.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

from benchmarks.timing import alternate, others_load
from pydla import api
from pydla.backends.cpu import threads
from pydla.builder import BuildOptions, build
from tests.models import corpus

RESULTS = Path(__file__).with_name("results") / "ml_trees.json"
MODEL = "luscinia/P3_0017_full"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 64, 1000])
    parser.add_argument("--seconds", type=float, default=2.0)
    args = parser.parse_args()
    model = next(m for m in corpus.load() if m.id == MODEL)
    path = corpus.fetch(model, log=print)
    proto = onnx.load(str(path))
    workers = threads.configure()
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = workers
    opts.log_severity_level = 3
    sess = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    rows = []
    for n in args.batches:
        x = np.random.default_rng(n).standard_normal((n, 132)).astype(np.float32)
        x[np.random.default_rng(1).random(x.shape) < 0.02] = np.nan
        begin = time.perf_counter()
        data = build(proto, BuildOptions(shapes={"float_input": [n, 132]}, autotune=False))
        build_s = time.perf_counter() - begin
        with api.Device() as dev, dev.load(data) as module:
            got = module.run({"float_input": x})
            want = sess.run(None, {"float_input": x})
            probs = np.array([list(d.values()) for d in want[1]], np.float32)
            agree = bool(np.array_equal(got[0], want[0]))
            diff = float(np.max(np.abs(got[1] - probs)))
            feeds = {"float_input": x}
            engines = {"pydla": lambda f=feeds: module.run(f),  # type: ignore[misc]
                       "onnxruntime": lambda f=feeds: sess.run(None, f)}  # type: ignore[misc]
            ms, load = others_load(lambda e=engines: alternate(e, min_seconds=args.seconds))
        row = {"batch": n, "pydla_ms": round(ms["pydla"], 3),
               "onnxruntime_ms": round(ms["onnxruntime"], 3),
               "speedup": round(ms["onnxruntime"] / ms["pydla"], 2), "labels_equal": agree,
               "max_abs_diff_probabilities": diff, "build_s": round(build_s, 1),
               "loadable_bytes": len(data), "others_load": load}
        print(row)
        rows.append(row)
    RESULTS.write_text(json.dumps({
        "model": MODEL, "threads": workers, "cpu_count": os.cpu_count(),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
