"""Each real-world model family builds at fixed shapes and matches onnxruntime within the
core tolerance max|Δ| ≤ 1e-3 · max(1, max|reference|) on every output."""

import pytest

from tests.models.families import FAMILIES
from tests.oracle import model_tolerance_ok, run_ort, run_pydla


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_family_matches_onnxruntime(family):
    model, feeds = FAMILIES[family]()
    want = run_ort(model, feeds)
    got = run_pydla(model, feeds)
    assert [g.shape for g in got] == [w.shape for w in want]
    model_tolerance_ok(got, want)
