"""Whole model families (tests/models/families.py) built for the GPU — tuned there at build,
the tactics recorded in the loadable — loaded without timing anything, against the CPU
backend: fp32 within 1e-2 relative error, fp16 cosine ≥ 0.999."""

from __future__ import annotations

import pytest

from tests.gpu.gpu import require_gpu

cp = require_gpu()

from pydla.builder import BuildOptions  # noqa: E402
from pydla.dtypes import DType  # noqa: E402
from tests.gpu.test_more_kernels import check, run_both  # noqa: E402
from tests.models.families import FAMILIES  # noqa: E402

NAMES = ["yolov8", "dbnet", "svtr", "crnn", "lstm_vad", "yolox", "mobilenetv3"]


@pytest.mark.parametrize("precision", [None, DType.FLOAT16], ids=["fp32", "fp16"])
@pytest.mark.parametrize("name", NAMES)
def test_family_matches_cpu(name, precision):
    model, feeds = FAMILIES[name]()
    got, want, summary = run_both(model, feeds, BuildOptions(autocast=precision,
                                                             target="cuda"))
    check(name, got, want, precision)
    assert summary["timed_layers"] == 0, summary
    assert summary["recorded_layers"] == len(summary["tactics"])
    assert summary["graph_error"] is None, summary["graph_error"]
