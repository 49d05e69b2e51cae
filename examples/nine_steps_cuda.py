"""The nine steps of a cuDLA hybrid-mode program on an NVIDIA GPU: pydla's CUDA backend.

The same program as ``nine_steps.py``, but CUDA is NVIDIA's own (``cuda.bindings``): real
device memory, a real stream; pydla's module joins that stream. The only pydla-specific
line is ``cudla.use_backend("cuda")``. Needs ``pip install pydla[cuda]`` and a GPU.

``python examples/nine_steps_cuda.py``
"""

from __future__ import annotations

import numpy as np
from cuda.bindings import driver, runtime

from pydla import cudla


def check(result: tuple) -> object:
    """cuda-bindings calls return (status, value…): fail loudly, return the value(s)."""
    err, *values = result
    if err != 0:
        raise RuntimeError(f"CUDA call failed: {err!r}")
    return values[0] if len(values) == 1 else values or None


def run_nine_steps(loadable: bytes, host_inputs: list[np.ndarray]) -> list[np.ndarray]:
    """Run one inference; ``host_inputs`` are uint8 buffers laid out as the input
    descriptors say; returns the outputs likewise."""
    cudla.use_backend("cuda")
    # 1. Initialize CUDA and create the DLA device handle.
    check(driver.cuInit(0))
    check(runtime.cudaSetDevice(0))
    dev = cudla.create_device(0, cudla.Mode.CUDA_DLA)

    # 2. Load the loadable from memory.
    module = cudla.module_load_from_memory(dev, loadable, len(loadable), 0)

    # 3. Ask the module for its tensors.
    kinds = cudla.ModuleAttributeType
    in_descs = cudla.module_get_attributes(module, kinds.INPUT_TENSOR_DESCRIPTORS)
    out_descs = cudla.module_get_attributes(module, kinds.OUTPUT_TENSOR_DESCRIPTORS)
    assert cudla.module_get_attributes(module, kinds.NUM_INPUT_TENSORS) == len(host_inputs)

    # 4. Allocate device memory for every tensor.
    in_bufs = [check(runtime.cudaMalloc(d.size_)) for d in in_descs]
    out_bufs = [check(runtime.cudaMalloc(d.size_)) for d in out_descs]

    # 5. Register the buffers with the DLA.
    in_regs = [cudla.mem_register(dev, int(p), d.size_, 0) for p, d in zip(in_bufs, in_descs)]
    out_regs = [cudla.mem_register(dev, int(p), d.size_, 0) for p, d in zip(out_bufs, out_descs)]

    # 6. Create a stream, copy the inputs in, clear the outputs.
    stream = check(runtime.cudaStreamCreate())
    kind = runtime.cudaMemcpyKind
    for buf, host, d in zip(in_bufs, host_inputs, in_descs):
        check(runtime.cudaMemcpyAsync(buf, host.ctypes.data, d.size_,
                                      kind.cudaMemcpyHostToDevice, stream))
    for buf, d in zip(out_bufs, out_descs):
        check(runtime.cudaMemsetAsync(buf, 0, d.size_, stream))

    # 7. Describe the task and submit it on the stream (it returns at once).
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
        check(runtime.cudaMemcpyAsync(host.ctypes.data, buf, d.size_,
                                      kind.cudaMemcpyDeviceToHost, stream))
    check(runtime.cudaStreamSynchronize(stream))

    # 9. Release everything.
    for reg in in_regs + out_regs:
        cudla.mem_unregister(dev, reg)
    cudla.module_unload(module, 0)
    cudla.destroy_device(dev)
    for buf in in_bufs + out_bufs:
        check(runtime.cudaFree(buf))
    check(runtime.cudaStreamDestroy(stream))
    return host_outputs


if __name__ == "__main__":
    from nine_steps import conv_net

    from pydla.builder import BuildOptions, build

    model = conv_net(np.float32)
    x = np.random.default_rng(0).standard_normal((1, 3, 16, 16)).astype(np.float32)
    outs = run_nine_steps(build(model, BuildOptions(target="cuda")), [x.view(np.uint8)])
    for name, buf in zip(("features", "logits"), outs):
        print(name, buf.view(np.float32)[:6])
