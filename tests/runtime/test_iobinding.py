"""``InferenceSession.io_binding`` / ``run_with_iobinding`` on the CPU provider, against
onnxruntime's own IOBinding (the GPU side: tests/gpu/test_session_gpu.py)."""

from __future__ import annotations

import re

import numpy as np
import pytest

import pydla
from pydla.session import SessionError
from tests.runtime.test_session import _conv_model

ort = pytest.importorskip("onnxruntime")


@pytest.fixture(scope="module")
def sessions(tmp_path_factory):
    model = _conv_model()
    ours = pydla.InferenceSession(model, cache_dir=tmp_path_factory.mktemp("cache"))
    theirs = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return ours, theirs


def _x(batch: int) -> np.ndarray:
    return np.random.default_rng(batch).standard_normal((batch, 3, 8, 8)).astype(np.float32)


def test_same_outputs_as_onnxruntime_binding(sessions):
    ours, theirs = sessions
    x = _x(3)
    got, want = ours.io_binding(), theirs.io_binding()
    for b in (got, want):
        b.bind_cpu_input("x", x)
        b.bind_output("logits")
        b.bind_output("label")
    ours.run_with_iobinding(got)
    theirs.run_with_iobinding(want)
    a, b = got.copy_outputs_to_cpu(), want.copy_outputs_to_cpu()
    np.testing.assert_allclose(a[0], b[0], rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(a[1], b[1])
    assert a[1].dtype == np.int64


def test_writes_into_bound_buffers_and_pointer_forms(sessions):
    ours, _ = sessions
    x = _x(2)
    logits = np.full((2, 4), np.nan, np.float32)
    label = np.zeros(2, np.int64)
    binding = ours.io_binding()
    binding.bind_input("x", "cpu", 0, np.float32, x.shape, x.ctypes.data)  # onnxruntime's form
    binding.bind_output("logits", logits)
    binding.bind_output("label", "cpu", 0, np.int64, (2,), label.ctypes.data)
    ours.run_with_iobinding(binding)
    want = ours.run(None, {"x": x})
    np.testing.assert_array_equal(logits, want[0])  # written in place
    np.testing.assert_array_equal(label, want[1])
    assert binding.get_outputs()[0] is logits
    # a new batch through the same binding picks the other shape's module
    binding.bind_cpu_input("x", _x(5))
    binding.clear_binding_outputs()
    binding.bind_output("label")
    ours.run_with_iobinding(binding)
    assert binding.get_outputs()[0].shape == (5,)


@pytest.mark.parametrize("case, message", [
    ("unknown input", "unknown input name 'y'"),
    ("unbound", "inputs ['x'] are not bound"),
    ("no outputs", "no outputs are bound"),
    ("dtype", "unexpected data type float64, expected tensor(float)"),
    ("rank", "rank 3 given, expected 4"),
    ("out shape", "the bound buffer has shape [3, 4], the output has [2, 4]"),
    ("out dtype", "the bound buffer is float64, the output is float32"),
    ("cuda on cpu", "runs on CPUExecutionProvider"),
    ("no run", "no outputs yet"),
])
def test_binding_errors_name_what_is_wrong(sessions, case, message):
    ours, _ = sessions
    b = ours.io_binding()
    x = _x(2)
    with pytest.raises(SessionError, match=re.escape(message)):
        if case == "unknown input":
            b.bind_cpu_input("y", x)
        if case == "no run":
            b.get_outputs()
        b.bind_output("logits", {"out shape": np.zeros((3, 4), np.float32),
                                 "out dtype": np.zeros((2, 4), np.float64),
                                 "cuda on cpu": "cuda"}.get(case, "cpu"))
        if case == "no outputs":
            b.clear_binding_outputs()
        if case != "unbound":
            b.bind_cpu_input("x", {"dtype": x.astype(np.float64), "rank": x[0]}.get(case, x))
        ours.run_with_iobinding(b)
