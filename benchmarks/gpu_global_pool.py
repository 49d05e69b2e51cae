"""Global pools on the GPU: each candidate's time on squeeze-excite shapes, and a
DBNet-style 640×640 text detector with squeeze-excite blocks on large maps (PP-OCR's
LCNet backbone shape) end to end, pydla against PyTorch's whole-model CUDA graph.

The candidates' times come from the backend's own autotuner (CUDA events, ``--reps`` runs
after a warm-up). The detector is timed as ``benchmarks.gpu_suite`` times torchvision
models (CUDA events around one call on an idle stream, median). Results go to
``benchmarks/results/gpu_global_pool.json``.

``python -m benchmarks.gpu_global_pool [--reps 50]``
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
from pathlib import Path
from typing import Any

import onnx
from onnx import TensorProto, helper

from benchmarks.gpu_suite import bench_pydla, bench_torch, cosine, relative_error

RESULTS = Path(__file__).resolve().parent / "results" / "gpu_global_pool.json"
SHAPES = [(1, 16, 320, 320), (1, 32, 160, 160), (1, 64, 80, 80), (1, 128, 40, 40),
          (1, 256, 20, 20), (64, 2048, 7, 7), (8, 64, 160, 160)]


def candidate_times(shape: tuple[int, int, int, int], reps: int) -> dict[str, Any]:
    from pydla.backends.cuda import CudaBackend
    from pydla.backends.cuda.backend import CudaProgram
    from pydla.builder import BuildOptions, build
    from pydla.dtypes import DType
    from pydla.loadable import read_loadable

    n, c = shape[:2]
    graph = helper.make_graph(
        [helper.make_node("GlobalAveragePool", ["x"], ["y"], name="pool")], "pool",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [n, c, 1, 1])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    data = build(model, BuildOptions(target="cuda", autocast=DType.FLOAT16, autotune=False))
    bound = CudaProgram(read_loadable(data), CudaBackend(recorded=False, reps=reps,
                                                         graph=False))
    try:
        choice = next(c for c in bound.choices if c.layer == "pool")
        return {"shape": list(shape), "chosen": choice.tactic,
                "ms": {k: round(v * 1000, 2) for k, v in choice.alternatives.items()},
                "unit": "us"}
    finally:
        bound.close()


def detector(torch: Any) -> Any:
    nn = torch.nn

    class SE(nn.Module):
        def __init__(self, c: int) -> None:
            super().__init__()
            self.pool = nn.AdaptiveAvgPool2d(1)
            self.fc1 = nn.Conv2d(c, c // 4, 1)
            self.fc2 = nn.Conv2d(c // 4, c, 1)

        def forward(self, x: Any) -> Any:
            s = torch.relu(self.fc1(self.pool(x)))
            return x * nn.functional.hardsigmoid(self.fc2(s))

    def block(ci: int, co: int, stride: int, se: bool) -> Any:
        layers = [nn.Conv2d(ci, ci, 3, stride, 1, groups=ci, bias=False), nn.BatchNorm2d(ci),
                  nn.Hardswish()]
        if se:
            layers.append(SE(ci))
        layers += [nn.Conv2d(ci, co, 1, bias=False), nn.BatchNorm2d(co), nn.Hardswish()]
        return nn.Sequential(*layers)

    class Det(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1, bias=False),
                                      nn.BatchNorm2d(16), nn.Hardswish())
            self.s1 = nn.Sequential(block(16, 32, 1, True), block(32, 64, 2, True))  # /4
            self.s2 = nn.Sequential(block(64, 64, 1, True), block(64, 128, 2, True))  # /8
            self.s3 = nn.Sequential(block(128, 128, 1, True), block(128, 256, 2, True))  # /16
            self.s4 = nn.Sequential(block(256, 256, 1, True), block(256, 512, 2, True))  # /32
            self.lat = nn.ModuleList(nn.Conv2d(c, 96, 1) for c in (64, 128, 256, 512))
            self.out = nn.ModuleList(nn.Conv2d(96, 24, 3, 1, 1) for _ in range(4))
            self.head = nn.Sequential(
                nn.Conv2d(96, 24, 3, 1, 1, bias=False), nn.BatchNorm2d(24), nn.ReLU(),
                nn.ConvTranspose2d(24, 24, 2, 2), nn.BatchNorm2d(24), nn.ReLU(),
                nn.ConvTranspose2d(24, 1, 2, 2), nn.Sigmoid())

        def forward(self, x: Any) -> Any:
            up = nn.functional.interpolate
            c2 = self.s1(self.stem(x))
            c3 = self.s2(c2)
            c4 = self.s3(c3)
            c5 = self.s4(c4)
            p5 = self.lat[3](c5)
            p4 = self.lat[2](c4) + up(p5, scale_factor=2.0, mode="nearest")
            p3 = self.lat[1](c3) + up(p4, scale_factor=2.0, mode="nearest")
            p2 = self.lat[0](c2) + up(p3, scale_factor=2.0, mode="nearest")
            outs = [self.out[0](p2)] + [
                up(self.out[i](p), scale_factor=float(2 ** i), mode="nearest")
                for i, p in ((1, p3), (2, p4), (3, p5))]
            return self.head(torch.cat(outs, dim=1))

    return Det()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=50)
    parser.add_argument("--size", type=int, default=640)
    parser.add_argument("--out", default=str(RESULTS))
    args = parser.parse_args(argv)

    import torch

    from benchmarks.gpu_suite import calibrate_batchnorm

    results: dict[str, Any] = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__,
                               "python": platform.python_version(), "reps": args.reps,
                               "candidates": [], "detector": {}}
    for shape in SHAPES:
        row = candidate_times(shape, args.reps)
        print(row, flush=True)
        results["candidates"].append(row)

    model = detector(torch)
    calibrate_batchnorm(torch, model)
    path = os.path.join(tempfile.mkdtemp(), "det.onnx")
    x = torch.randn(1, 3, args.size, args.size)
    torch.onnx.export(model, (x,), path, dynamo=False, opset_version=17,
                      input_names=["x"], output_names=["prob"])
    onnx.checker.check_model(path)
    x = x.cuda()
    with torch.inference_mode():
        ref = model.cuda().eval()(x).float().cpu().numpy()
    row = {"model": "dbnet_lcnet_se", "size": args.size, "batch": 1}
    row.update(bench_torch(torch, model.cpu(), x, args.reps))
    row.update(bench_pydla(torch, path, 1, x, args.reps, input_name="x",
                           out_shape=(1, 1, args.size, args.size)))
    for engine in ("pydla", "torch_fp16"):
        logits = row.pop(f"_{engine}_logits", None)
        if logits is not None:
            row[f"{engine}_cosine_vs_torch_fp32"] = cosine(logits, ref)
            row[f"{engine}_relerr_vs_torch_fp32"] = relative_error(logits, ref)
    row["speedup_vs_torch_graph"] = row["torch_graph_fp16_ms"] / row["pydla_graph_fp16_ms"]
    row["pool_tactics"] = {k: v for k, v in row.pop("pydla_tactics").items()
                           if "pool" in k.lower() or "reduce" in k.lower()}
    print({k: v for k, v in row.items() if not k.startswith("pydla_notes")}, flush=True)
    results["detector"] = row
    Path(args.out).write_text(json.dumps(results, indent=1, default=float) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
