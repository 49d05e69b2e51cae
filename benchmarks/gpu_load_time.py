"""Load time of tuned CUDA loadables: cuDNN plans from the plan cache against building them.

For each model (the repo's ResNet-50 and MobileNetV2 graphs, random weights, fp16 autocast)
and batch: build for ``target="cuda"`` on this GPU (the build times every layer's
candidates, records the choices, and leaves the cuDNN plans it built in a fresh plan cache,
``$PYDLA_CUDNN_PLAN_CACHE``), write the loadable to a file, then time loads of it:

- ``fresh_process``: a new Python process per case, as a user's program starts. The
  process's one-off costs are timed apart and are not the load: importing CuPy and the
  backend, creating the CUDA context, loading cuDNN (first handle). ``first_load_s`` is
  then ``LoadedModule(file bytes, CudaBackend())`` — reading and validating the loadable,
  the arena, weight uploads, every kernel (cuDNN plans deserialized from the cache, or built
  with ``plan_cache=False``), the first run and the CUDA graph capture — and
  ``second_load_s`` the same again in that process;
- ``same_process``: in the building process (everything warm), cached against built.

Task time: CUDA events, median of 30. Results go to ``benchmarks/results/gpu_load_time.json``.

``python -m benchmarks.gpu_load_time [--models resnet50,mobilenetv2] [--batches 1,64]
[--profile]`` (``--profile``: the top functions of one cached load, printed)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
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


def child(path: str, cached: bool) -> dict[str, Any]:
    """One fresh process: the one-off costs, then two loads of the loadable at ``path``."""
    t0 = time.perf_counter()
    import cupy as cp

    from pydla.backends.cuda import CudaBackend
    from pydla.backends.cuda.backend import CudaProgram  # noqa: F401  (every kernel module)
    from pydla.backends.cuda.context import cudnn_module
    from pydla.engine.module import LoadedModule

    row: dict[str, Any] = {"import_s": round(time.perf_counter() - t0, 3)}
    t0 = time.perf_counter()
    cp.cuda.Device(0).use()
    cp.empty(1, cp.uint8)
    cp.cuda.Device(0).synchronize()
    row["context_s"] = round(time.perf_counter() - t0, 3)
    t0 = time.perf_counter()
    cudnn = cudnn_module()
    cudnn.destroy_handle(cudnn.create_handle())
    row["cudnn_init_s"] = round(time.perf_counter() - t0, 3)
    for label in ("first", "second"):
        t0 = time.perf_counter()
        module = LoadedModule(Path(path).read_bytes(), CudaBackend(plan_cache=cached))
        row[f"{label}_load_s"] = round(time.perf_counter() - t0, 3)
        summary = module.bound.summary()
        row[f"{label}_bind_s"] = summary["bind_seconds"]
        row[f"{label}_cudnn_plans"] = summary["cudnn_plans"]
        module.bound.close()
    return row


def fresh_process(path: str, cached: bool) -> dict[str, Any]:
    out = subprocess.run([sys.executable, "-m", "benchmarks.gpu_load_time", "--child", path,
                          "--cached", str(int(cached))], capture_output=True, text=True,
                         check=False)
    if out.returncode != 0:
        raise RuntimeError(f"child load failed:\n{out.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def profile_load(data: bytes) -> None:
    import cProfile
    import io
    import pstats

    from pydla.backends.cuda import CudaBackend
    from pydla.engine.module import LoadedModule

    profiler = cProfile.Profile()
    profiler.enable()
    module = LoadedModule(data, CudaBackend())
    profiler.disable()
    module.bound.close()
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(25)
    print(text.getvalue(), flush=True)


def measure(name: str, batch: int, workdir: Path, profile: bool) -> dict[str, Any]:
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
    path = workdir / f"{name}_b{batch}.bin"
    path.write_bytes(data)
    program = read_loadable(data)
    row: dict[str, Any] = {"model": name, "batch": batch, "layers": len(program.layers),
                           "loadable_mb": round(len(data) / 1e6, 1),
                           "cudnn_layers": sum(t.startswith("cudnn/") for t in
                                               program.target["cuda_tactics"].values()),
                           "build_s": round(build_s, 2),
                           "build_gpu_tuning_s": program.build["cuda_autotune"]["seconds"]}
    row["fresh_process"] = {"cached": fresh_process(str(path), True),
                            "built": fresh_process(str(path), False)}
    x = next(iter(feeds.values()))
    outputs = {}
    same: dict[str, Any] = {}
    for mode, cached in (("cached", True), ("built", False)):
        t0 = time.perf_counter()
        module = LoadedModule(data, CudaBackend(plan_cache=cached))
        load_s = time.perf_counter() - t0
        summary = module.bound.summary()
        same[mode] = {"load_s": round(load_s, 3), "bind_s": summary["bind_seconds"],
                      "cudnn_plans": summary["cudnn_plans"],
                      "task_ms": round(task_ms(cp, module.bound), 4)}
        outputs[mode] = module.run([x])[0]
        module.bound.close()
    row["same_process"] = same
    row["identical_outputs"] = bool(np.array_equal(outputs["cached"], outputs["built"]))
    if profile:
        profile_load(data)
    return row


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="resnet50,mobilenetv2")
    p.add_argument("--batches", default="1,64")
    p.add_argument("--out", default=str(RESULTS))
    p.add_argument("--profile", action="store_true")
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--cached", default="1", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child, args.cached == "1")))
        return 0
    from pydla.backends.cuda.context import fingerprint

    rows = []
    with tempfile.TemporaryDirectory(prefix="pydla-load-") as tmp:
        workdir = Path(tmp)
        for name in args.models.split(","):
            for batch in (int(b) for b in args.batches.split(",")):
                # a fresh plan cache per case: only this build's tuning fills it
                os.environ["PYDLA_CUDNN_PLAN_CACHE"] = str(workdir / f"plans_{name}_{batch}")
                row = measure(name, batch, workdir, args.profile)
                print(json.dumps(row), flush=True)
                rows.append(row)
    result = {"env": fingerprint(0).as_dict(), "python": platform.python_version(),
              "rows": rows}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
