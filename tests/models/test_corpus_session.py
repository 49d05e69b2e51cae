"""``pydla.InferenceSession`` against ``onnxruntime.InferenceSession`` on the real-model
corpus: the same description (names, symbolic shapes, type strings) and, for the same feeds,
the same outputs in the same types — a ZipMap's list of dicts included. Same subsets as
tests/models/test_corpus.py (the default run, ``-m corpus`` for the rest)."""

from __future__ import annotations

import numpy as np
import pytest

import pydla
from tests.models import corpus
from tests.models.test_corpus import (  # noqa: F401  (_full_corpus_on_request: autouse)
    MODELS,
    NO_CORPUS,
    _as_tensor,
    _full_corpus_on_request,
    _param,
    assert_matches,
    model_path,
)

ort = pytest.importorskip("onnxruntime")


@pytest.mark.skipif(not MODELS, reason=NO_CORPUS or "empty corpus")
@pytest.mark.parametrize("m", [_param(m) for m in MODELS])
def test_session_matches_onnxruntime_session(m: corpus.Model, tmp_path):
    path = model_path(m)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    theirs = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    # autotune off, as test_corpus builds: tuned builds are the benchmark's business
    ours = pydla.InferenceSession(path, cache_dir=tmp_path, autotune=False)
    assert [(x.name, x.shape, x.type) for x in ours.get_inputs()] == \
        [(x.name, x.shape, x.type) for x in theirs.get_inputs()]
    mine, its = ours.get_outputs(), theirs.get_outputs()
    assert [(x.name, x.type, len(x.shape)) for x in mine] == \
        [(x.name, x.type, len(x.shape)) for x in its]
    for x, y in zip(mine, its):
        # an output dim is onnxruntime's, or — where onnxruntime's own shape inference
        # resolved a symbol that ONNX's inference cannot (a Reshape to computed dims) —
        # the model's declared symbol
        assert all(a == b or (isinstance(b, int) and not isinstance(a, int))
                   for a, b in zip(x.shape, y.shape)), (x.name, x.shape, y.shape)
    feeds = m.random_inputs()
    want = theirs.run(None, feeds)
    got = ours.run(None, feeds)
    names = [o.name for o in theirs.get_outputs()]
    for name, g, w in zip(names, got, want):
        if isinstance(w, list):  # a ZipMap: a list of {label: probability}, as onnxruntime's
            assert isinstance(g, list) and len(g) == len(w), name
            assert [list(r) for r in g] == [list(r) for r in w], name
        else:
            assert np.asarray(g).dtype == np.asarray(w).dtype, name
    assert_matches({n: _as_tensor(g) for n, g in zip(names, got)},
                   {n: _as_tensor(w) for n, w in zip(names, want)}, "pydla.InferenceSession")
