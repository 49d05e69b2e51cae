"""int8 kernels (pydla.backends.cpu.kernels.int8) against pydla's fp32 fast kernels and
onnxruntime's int8, layer by layer.

For each shape — ResNet-like 1×1 and 3×3 convolutions, a depthwise one, BERT-like GEMMs —
the engines are:

- ``int8_vnni`` / ``int8_avx2``: qconv2d / qgemm on each ISA path (AVX2 forced through
  PYDLA_CPU_ISA while packing and binding), uint8 activations with a zero point, per-channel
  int8 weights, uint8 output with the ReLU folded into the clamp, bound once to its buffers;
- ``fp32``: the fastest of pydla's fp32 tactics for the same layer (Conv + bias + ReLU, or
  MatMul), prebound as the executor does;
- ``ort_int8``: onnxruntime running a one-node QLinearConv / QLinearMatMul model of the same
  shape (uint8 × int8 → uint8; per-channel weight scales for the conv) through an IO binding,
  with as many intra-op threads as pydla uses (--threads, default the cores).

The machine is shared: engines alternate in rounds (benchmarks.timing.alternate) so that
other tenants' load falls on all of them alike, and each figure is the better median of two
passes; ratios within one shape are what to read, not absolute times. The int8 outputs are
also compared with onnxruntime's (``max_diff_vs_ort``, in output steps: the two round the
same float32 products, so 0 is expected for uint8 activations). Results go to
benchmarks/results/int8_kernels.json.

    python -m benchmarks.int8_kernels [--quick] [--seconds S] [--threads N] [--out PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from benchmarks.conv_layers import Layer, pydla_runner, tactics_for
from benchmarks.timing import alternate
from pydla.backends.base import LayerSpec, TensorSpec
from pydla.backends.cpu import threads
from pydla.backends.cpu.backend import bind_layer
from pydla.backends.cpu.kernels import int8 as q8
from pydla.backends.cpu.kernels.int8 import features
from pydla.backends.cpu.registry import candidate_tactics
from pydla.backends.cpu.steps import prebind
from pydla.dtypes import DType

RESULTS = Path(__file__).parent / "results" / "int8_kernels.json"
X_SCALE, X_ZP, Y_SCALE, Y_ZP = 0.02, 128, 0.05, 0


@dataclass(frozen=True)
class Gemm:
    name: str
    m: int
    k: int
    n: int


CONVS = [
    Layer("r50 1x1 64->256 @56", (1, 64, 56, 56), (256, 64, 1, 1)),
    Layer("r50 1x1 256->64 @56", (1, 256, 56, 56), (64, 256, 1, 1)),
    Layer("r50 1x1 1024->256 @14", (1, 1024, 14, 14), (256, 1024, 1, 1)),
    Layer("r50 3x3 64 @56", (1, 64, 56, 56), (64, 64, 3, 3), 1, 1),
    Layer("r50 3x3 128 @28", (1, 128, 28, 28), (128, 128, 3, 3), 1, 1),
    Layer("r50 3x3/2 128 @56", (1, 128, 56, 56), (128, 128, 3, 3), 2, 1),
    Layer("mnv2 dw3x3 144 @56", (1, 144, 56, 56), (144, 1, 3, 3), 1, 1, 144),
]
GEMMS = [
    Gemm("bert qkv 128x768x768", 128, 768, 768),
    Gemm("bert ffn 128x768x3072", 128, 768, 3072),
]
QUICK = [CONVS[0], CONVS[3], CONVS[6], GEMMS[0]]


@contextmanager
def isa_forced(path: str) -> Iterator[None]:
    before = os.environ.get("PYDLA_CPU_ISA")
    os.environ["PYDLA_CPU_ISA"] = path
    try:
        yield
    finally:
        if before is None:
            del os.environ["PYDLA_CPU_ISA"]
        else:
            os.environ["PYDLA_CPU_ISA"] = before


def int8_paths() -> list[str]:
    return [p for p in ("avx512_vnni", "avx2") if features.supported(p)]


def quant_params(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-output-channel symmetric int8 weights and their scales."""
    flat = w.reshape(w.shape[0], -1)
    scale = (np.abs(flat).max(axis=1) / 127).astype(np.float32)
    wq = np.clip(np.rint(flat / scale[:, None]), -127, 127).astype(np.int8)
    return wq.reshape(w.shape), scale


def requant(w_scale: np.ndarray, bias_q: np.ndarray) -> q8.Requant:
    """onnxruntime's: scale = float32(x_scale · w_scale) / y_scale; ReLU as the clamp."""
    scale = (np.float32(X_SCALE) * w_scale / np.float32(Y_SCALE)).astype(np.float32)
    return q8.Requant(X_ZP, bias_q, scale, Y_ZP, Y_ZP, 255, np.dtype(np.uint8))


def qlinear_model(op: str, x_shape: tuple[int, ...], y_shape: tuple[int, ...], wq: np.ndarray,
                  w_scale: np.ndarray, bias_q: np.ndarray | None, attrs: dict[str, Any]
                  ) -> onnx.ModelProto:
    inits = [numpy_helper.from_array(np.array(X_SCALE, np.float32), "xs"),
             numpy_helper.from_array(np.array(X_ZP, np.uint8), "xz"),
             numpy_helper.from_array(wq, "w"),
             numpy_helper.from_array(w_scale, "ws"),
             numpy_helper.from_array(np.zeros(w_scale.shape, np.int8), "wz"),
             numpy_helper.from_array(np.array(Y_SCALE, np.float32), "ys"),
             numpy_helper.from_array(np.array(Y_ZP, np.uint8), "yz")]
    inputs = ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"]
    if bias_q is not None:
        inits.append(numpy_helper.from_array(bias_q, "b"))
        inputs.append("b")
    node = helper.make_node(op, inputs, ["y"], **attrs)
    graph = helper.make_graph(
        [node], "q", [helper.make_tensor_value_info("x", onnx.TensorProto.UINT8, x_shape)],
        [helper.make_tensor_value_info("y", onnx.TensorProto.UINT8, y_shape)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    model.ir_version = 9
    return model


def ort_runner(model: onnx.ModelProto, x: np.ndarray,
               y_shape: tuple[int, ...]) -> tuple[Callable[[], None], np.ndarray]:
    import onnxruntime as ort  # noqa: PLC0415

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads.num_threads()  # as many as pydla's engines use
    opts.inter_op_num_threads = 1
    opts.log_severity_level = 3
    sess = ort.InferenceSession(model.SerializeToString(), opts,
                                providers=["CPUExecutionProvider"])
    out = np.empty(y_shape, np.uint8)
    binding = sess.io_binding()
    binding.bind_cpu_input("x", x)
    binding.bind_output("y", "cpu", 0, np.uint8, out.shape, out.ctypes.data)
    options = ort.RunOptions()
    return lambda: sess.run_with_iobinding(binding, options), out


def fastest(runs: dict[str, Callable[[], object]], seconds: float) -> str:
    """The quickest of several tactics of one engine, by a short alternating run."""
    if len(runs) == 1:
        return next(iter(runs))
    times = alternate(runs, min_runs=5, min_seconds=seconds)
    return min(times, key=times.__getitem__)


def conv_engines(layer: Layer, seconds: float) -> tuple[dict[str, Any], dict[str, Any]]:
    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, layer.x).astype(np.uint8)
    fan_in = layer.w[1] * layer.w[2] * layer.w[3]
    w = (rng.standard_normal(layer.w) / np.sqrt(fan_in)).astype(np.float32)
    wq, w_scale = quant_params(w)
    bias_q = rng.integers(-2000, 2000, layer.w[0]).astype(np.int32)
    rq = requant(w_scale, bias_q)
    geo = ((layer.stride,) * 2, (layer.pad,) * 4, (1, 1))
    runs: dict[str, Any] = {}
    outs: dict[str, np.ndarray] = {}
    for path in int8_paths():
        with isa_forced(path):
            packed = q8.pack_weights(wq, layer.group)
            out = np.empty(layer.out, np.uint8)
            runs[f"int8_{path}"] = q8.bind_qconv2d(x, packed, rq, *geo, out)
            outs[f"int8_{path}"] = out
    xf = ((x.astype(np.float32) - X_ZP) * X_SCALE).astype(np.float32)
    bf = (bias_q * X_SCALE * w_scale).astype(np.float32)
    wr = w.copy()
    wr.flags.writeable = False
    fp32 = {t: pydla_runner(layer, xf, wr, bf, t)[0] for t in tactics_for(layer)}
    best = fastest(fp32, seconds / 4)
    runs["fp32"] = fp32[best]
    attrs = {"strides": [layer.stride] * 2, "pads": [layer.pad] * 4, "group": layer.group}
    model = qlinear_model("QLinearConv", layer.x, layer.out, wq, w_scale, bias_q, attrs)
    runs["ort_int8"], outs["ort_int8"] = ort_runner(model, x, layer.out)
    return runs, {"outs": outs, "fp32_tactic": best}


def gemm_engines(g: Gemm, seconds: float) -> tuple[dict[str, Any], dict[str, Any]]:
    rng = np.random.default_rng(1)
    a = rng.integers(0, 256, (g.m, g.k)).astype(np.uint8)
    w = (rng.standard_normal((g.n, g.k)) / np.sqrt(g.k)).astype(np.float32)
    # QLinearMatMul takes one weight scale (per-tensor): the same for every engine
    wq, w_scale = quant_params(w)
    w_scale = np.full(g.n, w_scale.max(), np.float32)
    wq = np.clip(np.rint(w / w_scale[:, None]), -127, 127).astype(np.int8)
    rq = requant(w_scale, np.zeros(g.n, np.int32))
    runs: dict[str, Any] = {}
    outs: dict[str, np.ndarray] = {}
    for path in int8_paths():
        with isa_forced(path):
            packed = q8.pack_weights(wq)
            out = np.empty((g.m, g.n), np.uint8)
            runs[f"int8_{path}"] = q8.bind_qgemm(a, packed, rq, out)
            outs[f"int8_{path}"] = out
    af = ((a.astype(np.float32) - X_ZP) * X_SCALE).astype(np.float32)
    b = np.ascontiguousarray(w.T)
    b.flags.writeable = False
    f32 = DType.FLOAT32
    spec = LayerSpec(g.name, "MatMul", {}, (TensorSpec((g.m, g.k), f32),
                                           TensorSpec((g.k, g.n), f32)),
                     (TensorSpec((g.m, g.n), f32),))
    fp32 = {}
    for t in candidate_tactics(spec):
        tspec = LayerSpec(spec.name, spec.op, spec.attrs, spec.inputs, spec.outputs, t.name)
        y = np.empty((g.m, g.n), np.float32)
        fp32[t.name] = prebind(bind_layer(tspec), [af, b], [y])
    best = fastest(fp32, seconds / 4)
    runs["fp32"] = fp32[best]
    model = qlinear_model("QLinearMatMul", (g.m, g.k), (g.m, g.n), np.ascontiguousarray(wq.T),
                          np.array(w_scale[0], np.float32), None, {})
    runs["ort_int8"], outs["ort_int8"] = ort_runner(model, a, (g.m, g.n))
    return runs, {"outs": outs, "fp32_tactic": best}


def measure(name: str, runs: dict[str, Any], extra: dict[str, Any],
            seconds: float) -> dict[str, Any]:
    first, second = (alternate(runs, min_seconds=seconds / 2) for _ in range(2))
    ms = {k: min(first[k], second[k]) for k in runs}
    outs = extra["outs"]
    diff = {k: int(np.abs(v.astype(np.int32) - outs["ort_int8"].astype(np.int32)).max())
            for k, v in outs.items() if k != "ort_int8"}
    ratios = {}
    for k in runs:
        if k.startswith("int8_"):
            ratios[f"fp32/{k}"] = ms["fp32"] / ms[k]
            ratios[f"ort_int8/{k}"] = ms["ort_int8"] / ms[k]
    row = {"layer": name, "ms": ms, "ratios": ratios, "fp32_tactic": extra["fp32_tactic"],
           "max_diff_vs_ort": diff}
    print(f"{name:26s} " + "  ".join(f"{k} {v:.3f}" for k, v in ms.items()) + "  | "
          + "  ".join(f"{k} {v:.2f}x" for k, v in ratios.items()), flush=True)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="four shapes only")
    parser.add_argument("--seconds", type=float, default=4.0,
                        help="timed seconds per engine and shape (two passes)")
    parser.add_argument("--threads", type=int, default=None,
                        help="threads of every engine (default: the cores); on a crowded "
                             "machine a 2-thread fork-join waits for its slower thread")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    threads.set_num_threads(args.threads)
    threads.configure()
    shapes: list[Layer | Gemm] = QUICK if args.quick else [*CONVS, *GEMMS]
    rows = []
    start = time.time()
    for shape in shapes:
        if isinstance(shape, Layer):
            runs, extra = conv_engines(shape, args.seconds)
        else:
            runs, extra = gemm_engines(shape, args.seconds)
        rows.append(measure(shape.name, runs, extra, args.seconds))
    geo = {}
    for key in rows[0]["ratios"]:
        vals = [r["ratios"][key] for r in rows if key in r["ratios"]]
        geo[key] = float(np.exp(np.mean(np.log(vals))))
    result = {"machine": {"cpu": platform.processor() or platform.machine(),
                          "threads": threads.num_threads(), "paths": int8_paths(),
                          "load_average": os.getloadavg()},
              "note": "shared machine: engines alternate in rounds; read ratios, not times",
              "seconds": args.seconds, "wall_s": time.time() - start, "layers": rows,
              "geomean_ratios": geo}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print("geomean", {k: round(v, 2) for k, v in geo.items()})


if __name__ == "__main__":
    main()
