"""The CUDA int8 convolution (``kernels/qconv.py``) on the GPU against the CPU backend's
int8 layers: ``tests/gpu/int8_cases.py``'s networks (QDQ-quantized by onnxruntime, a
folded residual, QLinearConv and ConvInteger), the same ``--target=cuda`` loadable run on
both, every output bit for bit, the CUDA graph's replay too. Without autotuning the first
candidate runs: the tensor-core kernel (``qconv_mma.py``) where a layer has it."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from tests.gpu.gpu import require_gpu

cp = require_gpu()

from pydla.backends.cuda import CudaBackend  # noqa: E402
from pydla.builder import BuildOptions, build  # noqa: E402
from pydla.engine.module import LoadedModule  # noqa: E402
from tests.gpu.int8_cases import CASES  # noqa: E402


@pytest.mark.parametrize("name", sorted(CASES))
def test_int8_convolutions_match_the_cpu_backend(name: str) -> None:
    logging.disable(logging.WARNING)  # onnxruntime's quantizer advises pre-processing
    try:
        model, feeds = CASES[name]()
    finally:
        logging.disable(logging.NOTSET)
    data = build(model, BuildOptions(autotune=False, target="cuda"))
    inputs = [feeds[i.name] for i in model.graph.input]
    cpu = LoadedModule(data)
    want = cpu.run(inputs)
    assert any(layer.op == "QConv" for layer in cpu.program.layers)
    gpu = LoadedModule(data, CudaBackend(autotune=False))
    try:
        got = gpu.run(inputs)
        again = gpu.run(inputs)
        summary = gpu.bound.summary()
    finally:
        gpu.bound.close()
    assert summary["graph_error"] is None, summary["graph_error"]
    qconv = {layer.name for layer in cpu.program.layers if layer.op == "QConv"}
    tactics = {t for layer, t in summary["tactics"].items() if layer in qconv}
    assert tactics <= {"nvrtc_mma", "nvrtc_dp4a", "nvrtc_bytes", "nvrtc_scalar"}, summary
    if name.startswith("qdq_wide"):  # every layer has whole 32-channel chunks
        assert tactics == {"nvrtc_mma"}, summary
    assert len(got) == len(want)
    for k, (g, w, a) in enumerate(zip(got, want, again)):
        assert g.dtype == w.dtype and g.shape == w.shape, (name, k, g.dtype, w.dtype)
        np.testing.assert_array_equal(g, w, err_msg=f"{name} output {k}")
        np.testing.assert_array_equal(a, g, err_msg=f"{name} output {k}, graph replay")
