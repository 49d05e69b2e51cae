"""INT8 ResNet-50 on the GPU (issue 26 item 3): a ResNet-50-shaped network (torchvision's
layer shapes, batch norms folded, random weights) quantized by onnxruntime's
``quantize_static`` (QDQ, per-channel int8 weights, uint8 activations), built for the cuda
target and timed at one batch size as one CUDA-graph replay (CUDA events, median of
``--reps``; inputs already on the GPU), with each layer's GPU time from an eager pass
(events around every launch) summed per op. A batch-2 build is checked against the CPU
backend first (the same loadable on both). Results: ``benchmarks/results/gpu_int8.json``.

``python -m benchmarks.gpu_int8 [--batch 64] [--reps 20]``
"""

from __future__ import annotations

import argparse
import json
import logging
import platform
import statistics
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import onnx

RESULTS = Path(__file__).resolve().parent / "results" / "gpu_int8.json"


def resnet50_like() -> onnx.ModelProto:
    from tests.models.netbuilder import Net

    n = Net("resnet50_int8", seed=0)
    x = n.input("x", ("N", 3, 224, 224))
    y = n.conv(x, 3, 64, k=7, s=2, bn=False, bias=True)
    y = n.op("MaxPool", [y], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    cin = 64
    for width, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
        for b in range(blocks):
            s = stride if b == 0 else 1
            out = width * 4
            h = n.conv(y, cin, width, k=1, bn=False, bias=True)
            h = n.conv(h, width, width, k=3, s=s, bn=False, bias=True)
            h = n.conv(h, width, out, k=1, act=None, bn=False, bias=True)
            short = n.conv(y, cin, out, k=1, s=s, act=None, bn=False, bias=True) \
                if b == 0 else y
            y = n.op("Relu", [n.op("Add", [h, short])])
            cin = out
    y = n.op("Flatten", [n.op("GlobalAveragePool", [y])])
    return n.model([n.linear(y, 2048, 1000)])


def quantized(model: onnx.ModelProto, tmp: Path) -> Path:
    from onnxruntime import quantization as q

    rng = np.random.default_rng(0)
    samples = iter([{"x": rng.standard_normal((1, 3, 224, 224)).astype(np.float32)}
                    for _ in range(2)])

    class Reader(q.CalibrationDataReader):
        def get_next(self) -> dict | None:
            return next(samples, None)

    src, dst = tmp / "f.onnx", tmp / "q.onnx"
    onnx.save(model, src)
    q.quantize_static(str(src), str(dst), Reader(), quant_format=q.QuantFormat.QDQ,
                      per_channel=True, activation_type=q.QuantType.QUInt8,
                      weight_type=q.QuantType.QInt8)
    return dst


def check_small(path: Path) -> dict[str, Any]:
    from pydla.backends.cuda import CudaBackend
    from pydla.builder import BuildOptions, build
    from pydla.engine.module import LoadedModule

    data = build(str(path), BuildOptions(shapes={"x": (2, 3, 224, 224)}, target="cuda",
                                         autotune=False))
    x = np.random.default_rng(1).standard_normal((2, 3, 224, 224)).astype(np.float32)
    want = LoadedModule(data).run([x])[0]
    gpu = LoadedModule(data, CudaBackend())
    try:
        got = gpu.run([x])[0]
    finally:
        gpu.bound.close()
    g, w = got.astype(np.float64).ravel(), want.astype(np.float64).ravel()
    return {"batch": 2, "bitwise_equal": bool(np.array_equal(got, want)),
            "max_abs_diff": float(np.abs(g - w).max()),
            "cosine": float(g @ w / max(np.linalg.norm(g) * np.linalg.norm(w), 1e-30))}


def time_big(path: Path, batch: int, reps: int) -> dict[str, Any]:
    import cupy as cp

    from pydla.backends.cuda import CudaBackend
    from pydla.builder import BuildOptions, build
    from pydla.engine.module import LoadedModule

    t0 = time.perf_counter()
    data = build(str(path), BuildOptions(shapes={"x": (batch, 3, 224, 224)}, target="cuda",
                                         autotune=False))
    build_s = time.perf_counter() - t0
    x = np.random.default_rng(2).standard_normal((batch, 3, 224, 224)).astype(np.float32)
    gpu = LoadedModule(data, CudaBackend())
    bound = gpu.bound
    try:
        gpu.run([x])
        stream = bound.stream
        times = []
        for i in range(reps + 3):
            start, end = cp.cuda.Event(), cp.cuda.Event()
            start.record(stream)
            bound._run(int(stream.ptr))
            end.record(stream)
            end.synchronize()
            if i >= 3:
                times.append(cp.cuda.get_elapsed_time(start, end))
        ms = statistics.median(times)
        per_op: dict[str, float] = defaultdict(float)
        per_layer: list[tuple[float, str, str]] = []
        layers = bound.program.layers
        for _ in range(2):  # the second pass is the one kept
            per_op.clear()
            per_layer.clear()
            for launch, index in zip(bound.launches, bound.layer_of_launch):
                start, end = cp.cuda.Event(), cp.cuda.Event()
                start.record(stream)
                launch(stream)
                end.record(stream)
                end.synchronize()
                t = cp.cuda.get_elapsed_time(start, end)
                op = layers[index].op if index >= 0 else "copy"
                per_op[op] += t
                if index >= 0:
                    per_layer.append((t, layers[index].name, op))
        tactics = bound.summary()["tactics"]
    finally:
        bound.close()
    return {"batch": batch, "build_s": round(build_s, 1), "graph_ms_median": round(ms, 4),
            "images_per_s": round(batch / ms * 1e3),
            "eager_ms_by_op": {k: round(v, 4) for k, v in sorted(per_op.items(),
                                                                  key=lambda kv: -kv[1])},
            "slowest_layers": [{"layer": name, "op": op, "ms": round(t, 4),
                                "tactic": tactics.get(name)}
                               for t, name, op in sorted(per_layer, reverse=True)[:12]]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--out", default=str(RESULTS))
    args = ap.parse_args()
    logging.disable(logging.WARNING)
    import cupy as cp

    with tempfile.TemporaryDirectory() as tmp:
        path = quantized(resnet50_like(), Path(tmp))
        result: dict[str, Any] = {
            "model": "resnet50-like (torchvision shapes, random weights), onnxruntime "
                     "quantize_static QDQ u8/s8 per-channel",
            "gpu": cp.cuda.runtime.getDeviceProperties(0)["name"].decode(),
            "host": platform.node(), "date": time.strftime("%Y-%m-%d")}
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        # timing first, each stage written as it ends (the CPU check compiles kernels)
        for key, stage in (("timing", lambda: time_big(path, args.batch, args.reps)),
                           ("check", lambda: check_small(path))):
            result[key] = stage()
            print(json.dumps({key: result[key]}, indent=1), flush=True)
            out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
