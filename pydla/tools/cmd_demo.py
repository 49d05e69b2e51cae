"""``pydla demo``: the main job out of the box.

Builds the sample digit classifier shipped in the package into a loadable, then runs it the
way NVIDIA's cuDLA hybrid-mode sample does — device, module, descriptors, registered
buffers, one task on a stream — and reports its accuracy on held-out digits.
"""

from __future__ import annotations

import argparse
import time
from importlib import resources

import numpy as np


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("demo", help="build and run the sample digit classifier (cuDLA style)",
                       description=__doc__)
    p.add_argument("--saveEngine", help="also write the loadable to this file")
    p.set_defaults(func=run)


def _sample(name: str) -> bytes:
    return resources.files("pydla.samples").joinpath(name).read_bytes()


def run(args: argparse.Namespace) -> int:
    import io

    from pydla import cudla, driver, runtime
    from pydla.builder import BuildOptions, build

    with np.load(io.BytesIO(_sample("digits_test.npz")), allow_pickle=False) as z:
        images = z["images"].astype(np.float32) / 16.0
        labels = z["labels"].astype(np.int64)
    batch = len(labels)
    start = time.perf_counter()
    loadable = build(_sample("digits_mlp.onnx"),
                     BuildOptions(shapes={"image": (batch, 1, 8, 8)}))
    print(f"Built loadable from digits_mlp.onnx: {len(loadable):,} bytes in "
          f"{time.perf_counter() - start:.2f} s")
    if args.saveEngine:
        with open(args.saveEngine, "wb") as f:
            f.write(loadable)

    # The cuDLA hybrid-mode sequence (see docs/cudla.md: the nine steps).
    (err,) = driver.cuInit(0)
    (err,) = runtime.cudaSetDevice(0)
    dev = cudla.create_device(0, cudla.Mode.CUDA_DLA)
    print(f"Device created successfully (handle {dev:#x})")
    module = cudla.module_load_from_memory(dev, loadable, len(loadable), 0)
    print("Loaded module successfully")
    n_in = cudla.module_get_attributes(module, cudla.ModuleAttributeType.NUM_INPUT_TENSORS)
    n_out = cudla.module_get_attributes(module, cudla.ModuleAttributeType.NUM_OUTPUT_TENSORS)
    print(f"numInputTensors = {n_in}")
    print(f"numOutputTensors = {n_out}")
    in_desc = cudla.module_get_attributes(module,
                                          cudla.ModuleAttributeType.INPUT_TENSOR_DESCRIPTORS)
    out_desc = cudla.module_get_attributes(module,
                                           cudla.ModuleAttributeType.OUTPUT_TENSOR_DESCRIPTORS)
    for kind, descs in (("Input", in_desc), ("Output", out_desc)):
        for i, d in enumerate(descs):
            print(f"{kind} {i}: size={d.size_}, shape=({d.n},{d.c},{d.h},{d.w}), name={d.name}")

    err, stream = driver.cuStreamCreate(0)
    err, in_dev = runtime.cudaMalloc(in_desc[0].size_)
    err, out_dev = runtime.cudaMalloc(out_desc[0].size_)
    in_reg = cudla.mem_register(dev, int(in_dev), in_desc[0].size_, 0)
    out_reg = cudla.mem_register(dev, int(out_dev), out_desc[0].size_, 0)
    host_in = np.ascontiguousarray(images, dtype=np.float32)
    (err,) = runtime.cudaMemcpyAsync(in_dev, host_in, in_desc[0].size_,
                                     runtime.cudaMemcpyKind.cudaMemcpyHostToDevice, stream)
    (err,) = runtime.cudaMemsetAsync(out_dev, 0, out_desc[0].size_, stream)

    task = cudla.Task()
    task.module_handle = module
    task.input_tensor = [in_reg]
    task.output_tensor = [out_reg]
    task.wait_events = 0
    task.signal_events = 0
    cudla.submit_task(dev, int(task), 1, int(stream), 0)
    print("Task submitted successfully")
    (err,) = runtime.cudaStreamSynchronize(stream)
    host_out = np.zeros(out_desc[0].size_, dtype=np.uint8)
    (err,) = runtime.cudaMemcpyAsync(host_out, out_dev, out_desc[0].size_,
                                     runtime.cudaMemcpyKind.cudaMemcpyDeviceToHost, stream)
    (err,) = runtime.cudaStreamSynchronize(stream)
    print("Output written to host")

    cudla.mem_unregister(dev, in_reg)
    cudla.mem_unregister(dev, out_reg)
    cudla.module_unload(module, 0)
    cudla.destroy_device(dev)
    runtime.cudaFree(in_dev)
    runtime.cudaFree(out_dev)
    driver.cuStreamDestroy(stream)

    probs = host_out.view(np.float32).reshape(batch, 10)
    predicted = probs.argmax(axis=1)
    accuracy = float(np.mean(predicted == labels))
    print(f"Classified {batch} held-out digits: accuracy {accuracy:.4f} "
          f"({int(np.sum(predicted == labels))}/{batch})")
    print("First 10: predicted " + " ".join(map(str, predicted[:10])) + " | true "
          + " ".join(map(str, labels[:10])))
    return 0 if accuracy > 0.9 else 1
