"""The nine steps of a cuDLA hybrid-mode program, run on pydla's CPU device.

``run_nine_steps`` is written against ``cuda.bindings``' API exactly as a Jetson program
would be; only the import line ties it to pydla. To run it on a Jetson, replace

    from pydla import cudla, driver, runtime

with

    from cuda.bindings import cudla, driver, runtime

and load a loadable built by trtexec (``--useDLACore=0 --buildDLAStandalone``) instead.

This script builds a small float32 conv net with default (linear NCHW) I/O, runs it through
the nine steps and prints its outputs. ``python examples/nine_steps.py``
"""

from __future__ import annotations

import numpy as np

from pydla import cudla, driver, runtime


def check(result: tuple) -> object:
    """cuda-bindings calls return (status, value…): fail loudly, return the value(s)."""
    err, *values = result
    if err != 0:
        raise RuntimeError(f"CUDA call failed: {err!r}")
    return values[0] if len(values) == 1 else values or None


def run_nine_steps(loadable: bytes, host_inputs: list[np.ndarray]) -> list[np.ndarray]:
    """Run one inference. ``host_inputs`` are the inputs already laid out as the module's
    input descriptors say (uint8 buffers of ``size_`` bytes); returns the outputs likewise."""
    # 1. Initialize CUDA and create the DLA device handle.
    check(driver.cuInit(0))
    check(runtime.cudaSetDevice(0))
    dev = cudla.create_device(0, cudla.Mode.CUDA_DLA)

    # 2. Load the loadable from memory.
    module = cudla.module_load_from_memory(dev, loadable, len(loadable), 0)

    # 3. Ask the module for its tensors.
    kinds = cudla.ModuleAttributeType
    num_in = cudla.module_get_attributes(module, kinds.NUM_INPUT_TENSORS)
    num_out = cudla.module_get_attributes(module, kinds.NUM_OUTPUT_TENSORS)
    in_descs = cudla.module_get_attributes(module, kinds.INPUT_TENSOR_DESCRIPTORS)
    out_descs = cudla.module_get_attributes(module, kinds.OUTPUT_TENSOR_DESCRIPTORS)
    assert len(in_descs) == num_in == len(host_inputs) and len(out_descs) == num_out

    # 4. Allocate device memory for every tensor.
    in_bufs = [check(runtime.cudaMalloc(d.size_)) for d in in_descs]
    out_bufs = [check(runtime.cudaMalloc(d.size_)) for d in out_descs]

    # 5. Register the buffers with the DLA.
    in_regs = [cudla.mem_register(dev, int(p), d.size_, 0) for p, d in zip(in_bufs, in_descs)]
    out_regs = [cudla.mem_register(dev, int(p), d.size_, 0) for p, d in zip(out_bufs, out_descs)]

    # 6. Create a stream, copy the inputs in, clear the outputs.
    stream = check(driver.cuStreamCreate(0))
    kind = runtime.cudaMemcpyKind
    for buf, host, d in zip(in_bufs, host_inputs, in_descs):
        check(runtime.cudaMemcpyAsync(buf, host, d.size_, kind.cudaMemcpyHostToDevice, stream))
    for buf, d in zip(out_bufs, out_descs):
        check(runtime.cudaMemsetAsync(buf, 0, d.size_, stream))

    # 7. Describe the task and submit it on the stream.
    task = cudla.Task()
    task.module_handle = module
    task.input_tensor = in_regs
    task.output_tensor = out_regs
    task.wait_events = 0
    task.signal_events = 0
    cudla.submit_task(dev, int(task), 1, int(stream), 0)

    # 8. Wait, copy the outputs back, wait again.
    check(runtime.cudaStreamSynchronize(stream))
    host_outputs = [np.zeros(d.size_, dtype=np.uint8) for d in out_descs]
    for host, buf, d in zip(host_outputs, out_bufs, out_descs):
        check(runtime.cudaMemcpyAsync(host, buf, d.size_, kind.cudaMemcpyDeviceToHost, stream))
    check(runtime.cudaStreamSynchronize(stream))

    # 9. Release everything.
    for reg in in_regs + out_regs:
        cudla.mem_unregister(dev, reg)
    cudla.module_unload(module, 0)
    cudla.destroy_device(dev)
    for buf in in_bufs + out_bufs:
        check(runtime.cudaFree(buf))
    check(driver.cuStreamDestroy(stream))
    return host_outputs


# -- the model (build time: needs onnx; the nine steps above do not) ---------------------
def conv_net(dtype: type = np.float32, seed: int = 0):  # an onnx.ModelProto
    """x[1,3,16,16] → Conv 3×3 (8) → Relu → ``features``; → Conv 1×1 (4) + x-projection
    → ``logits``. Two outputs, so the task has lists of tensors."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    inits = {"w1": rng.standard_normal((8, 3, 3, 3)) * 0.3, "b1": rng.standard_normal(8) * 0.1,
             "w2": rng.standard_normal((4, 8, 1, 1)) * 0.3, "b2": rng.standard_normal(4) * 0.1,
             "wx": rng.standard_normal((4, 3, 1, 1)) * 0.3}
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["features"]),
             helper.make_node("Conv", ["features", "w2", "b2"], ["c2"]),
             helper.make_node("Conv", ["x", "wx"], ["cx"]),
             helper.make_node("Add", ["c2", "cx"], ["logits"])]
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    graph = helper.make_graph(
        nodes, "conv_net", [helper.make_tensor_value_info("x", elem, [1, 3, 16, 16])],
        [helper.make_tensor_value_info("features", elem, [1, 8, 16, 16]),
         helper.make_tensor_value_info("logits", elem, [1, 4, 16, 16])],
        [numpy_helper.from_array(v.astype(dtype), k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    assert elem in (TensorProto.FLOAT, TensorProto.FLOAT16)
    return model


def main() -> None:
    from pydla.builder import build

    model = conv_net(np.float32)
    loadable = build(model)
    x = np.random.default_rng(1).standard_normal((1, 3, 16, 16)).astype(np.float32)
    # Linear float32 I/O: the prepared input is the array's own bytes.
    outputs = run_nine_steps(loadable, [x.view(np.uint8).reshape(-1)])
    for name, buf, shape in zip(("features", "logits"), outputs, ((1, 8, 16, 16), (1, 4, 16, 16))):
        y = buf.view(np.float32).reshape(shape)
        print(f"{name}: shape {y.shape}, mean {y.mean():+.4f}, max {y.max():+.4f}")


if __name__ == "__main__":
    main()
