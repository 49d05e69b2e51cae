"""The cuDLA device on the GPU: task statistics written by the GPU into a TASK_STATISTICS
buffer (per-layer times, the task's status), and the task timeout (a task found past it is
reported by get_last_error and in its statistics)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.gpu.gpu import relative_error, require_gpu

cp = require_gpu()

from pydla import cudla  # noqa: E402
from pydla.builder import BuildOptions, build  # noqa: E402
from pydla.engine.module import LoadedModule  # noqa: E402
from pydla.engine.stats import decode_task_statistics  # noqa: E402
from tests.models.netbuilder import Net  # noqa: E402


@pytest.fixture
def dev():
    cudla.use_backend("cuda")
    handle = cudla.create_device(0, cudla.Mode.CUDA_DLA)
    yield handle
    cudla.destroy_device(handle)
    cudla.use_backend("cpu")


def _small_net():  # noqa: ANN202
    n = Net("stats", seed=1)
    x = n.input("x", [1, 4, 12, 12])
    y = n.op("MaxPool", [n.conv(x, 4, 8, 3)], kernel_shape=[2, 2], strides=[2, 2])
    return n.model([n.op("Relu", [y])])


def _long_lstm():  # noqa: ANN202
    """An LSTM of 1500 steps: one kernel per step, well over a millisecond on any GPU."""
    n = Net("long", seed=2)
    x = n.input("x", [1500, 1, 4])
    ys, _, _ = n.op("LSTM", [x, n.weight(1, 32, 4), n.weight(1, 32, 8)], n_out=3,
                    hidden_size=8)
    return n.model([ys])


def _task(dev, data, x, with_stats):  # noqa: ANN001, ANN202
    module = cudla.module_load_from_memory(dev, data, len(data), 0)
    kinds = cudla.ModuleAttributeType
    in_d = cudla.module_get_attributes(module, kinds.INPUT_TENSOR_DESCRIPTORS)[0]
    out_d = cudla.module_get_attributes(module, kinds.OUTPUT_TENSOR_DESCRIPTORS)[0]
    x_dev = cp.asarray(np.ascontiguousarray(x).reshape(-1).view(np.uint8))
    y_dev = cp.zeros(out_d.size_, dtype=cp.uint8)
    task = cudla.Task()
    task.module_handle = module
    task.input_tensor = [cudla.mem_register(dev, x_dev, in_d.size_, 0)]
    outputs = [cudla.mem_register(dev, y_dev, out_d.size_, 0)]
    stats_dev = None
    if with_stats:
        assert cudla.module_get_attributes(module, kinds.NUM_OUTPUT_TASK_STATISTICS) == 1
        s_d = cudla.module_get_attributes(module, kinds.OUTPUT_TASK_STATISTICS_DESCRIPTORS)[0]
        stats_dev = cp.zeros(s_d.size_, dtype=cp.uint8)
        outputs.append(cudla.mem_register(dev, stats_dev, s_d.size_, 2))  # TASK_STATISTICS
    task.output_tensor = outputs
    return module, task, (x_dev, y_dev, stats_dev)


def test_task_statistics_from_the_gpu(dev):
    model = _small_net()
    data = build(model, BuildOptions(target="cuda"))
    x = np.random.default_rng(3).standard_normal((1, 4, 12, 12)).astype(np.float32)
    module, task, (_, y_dev, stats_dev) = _task(dev, data, x, with_stats=True)
    stream = cp.cuda.Stream(non_blocking=True)
    cudla.submit_task(dev, int(task), 1, stream.ptr, 0)
    stream.synchronize()
    want = LoadedModule(data).run([x])[0]
    got = cp.asnumpy(y_dev).view(np.float32).reshape(want.shape)
    assert relative_error(got, want) < 1e-2
    st = decode_task_statistics(cp.asnumpy(stats_dev))
    assert st.status == cudla.Status.Success
    assert st.layers_run == len(st.layers) == len(LoadedModule(data).program.layers)
    assert st.start_ns > 0 and st.end_ns >= st.start_ns
    previous = st.start_ns
    for layer in st.layers:
        assert previous <= layer.start_ns <= layer.end_ns <= st.end_ns, layer
        previous = layer.end_ns
    assert cudla.get_last_error(dev) == 0
    cudla.module_unload(module, 0)


def test_statistics_buffer_needs_the_flag(dev):
    data = build(_small_net(), BuildOptions(target="cuda", autotune=False))
    module = cudla.module_load_from_memory(dev, data, len(data), 0)
    kinds = cudla.ModuleAttributeType
    s_d = cudla.module_get_attributes(module, kinds.OUTPUT_TASK_STATISTICS_DESCRIPTORS)[0]
    in_d = cudla.module_get_attributes(module, kinds.INPUT_TENSOR_DESCRIPTORS)[0]
    out_d = cudla.module_get_attributes(module, kinds.OUTPUT_TENSOR_DESCRIPTORS)[0]
    bufs = [cp.zeros(size, dtype=cp.uint8) for size in (in_d.size_, out_d.size_, s_d.size_)]
    task = cudla.Task()
    task.module_handle = module
    task.input_tensor = [cudla.mem_register(dev, bufs[0], in_d.size_, 0)]
    task.output_tensor = [cudla.mem_register(dev, b, b.size, 0) for b in bufs[1:]]
    with pytest.raises(cudla.CudlaError) as e:
        cudla.submit_task(dev, int(task), 1, 0, 0)
    assert e.value.status == cudla.Status.ErrorInvalidParam
    cudla.module_unload(module, 0)


@pytest.mark.parametrize("timeout_ms, status", [(1, cudla.Status.ErrorDlaErrEngineTimeout),
                                                (60_000, cudla.Status.Success)])
def test_task_timeout_is_enforced(dev, timeout_ms, status):
    data = build(_long_lstm(), BuildOptions(target="cuda", autotune=False))
    x = np.random.default_rng(4).standard_normal((1500, 1, 4)).astype(np.float32)
    module, task, (_, _, stats_dev) = _task(dev, data, x, with_stats=True)
    cudla.set_task_timeout_in_ms(dev, timeout_ms)
    stream = cp.cuda.Stream(non_blocking=True)
    cudla.submit_task(dev, int(task), 1, stream.ptr, 0)
    stream.synchronize()
    st = decode_task_statistics(cp.asnumpy(stats_dev))
    assert st.duration_ns > 1_000_000, st.duration_ns  # the model does take > 1 ms
    assert st.status == status
    assert cudla.get_last_error(dev) == int(status)
    cudla.module_unload(module, 0)
