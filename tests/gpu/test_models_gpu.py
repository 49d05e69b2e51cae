"""Whole ResNet-50 and MobileNetV2 loadables on the GPU against onnxruntime: fp32 (TF32
convolutions) within 1e-2 relative error, fp16 with cosine similarity ≥ 0.999."""

from __future__ import annotations

import pytest

from tests.gpu.gpu import cosine, relative_error, require_gpu

cp = require_gpu()

from benchmarks.models import mobilenetv2  # noqa: E402
from pydla.backends.cuda import CudaBackend  # noqa: E402
from pydla.builder import BuildOptions, build  # noqa: E402
from pydla.dtypes import DType  # noqa: E402
from pydla.engine.module import LoadedModule  # noqa: E402
from tests.models.families import resnet50  # noqa: E402
from tests.oracle import run_ort  # noqa: E402

MODELS = {"resnet50": resnet50, "mobilenetv2": mobilenetv2}


@pytest.mark.parametrize("precision", [None, DType.FLOAT16], ids=["fp32", "fp16"])
@pytest.mark.parametrize("name", sorted(MODELS))
def test_model_matches_onnxruntime(name, precision):
    model, feeds = MODELS[name](size=224, batch=2)
    want = run_ort(model, feeds)[0]
    data = build(model, BuildOptions(autotune=False, autocast=precision, target="cuda"))
    module = LoadedModule(data, CudaBackend())
    got = module.run(feeds)[0]
    module.bound.close()
    if precision is None:
        assert relative_error(got, want) < 1e-2
    else:
        assert cosine(got, want) >= 0.999
