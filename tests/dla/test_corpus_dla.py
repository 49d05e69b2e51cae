"""DLA readiness on real published models (the corpus's default subset; the whole corpus
with ``-m corpus``): the partition stitched back with onnxruntime equals the model (fp32,
max rel diff 1e-5), and a --useDLACore build fails on the first layer the check refuses,
naming it and its rule (or passes the DLA step when the check finds none)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from pydla.builder import BuildOptions
from pydla.dla import build as dla_build
from pydla.dla.partition import partition_model, run_parts
from pydla.dtypes import DType
from pydla.errors import ModelImportError, PydlaError
from tests.models import corpus
from tests.models.test_corpus import MODELS, _full_corpus_on_request, _param, model_path

ort = pytest.importorskip("onnxruntime")
_ = _full_corpus_on_request  # the fixture that skips non-default models without -m corpus


def _session(path):  # noqa: ANN001, ANN202
    return ort.InferenceSession(path, providers=["CPUExecutionProvider"])


@pytest.mark.parametrize("m", [_param(m) for m in MODELS])
def test_partition_and_standalone(tmp_path, m: corpus.Model):
    path = model_path(m)
    shapes = {k: v[0] for k, v in m.inputs.items()}
    try:
        manifest, report = partition_model(str(path), tmp_path, "fp16", shapes)
    except ModelImportError as e:
        pytest.skip(f"pydla does not import {m.id}: {e}")
    feeds = m.random_inputs()
    want = _session(str(path)).run(manifest["outputs"], feeds)
    got = run_parts(manifest, tmp_path, feeds, _session)
    for name, w in zip(manifest["outputs"], want):
        g, w = np.asarray(got[name]), np.asarray(w)
        assert g.shape == w.shape, name
        if np.issubdtype(w.dtype, np.number) and w.size:
            scale = max(float(np.abs(w.astype(np.float64)).max()), 1e-30)
            assert float(np.abs(g.astype(np.float64) - w).max()) / scale <= 1e-5, name
    refused = [v for v in report.layers if not v.supported]
    options = BuildOptions(shapes=shapes, dla_core=0, autocast=DType.FLOAT16)
    if refused:
        with pytest.raises(PydlaError) as e:
            dla_build.plan(onnx.load(str(path)), options)
        assert f"layer {refused[0].name!r}" in str(e.value)
        assert f"[{refused[0].refusal.rule}]" in str(e.value)
    else:
        assert dla_build.plan(onnx.load(str(path)), options) is not None
