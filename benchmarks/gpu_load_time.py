"""Load time of CUDA loadables: tactics recorded at build against timing them at load.

For each model (the repo's ResNet-50 and MobileNetV2 graphs, random weights, fp16 autocast)
and batch: build for ``target="cuda"`` on this GPU (the build times every layer's
candidates and records the choices), then load the loadable twice — using the recorded
tactics (nothing timed, only the chosen kernels built) and ignoring them (every candidate
built and timed, as before build-time tuning) — and time one task of each (CUDA events,
median). Both loads run after the build, so CuPy's on-disk kernel cache is equally warm.
Results go to ``benchmarks/results/gpu_load_time.json``.

``python -m benchmarks.gpu_load_time [--models resnet50,mobilenetv2] [--batches 1,64]``
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np

RESULTS = Path(__file__).resolve().parent / "results" / "gpu_load_time.json"


def task_ms(cp: Any, bound: Any, reps: int = 30) -> float:
    """Median GPU time of one task (device buffers in and out, the module's graph)."""
    program = bound.program
    ins = [cp.zeros(bound.io[io.tensor].nbytes, cp.uint8) for io in program.inputs]
    outs = [cp.zeros(bound.io[io.tensor].nbytes, cp.uint8) for io in program.outputs]
    stream = cp.cuda.Stream(non_blocking=True)
    args = ([int(a.data.ptr) for a in ins], [int(a.data.ptr) for a in outs])
    for _ in range(5):
        bound.enqueue(int(stream.ptr), *args)
    stream.synchronize()
    times = []
    for _ in range(reps):
        start, end = cp.cuda.Event(), cp.cuda.Event()
        start.record(stream)
        bound.enqueue(int(stream.ptr), *args)
        end.record(stream)
        end.synchronize()
        times.append(cp.cuda.get_elapsed_time(start, end))
    return statistics.median(times)


def measure(name: str, batch: int) -> dict[str, Any]:
    import cupy as cp

    from benchmarks.models import mobilenetv2
    from pydla.backends.cuda import CudaBackend
    from pydla.builder import BuildOptions, build
    from pydla.dtypes import DType
    from pydla.engine.module import LoadedModule
    from pydla.loadable import read_loadable
    from tests.models.families import resnet50

    model, feeds = {"resnet50": resnet50, "mobilenetv2": mobilenetv2}[name](batch=batch)
    t0 = time.perf_counter()
    data = build(model, BuildOptions(autocast=DType.FLOAT16, target="cuda"))
    build_s = time.perf_counter() - t0
    program = read_loadable(data)
    row: dict[str, Any] = {"model": name, "batch": batch, "layers": len(program.layers),
                           "build_s": round(build_s, 2),
                           "build_gpu_tuning_s": program.build["cuda_autotune"]["seconds"]}
    x = next(iter(feeds.values()))
    outputs = {}
    for mode, backend in (("recorded", CudaBackend()), ("timed_at_load",
                                                         CudaBackend(recorded=False))):
        t0 = time.perf_counter()
        module = LoadedModule(data, backend)
        load_s = time.perf_counter() - t0
        summary = module.bound.summary()
        row[mode] = {"load_s": round(load_s, 3), "bind_s": summary["bind_seconds"],
                     "timed_layers": summary["timed_layers"],
                     "graph_nodes": summary["graph_nodes"],
                     "task_ms": round(task_ms(cp, module.bound), 4)}
        outputs[mode] = module.run([x])[0].astype(np.float64).ravel()
        row[mode]["tactics"] = summary["tactics"]
        module.bound.close()
    same = sum(row["recorded"]["tactics"][k] == v
               for k, v in row["timed_at_load"]["tactics"].items())
    for mode in ("recorded", "timed_at_load"):
        del row[mode]["tactics"]
    row["same_tactics"] = f"{same}/{len(program.layers)}"
    a, b = outputs["recorded"], outputs["timed_at_load"]
    row["cosine_between_loads"] = round(float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b))),
                                        6)
    row["load_speedup"] = round(row["timed_at_load"]["load_s"] / row["recorded"]["load_s"], 2)
    return row


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="resnet50,mobilenetv2")
    p.add_argument("--batches", default="64")
    p.add_argument("--out", default=str(RESULTS))
    args = p.parse_args(argv)
    from pydla.backends.cuda.driver import arch_name

    rows = []
    for name in args.models.split(","):
        for batch in (int(b) for b in args.batches.split(",")):
            row = measure(name, batch)
            print(json.dumps(row), flush=True)
            rows.append(row)
    result = {"gpu": arch_name(0), "python": platform.python_version(), "rows": rows}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
