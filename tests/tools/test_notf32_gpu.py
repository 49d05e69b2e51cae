"""--noTF32 on the CUDA backend: a float32 convolution through cuDNN computes in strict FP32
(tensor-core engines deselected); by default TF32 is allowed, as in TensorRT."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from tests.gpu.gpu import relative_error, require_gpu

cp = require_gpu()
pytest.importorskip("cudnn")

from pydla.backends.cuda import CudaBackend  # noqa: E402
from pydla.backends.cuda.context import BindContext  # noqa: E402
from pydla.builder import BuildOptions, build  # noqa: E402
from pydla.engine.module import LoadedModule  # noqa: E402
from tests.oracle import make_model  # noqa: E402


def _conv_model(rng):
    w = (rng.standard_normal((256, 256, 3, 3)) / 48).astype(np.float32)
    model = make_model([helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1],
                                         name="conv")],
                       {"x": (np.float32, [1, 256, 32, 32])}, ["y"], initializers={"w": w})
    return model, w


def _reference(x, w):  # float64 direct convolution
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    cols = np.lib.stride_tricks.sliding_window_view(xp, (3, 3), axis=(2, 3))  # n,c,h,w,3,3
    return np.einsum("nchwij,kcij->nkhw", cols, w.astype(np.float64))


def test_no_tf32_makes_cudnn_convolutions_strict_fp32(monkeypatch):
    # Only the cuDNN candidates: the backend's own kernels are strict FP32 anyway.
    monkeypatch.setattr(BindContext, "wants", lambda self, name: name.startswith("cudnn"))
    rng = np.random.default_rng(0)
    model, w = _conv_model(rng)
    x = rng.standard_normal((1, 256, 32, 32)).astype(np.float32)
    want = _reference(x, w)
    errors = {}
    for no_tf32 in (False, True):
        data = build(model, BuildOptions(target="cuda", no_tf32=no_tf32))
        module = LoadedModule(data, CudaBackend())
        tactic = module.bound.summary()["tactics"]["conv"]
        errors[no_tf32] = relative_error(module.run([x])[0], want)
        module.bound.close()
        print(f"no_tf32={no_tf32}: tactic {tactic}, relative error {errors[no_tf32]:.3g}")
        assert tactic.startswith("cudnn"), tactic
    assert errors[True] < 1e-5  # FP32's 24-bit mantissa over 2304 products
    assert errors[False] < 1e-2  # TF32's 11-bit mantissa, where cuDNN chose tensor cores
