"""Per-layer executor overhead: a chain of tiny Relus (unfused), pydla vs onnxruntime.

``python -m benchmarks.overhead --layers 200`` prints the time per run and per layer of
both engines, measured alternately in one process (median of many runs).
"""

from __future__ import annotations

import argparse

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

from benchmarks.timing import alternate
from pydla.builder import BuildOptions, build
from pydla.engine import LoadedModule


def relu_chain(layers: int, width: int) -> onnx.ModelProto:
    nodes = [helper.make_node("Relu", [f"t{i}"], [f"t{i + 1}"]) for i in range(layers)]
    graph = helper.make_graph(
        nodes, "chain", [helper.make_tensor_value_info("t0", TensorProto.FLOAT, [1, width])],
        [helper.make_tensor_value_info(f"t{layers}", TensorProto.FLOAT, [1, width])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--layers", type=int, default=200)
    p.add_argument("--width", type=int, default=8)
    p.add_argument("--seconds", type=float, default=2.0)
    args = p.parse_args()
    model = relu_chain(args.layers, args.width)
    # Unfused, so that every Relu is a layer of its own (the point of the measurement).
    module = LoadedModule(build(model, BuildOptions(disabled_passes=("fuse_pointwise",),
                                                    autotune=False)))
    assert len(module.program.layers) == args.layers
    x = np.random.default_rng(0).standard_normal((1, args.width)).astype(np.float32)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), opts,
                                providers=["CPUExecutionProvider"])
    bound = module.bound
    ins, outs = [x], [np.empty_like(x)]
    times = alternate({
        "pydla run()": lambda: module.run([x]),
        "pydla execute()": lambda: bound.execute(ins, outs),
        "onnxruntime": lambda: sess.run(None, {"t0": x}),
    }, min_runs=200, min_seconds=args.seconds)
    for name, ms in times.items():
        print(f"{name:16s} {ms * 1e3:8.1f} µs per run, {ms * 1e3 / args.layers:6.3f} µs per layer")


if __name__ == "__main__":
    main()
