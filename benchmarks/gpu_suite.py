"""pydla's CUDA backend against PyTorch on one GPU, in one process.

For each torchvision model (random weights) and batch size: PyTorch eager and a
whole-model CUDA graph (fp16, channels_last), and pydla (the torchvision model exported to
ONNX here, built with fp16 autocast for the cuda target, replayed as one CUDA graph on the
caller's stream, through ``cudla.submit_task`` and the module's ``enqueue`` under it).
Every engine is timed the same way: CUDA events around one call on an
idle stream, median of ``--reps`` after warm-up (host launch cost included). pydla's
output is checked against PyTorch fp32 (cosine and relative error, beside PyTorch fp16's
own error). Batch-norm statistics are calibrated on random images first, so that the
random-weight logits are not degenerate. Results go to
``benchmarks/results/gpu_suite.json``.

``python -m benchmarks.gpu_suite [--models resnet50,mobilenet_v2] [--batches 1,64]``
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

RESULTS = Path(__file__).resolve().parent / "results" / "gpu_suite.json"


def event_median_ms(torch: Any, fn: Callable[[], Any], reps: int, warmup: int = 5) -> float:
    stream = torch.cuda.current_stream()
    for _ in range(warmup):
        fn()
    stream.synchronize()
    times = []
    for _ in range(reps):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record(stream)
        fn()
        end.record(stream)
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def export_onnx(torch: Any, model: Any, path: str) -> None:
    x = torch.randn(1, 3, 224, 224)
    torch.onnx.export(model, (x,), path, dynamo=False, opset_version=17,
                      input_names=["input"], output_names=["logits"],
                      dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}})


def bench_torch(torch: Any, model: Any, x: Any, reps: int) -> dict[str, Any]:
    m16 = copy.deepcopy(model).cuda().half().to(memory_format=torch.channels_last).eval()
    x16 = x.half().to(memory_format=torch.channels_last)
    out: dict[str, Any] = {}
    with torch.inference_mode():
        out["torch_eager_fp16_ms"] = event_median_ms(torch, lambda: m16(x16), reps)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                m16(x16)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            y16 = m16(x16)
        out["torch_graph_fp16_ms"] = event_median_ms(torch, graph.replay, reps)
        out["_torch_fp16_logits"] = y16.float().cpu().numpy()
    return out


def bench_pydla(torch: Any, onnx_path: str, batch: int, x: Any, reps: int,
                input_name: str = "input", out_shape: tuple[int, ...] | None = None
                ) -> dict[str, Any]:
    """Build, load through the cuDLA facade on the CUDA backend, and time a task two ways:
    ``submit_task`` (the cuDLA call, host checks included) and the bound module's
    ``enqueue`` underneath it (the same copies and graph launch)."""
    from pydla import cudla
    from pydla.builder import BuildOptions, build
    from pydla.dtypes import DType
    from pydla.engine.device import MODULES

    t0 = time.perf_counter()
    data = build(onnx_path, BuildOptions(shapes={input_name: tuple(x.shape)},
                                         autocast=DType.FLOAT16, target="cuda",
                                         autotune=False))
    build_s = time.perf_counter() - t0
    cudla.use_backend("cuda")
    dev = cudla.create_device(0, cudla.Mode.CUDA_DLA)
    t0 = time.perf_counter()
    module = cudla.module_load_from_memory(dev, data, len(data), 0)
    load_s = time.perf_counter() - t0
    y = torch.empty(out_shape or (batch, 1000), device="cuda", dtype=torch.float32)
    task = cudla.Task()
    task.module_handle = module
    task.input_tensor = [cudla.mem_register(dev, x.data_ptr(), x.nbytes, 0)]
    task.output_tensor = [cudla.mem_register(dev, y.data_ptr(), y.nbytes, 0)]
    stream = torch.cuda.current_stream()
    bound = MODULES.get(module).loaded.bound
    raw = stream.cuda_stream
    enqueue_ms = event_median_ms(torch, lambda: bound.enqueue(raw, [x.data_ptr()],
                                                              [y.data_ptr()]), reps)
    submit_ms = event_median_ms(torch, lambda: cudla.submit_task(dev, int(task), 1, raw, 0),
                                reps)
    torch.cuda.synchronize()
    summary = bound.summary()
    logits = y.cpu().numpy()
    cudla.module_unload(module, 0)
    cudla.destroy_device(dev)
    cudla.use_backend("cpu")
    return {"pydla_graph_fp16_ms": enqueue_ms, "pydla_submit_task_fp16_ms": submit_ms,
            "pydla_build_s": round(build_s, 2), "pydla_load_s": round(load_s, 2),
            "pydla_graph_nodes": summary["graph_nodes"],
            "pydla_graph_error": summary["graph_error"],
            "pydla_tactics": summary["tactics"], "pydla_notes": summary["notes"][:20],
            "_pydla_logits": logits}


def calibrate_batchnorm(torch: Any, model: Any) -> None:
    """Random-init torchvision nets keep BN statistics of 0/1, so activations drift and the
    logits end up nearly parallel for every input (any two outputs have cosine ≈ 1). One
    cumulative pass of training-mode statistics gives trained-like activation scales, and
    relative errors that mean something."""
    for m in model.modules():
        if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
            m.reset_running_stats()
            m.momentum = None
    model.cuda().train()
    with torch.no_grad():
        for seed in range(2):
            torch.manual_seed(100 + seed)
            model(torch.randn(32, 3, 224, 224, device="cuda"))
    model.cpu().eval()


def relative_error(got: np.ndarray, want: np.ndarray) -> float:
    got, want = got.astype(np.float64), want.astype(np.float64)
    return float(np.linalg.norm(got - want) / np.linalg.norm(want))


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="resnet50,mobilenet_v2")
    parser.add_argument("--batches", default="1,64")
    parser.add_argument("--reps", type=int, default=50)
    parser.add_argument("--out", default=str(RESULTS))
    args = parser.parse_args(argv)

    import torch
    import torchvision

    torch.backends.cudnn.allow_tf32 = False  # the fp32 reference is plain fp32
    torch.backends.cuda.matmul.allow_tf32 = False

    results: dict[str, Any] = {
        "gpu": torch.cuda.get_device_name(0), "torch": torch.__version__,
        "torchvision": torchvision.__version__, "python": platform.python_version(),
        "method": "CUDA events around one call on an idle stream, median of reps after "
                  "warm-up; host launch cost included", "reps": args.reps, "runs": []}
    tmp = tempfile.mkdtemp()
    for name in args.models.split(","):
        model = getattr(torchvision.models, name)(weights=None)
        calibrate_batchnorm(torch, model)
        onnx_path = os.path.join(tmp, f"{name}.onnx")
        export_onnx(torch, model, onnx_path)
        ref_model = copy.deepcopy(model).cuda().eval()
        for batch in (int(b) for b in args.batches.split(",")):
            torch.manual_seed(batch)
            x = torch.randn(batch, 3, 224, 224, device="cuda")
            with torch.inference_mode():
                ref = ref_model(x).float().cpu().numpy()
            row: dict[str, Any] = {"model": name, "batch": batch}
            print(f"{name} batch {batch}", flush=True)
            try:
                row.update(bench_torch(torch, model, x, args.reps))
            except Exception as e:  # noqa: BLE001  (report and carry on)
                row["torch_error"] = f"{type(e).__name__}: {e}"
            try:
                row.update(bench_pydla(torch, onnx_path, batch, x, args.reps))
            except Exception as e:  # noqa: BLE001
                row["pydla_error"] = f"{type(e).__name__}: {e}"
            for engine in ("pydla", "torch_fp16"):
                logits = row.pop(f"_{engine}_logits", None)
                if logits is not None:
                    row[f"{engine}_cosine_vs_torch_fp32"] = cosine(logits, ref)
                    row[f"{engine}_relerr_vs_torch_fp32"] = relative_error(logits, ref)
            if "pydla_graph_fp16_ms" in row and "torch_graph_fp16_ms" in row:
                row["speedup_vs_torch_graph"] = row["torch_graph_fp16_ms"] / row[
                    "pydla_graph_fp16_ms"]
            results["runs"].append(row)
            brief = {k: (round(v, 4) if isinstance(v, float) else v) for k, v in row.items()
                     if k not in ("pydla_tactics", "pydla_notes")}
            print(json.dumps(brief), flush=True)
            Path(args.out).parent.mkdir(parents=True, exist_ok=True)
            Path(args.out).write_text(json.dumps(results, indent=1))
    print("\nmodel         batch  torch eager  torch graph  pydla graph  speedup  cosine  relerr"
          "  (torch fp16 relerr)")
    for r in results["runs"]:
        nan = float("nan")
        print(f"{r['model']:<13} {r['batch']:>5}  {r.get('torch_eager_fp16_ms', nan):>9.3f}"
              f"  {r.get('torch_graph_fp16_ms', nan):>11.3f}"
              f"  {r.get('pydla_graph_fp16_ms', nan):>11.3f}"
              f"  {r.get('speedup_vs_torch_graph', nan):>7.2f}"
              f"  {r.get('pydla_cosine_vs_torch_fp32', nan):.5f}"
              f"  {r.get('pydla_relerr_vs_torch_fp32', nan):.4f}"
              f"  ({r.get('torch_fp16_relerr_vs_torch_fp32', nan):.4f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
