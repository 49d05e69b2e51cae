"""The nine-step examples run as written; their outputs match onnxruntime."""

import importlib
import sys
from pathlib import Path

import numpy as np
import pytest

from pydla.api import pack_tensor, unpack_tensor
from pydla.builder import build
from tests.oracle import run_ort

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture(scope="module")
def examples():
    sys.path.insert(0, str(EXAMPLES))
    try:
        yield (importlib.import_module("nine_steps"),
               importlib.import_module("nine_steps_fp16_chw16"))
    finally:
        sys.path.remove(str(EXAMPLES))


def test_float32_linear_io(examples):
    nine, _ = examples
    model = nine.conv_net(np.float32)
    x = np.random.default_rng(5).standard_normal((1, 3, 16, 16)).astype(np.float32)
    outputs = nine.run_nine_steps(build(model), [x.reshape(-1).view(np.uint8)])
    want = run_ort(model, {"x": x})
    for buf, w in zip(outputs, want):
        assert buf.size == w.nbytes  # linear float32: size_ is the plain byte size
        np.testing.assert_allclose(buf.view(np.float32).reshape(w.shape), w, rtol=1e-4,
                                   atol=1e-5)


def test_float16_chw16_io(examples):
    nine, fp16 = examples
    model = nine.conv_net(np.float16)
    loadable = fp16.build_chw16(model)
    in_descs, out_descs = fp16.describe(loadable)
    for d in in_descs + out_descs:
        assert (int(d.data_type), int(d.data_format)) == (2, 3)  # HALF, NCxHWx
        assert d.size_ == d.n * 16 * d.h * d.w * 2  # channels padded to 16
    x = np.random.default_rng(6).standard_normal((1, 3, 16, 16)).astype(np.float16)
    outputs = nine.run_nine_steps(loadable, [pack_tensor(x, in_descs[0])])
    want = run_ort(model, {"x": x})
    for buf, d, w in zip(outputs, out_descs, want):
        got = unpack_tensor(buf, d)
        assert got.dtype == np.float16 and got.shape == w.shape
        np.testing.assert_allclose(got.astype(np.float32), w.astype(np.float32), rtol=1e-2,
                                   atol=1e-2)
        padding = buf.view(np.float16).reshape(1, 1, 16, 16, 16)[..., d.c:]
        assert not padding.any()  # padding channels are zero


@pytest.mark.parametrize("script", ["nine_steps.py", "nine_steps_fp16_chw16.py", "pythonic.py"])
def test_scripts_run(script):
    import subprocess

    out = subprocess.run([sys.executable, script], cwd=EXAMPLES, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    assert "logits" in out.stdout or "device closed" in out.stdout
