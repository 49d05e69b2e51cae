"""The cuDLA facade on the GPU: the nine steps, stream ordering with the caller's own
kernels (no host synchronization), device-pointer registration, architecture checks."""

from __future__ import annotations

import importlib
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from tests.gpu.gpu import relative_error, require_gpu

cp = require_gpu()

from pydla import cudla  # noqa: E402
from pydla.builder import BuildOptions, build  # noqa: E402
from pydla.engine.module import LoadedModule  # noqa: E402
from tests.oracle import run_ort  # noqa: E402

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture
def cuda_device():
    cudla.use_backend("cuda")
    dev = cudla.create_device(0, cudla.Mode.CUDA_DLA)
    yield dev
    cudla.destroy_device(dev)
    cudla.use_backend("cpu")


@pytest.fixture(scope="module")
def nine():
    sys.path.insert(0, str(EXAMPLES))
    try:
        yield importlib.import_module("nine_steps"), importlib.import_module("nine_steps_cuda")
    finally:
        sys.path.remove(str(EXAMPLES))
        cudla.use_backend("cpu")


def test_nine_steps_with_cuda_bindings(nine):
    cpu_example, gpu_example = nine
    model = cpu_example.conv_net(np.float32)
    x = np.random.default_rng(5).standard_normal((1, 3, 16, 16)).astype(np.float32)
    outputs = gpu_example.run_nine_steps(build(model, BuildOptions(target="cuda")),
                                         [x.reshape(-1).view(np.uint8)])
    for buf, want in zip(outputs, run_ort(model, {"x": x})):
        got = buf.view(np.float32).reshape(want.shape)
        assert relative_error(got, want) < 1e-2


_SPIN = r"""
extern "C" __global__ void spin_then_scale(const float* raw, float* dst, int n,
                                           long long cycles) {
  long long start = clock64();
  while (clock64() - start < cycles) { }
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) dst[i] = raw[i] * 4.f - 2.f;
}
"""


def test_stream_ordering_pre_task_post(nine, cuda_device):
    """A slow preprocessing kernel, the pydla task and a postprocessing kernel on one
    stream, no host synchronization between them: the task must wait for the kernel before
    it and finish before the one after, and submit_task must not block the host."""
    cpu_example, _ = nine
    model = cpu_example.conv_net(np.float32)
    data = build(model, BuildOptions(target="cuda"))
    module = cudla.module_load_from_memory(cuda_device, data, len(data), 0)
    kinds = cudla.ModuleAttributeType
    in_d = cudla.module_get_attributes(module, kinds.INPUT_TENSOR_DESCRIPTORS)[0]
    out_ds = cudla.module_get_attributes(module, kinds.OUTPUT_TENSOR_DESCRIPTORS)
    raw = cp.asarray(np.random.default_rng(9).random((1, 3, 16, 16), dtype=np.float32))
    x = cp.zeros(in_d.size_ // 4, dtype=cp.float32)
    outs = [cp.full(d.size_ // 4, np.nan, dtype=cp.float32) for d in out_ds]
    post = cp.zeros_like(outs[1])
    task = cudla.Task()
    task.module_handle = module
    task.input_tensor = [cudla.mem_register(cuda_device, x.data.ptr, in_d.size_, 0)]
    task.output_tensor = [cudla.mem_register(cuda_device, o, d.size_, 0)  # CuPy arrays
                          for o, d in zip(outs, out_ds)]
    spin = cp.RawKernel(_SPIN, "spin_then_scale")
    stream = cp.cuda.Stream(non_blocking=True)
    scratch = cp.empty_like(x)
    spin((1,), (x.size,), (raw, scratch, np.int32(x.size), np.int64(0)), stream=stream)
    with stream:  # compile both kernels before the timed part
        cp.multiply(scratch, 3.0, out=scratch)
    stream.synchronize()
    cycles = np.int64(300_000_000)  # ≈ 0.15 s on the GPU
    t0 = time.perf_counter()
    spin((1,), (x.size,), (raw, x, np.int32(x.size), cycles), stream=stream)
    cudla.submit_task(cuda_device, int(task), 1, stream.ptr, 0)
    with stream:
        cp.multiply(outs[1], 3.0, out=post)
    host_seconds = time.perf_counter() - t0
    stream.synchronize()
    x_host = cp.asnumpy(raw) * 4 - 2
    want = LoadedModule(data).run([x_host])
    assert relative_error(cp.asnumpy(outs[0]).reshape(want[0].shape), want[0]) < 1e-2
    assert relative_error(cp.asnumpy(post).reshape(want[1].shape), 3 * want[1]) < 1e-2
    assert host_seconds < 0.1, f"the host waited {host_seconds:.3f} s"
    cudla.module_unload(module, 0)


def test_stream_object_with_cuda_stream_protocol(nine, cuda_device):
    from cuda.bindings import runtime

    cpu_example, _ = nine
    data = build(cpu_example.conv_net(np.float32), BuildOptions(target="cuda"))
    module = cudla.module_load_from_memory(cuda_device, data, len(data), 0)
    kinds = cudla.ModuleAttributeType
    in_d = cudla.module_get_attributes(module, kinds.INPUT_TENSOR_DESCRIPTORS)[0]
    out_ds = cudla.module_get_attributes(module, kinds.OUTPUT_TENSOR_DESCRIPTORS)
    x = cp.asarray(np.random.default_rng(2).standard_normal(in_d.size_ // 4, dtype=np.float32))
    outs = [cp.empty(d.size_ // 4, dtype=cp.float32) for d in out_ds]
    task = cudla.Task()
    task.module_handle = module
    task.input_tensor = [cudla.mem_register(cuda_device, x, in_d.size_, 0)]
    task.output_tensor = [cudla.mem_register(cuda_device, o, d.size_, 0)
                          for o, d in zip(outs, out_ds)]
    err, stream = runtime.cudaStreamCreate()
    cudla.submit_task(cuda_device, int(task), 1, stream, 0)  # __cuda_stream__ object
    runtime.cudaStreamSynchronize(stream)
    want = LoadedModule(data).run([cp.asnumpy(x).reshape(1, 3, 16, 16)])
    assert relative_error(cp.asnumpy(outs[1]).reshape(want[1].shape), want[1]) < 1e-2
    cudla.module_unload(module, 0)
    runtime.cudaStreamDestroy(stream)


def test_register_rejects_bad_device_memory(cuda_device):
    buf = cp.empty(1024, dtype=cp.uint8)
    host = np.empty(1024, dtype=np.uint8)
    with pytest.raises(cudla.CudlaError) as e:
        cudla.mem_register(cuda_device, host.ctypes.data, 1024, 0)
    assert e.value.status == cudla.Status.ErrorInvalidAddress
    with pytest.raises(cudla.CudlaError):
        cudla.mem_register(cuda_device, buf.data.ptr + 8, 64, 0)  # misaligned
    with pytest.raises(cudla.CudlaError):
        cudla.mem_register(cuda_device, buf.data.ptr, 1 << 30, 0)  # past the allocation
    ptr = cudla.mem_register(cuda_device, buf.data.ptr, 1024, 0)
    with pytest.raises(cudla.CudlaError) as e:
        cudla.mem_register(cuda_device, buf.data.ptr, 1024, 0)
    assert e.value.status == cudla.Status.ErrorMemoryRegistered
    cudla.mem_unregister(cuda_device, ptr)


def test_torch_tensor_registers(cuda_device):
    torch = pytest.importorskip("torch")
    t = torch.empty(4096, device="cuda")
    assert cudla.mem_register(cuda_device, t.data_ptr(), t.nbytes, 0) == t.data_ptr()


def test_other_architecture_is_refused(nine, cuda_device):
    cpu_example, _ = nine
    data = build(cpu_example.conv_net(np.float32), BuildOptions(target="cuda",
                                                               cuda_arch="sm_10"))
    with pytest.raises(cudla.CudlaError) as e:
        cudla.module_load_from_memory(cuda_device, data, len(data), 0)
    assert e.value.status == cudla.Status.ErrorIncompatibleDlaSWVersion
