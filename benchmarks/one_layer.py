"""The fixed cost of one task: a one-layer model (1×1 conv on 1×16×1×64) through
``cudla.submit_task``, through the Pythonic API and through the session, against
onnxruntime's ``session.run`` on the same model — alternating in rounds in one process.

    python -m benchmarks.one_layer [--seconds 2]   # writes results/one_layer.json

The cudla path is a Jetson program's loop: inputs copied into registered memory, the task
submitted on a stream, the stream synchronized, outputs copied back (on pydla's CPU device
device memory is host memory, so the copies are array copies).
"""

from __future__ import annotations

import argparse
import datetime
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from benchmarks.timing import alternate, others_load
from pydla import api, cudla, driver, runtime
from pydla.builder import BuildOptions, build
from pydla.session import InferenceSession

RESULTS = Path(__file__).with_name("results") / "one_layer.json"


def one_conv() -> bytes:
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((16, 16, 1, 1)).astype(np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["y"])], "one",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 1, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 1, 64])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


def _ok(result: tuple) -> Any:  # noqa: ANN401
    err, *values = result
    if int(err) != 0:
        raise RuntimeError(f"CUDA call failed: {err!r}")
    return values[0] if len(values) == 1 else None


def cudla_loop(loadable: bytes, x: np.ndarray) -> tuple[Callable[[], None], Callable[[], None],
                                                         np.ndarray]:
    """(one task, tear-down, the output buffer) through pydla.cudla's nine steps."""
    _ok(driver.cuInit(0))
    dev = cudla.create_device(0, cudla.Mode.CUDA_DLA)
    module = cudla.module_load_from_memory(dev, loadable, len(loadable), 0)
    kinds = cudla.ModuleAttributeType
    [din] = cudla.module_get_attributes(module, kinds.INPUT_TENSOR_DESCRIPTORS)
    [dout] = cudla.module_get_attributes(module, kinds.OUTPUT_TENSOR_DESCRIPTORS)
    bin_, bout = _ok(runtime.cudaMalloc(din.size_)), _ok(runtime.cudaMalloc(dout.size_))
    rin = cudla.mem_register(dev, int(bin_), din.size_, 0)
    rout = cudla.mem_register(dev, int(bout), dout.size_, 0)
    stream = _ok(driver.cuStreamCreate(0))
    task = cudla.Task()
    task.module_handle = module
    task.input_tensor = [rin]
    task.output_tensor = [rout]
    task.wait_events = 0
    task.signal_events = 0
    host_in = api.pack_tensor(x, din)
    host_out = np.zeros(dout.size_, np.uint8)
    h2d, d2h = runtime.cudaMemcpyKind.cudaMemcpyHostToDevice, \
        runtime.cudaMemcpyKind.cudaMemcpyDeviceToHost
    address = int(task)  # the record stays alive with ``keep`` below

    def run() -> None:
        runtime.cudaMemcpyAsync(bin_, host_in, din.size_, h2d, stream)
        cudla.submit_task(dev, address, 1, int(stream), 0)
        runtime.cudaMemcpyAsync(host_out, bout, dout.size_, d2h, stream)
        runtime.cudaStreamSynchronize(stream)

    def close() -> None:
        cudla.mem_unregister(dev, rin)
        cudla.mem_unregister(dev, rout)
        cudla.module_unload(module, 0)
        cudla.destroy_device(dev)
        _ok(runtime.cudaFree(bin_))
        _ok(runtime.cudaFree(bout))
        _ok(driver.cuStreamDestroy(stream))

    run.keep = task  # type: ignore[attr-defined]
    return run, close, host_out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seconds", type=float, default=2.0)
    p.add_argument("--out", type=Path, default=RESULTS)
    args = p.parse_args()
    onnx_bytes = one_conv()
    loadable = build(onnx_bytes, BuildOptions(autotune=True))
    x = np.random.default_rng(1).standard_normal((1, 16, 1, 64)).astype(np.float32)
    sess = ort.InferenceSession(onnx_bytes, providers=["CPUExecutionProvider"])
    want = sess.run(None, {"x": x})[0]
    run_task, close, host_out = cudla_loop(loadable, x)
    dev = api.Device()
    module = dev.load(loadable)
    ours = InferenceSession(onnx_bytes)
    feeds = {"x": x}
    run_task()
    got = [host_out.view(np.float32)[:want.size].reshape(want.shape), module.run(feeds)[0],
           ours.run(None, feeds)[0]]
    err = max(float(np.abs(g - want).max()) for g in got)
    times, load = others_load(lambda: alternate(
        {"cudla.submit_task": run_task, "api Module.run": lambda: module.run(feeds),
         "pydla InferenceSession.run": lambda: ours.run(None, feeds),
         "onnxruntime session.run": lambda: sess.run(None, feeds)},
        min_runs=200, min_seconds=args.seconds))
    close()
    module.close()
    dev.close()
    rival = times["onnxruntime session.run"]
    rows = {k: {"us": round(v * 1e3, 2), "ratio": round(v / rival, 3)} for k, v in times.items()}
    for k, r in rows.items():
        print(f"{k:28s} {r['us']:9.2f} µs   × onnxruntime {r['ratio']:.2f}")
    print(f"outputs agree to {err:.1e}; other processes' load {load}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "model": "Conv 1x1, x 1x16x1x64, w 16x16x1x1", "others_load": load,
        "max_abs_diff": err, "results": rows}, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
