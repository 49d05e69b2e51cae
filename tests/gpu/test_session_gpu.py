"""``pydla.InferenceSession`` on CUDAExecutionProvider with torch tensors bound in and out:
no host copies, results written into the caller's tensors, ordered on torch's streams."""

from __future__ import annotations

import numpy as np
import pytest

from tests.gpu.gpu import require_gpu

cp = require_gpu()
torch = pytest.importorskip("torch")
pytest.importorskip("cuda.core")
if not torch.cuda.is_available():
    pytest.skip("torch has no CUDA here", allow_module_level=True)

import onnx  # noqa: E402
from onnx import TensorProto, helper  # noqa: E402

import pydla  # noqa: E402
from pydla.backends.cuda import driver  # noqa: E402
from pydla.session import SessionError  # noqa: E402
from tests.runtime.test_session import _conv_model as conv_model  # noqa: E402

ort = pytest.importorskip("onnxruntime")
CUDA = "CUDAExecutionProvider"
SLEEP_CYCLES = 200_000_000  # ≈ 0.1 s of GPU time: long enough to lose a race


def forbid_host_copies(monkeypatch) -> None:
    """After the session's modules are built and bound (which upload weights)."""
    def refuse(*args, **kwargs):
        raise AssertionError("a host copy was made")

    for name in ("memcpy_htod_async", "memcpy_dtoh_async"):
        monkeypatch.setattr(driver, name, refuse)
        monkeypatch.setattr(f"pydla.backends.cuda.backend.{name}", refuse, raising=False)


def _conv_model(batch: str | int = "N") -> onnx.ModelProto:
    """Two float outputs, logits and the feature map: every op has a CUDA kernel."""
    return conv_model(batch, label=False)


def _want(model: onnx.ModelProto, x: np.ndarray) -> list[np.ndarray]:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": x})


def test_torch_in_and_out_without_host_copies(tmp_path, monkeypatch):
    model = _conv_model()
    sess = pydla.InferenceSession(model, providers=[CUDA], cache_dir=tmp_path)
    assert sess.get_providers()[0] == CUDA
    for batch in (1, 3):  # build and bind both modules first
        sess.run(None, {"x": np.zeros((batch, 3, 8, 8), np.float32)})
    forbid_host_copies(monkeypatch)
    for batch in (1, 3):
        x = torch.randn(batch, 3, 8, 8, device="cuda")
        logits = torch.full((batch, 4), float("nan"), device="cuda")
        binding = sess.io_binding()
        binding.bind_input("x", x)
        binding.bind_output("logits", logits)
        binding.bind_output("feat", "cuda")  # pydla allocates: a CuPy array
        sess.run_with_iobinding(binding)
        got_logits, got_feat = binding.get_outputs()
        assert got_logits is logits
        assert isinstance(got_feat, cp.ndarray) and got_feat.shape == (batch, 6, 8, 8)
        want = _want(model, x.cpu().numpy())
        np.testing.assert_allclose(logits.cpu().numpy(), want[0], rtol=2e-2, atol=2e-2)
        np.testing.assert_allclose(torch.from_dlpack(got_feat).cpu().numpy(), want[1],
                                   rtol=2e-2, atol=2e-2)


def test_run_is_ordered_on_the_callers_stream(tmp_path):
    model = _conv_model(batch=2)
    sess = pydla.InferenceSession(model, providers=[CUDA], cache_dir=tmp_path)
    x_host = torch.randn(2, 3, 8, 8)
    want = _want(model, x_host.numpy())[0]
    side = torch.cuda.Stream()
    x = torch.zeros(2, 3, 8, 8, device="cuda")
    logits = torch.zeros(2, 4, device="cuda")
    binding = sess.io_binding()
    binding.bind_input("x", x)
    binding.bind_output("logits", logits)
    sess.run_with_iobinding(binding)  # build and bind first: binding synchronizes the GPU
    x_dev = x_host.cuda()
    torch.cuda.synchronize()
    with torch.cuda.stream(side):
        torch.cuda._sleep(SLEEP_CYCLES)  # the producer is slow ...
        x.copy_(x_dev)                   # ... and writes the input last
        sess.run_with_iobinding(binding, stream=side)  # returns without waiting
        doubled = logits * 2             # torch's own work, after pydla's, on its stream
    side.synchronize()
    np.testing.assert_allclose(doubled.cpu().numpy(), 2 * want, rtol=2e-2, atol=2e-2)


def test_default_run_waits_for_the_producer(tmp_path):
    """Without a stream, the input is read after the producer's pending work (DLPack's
    stream handshake with torch's current stream) and the call returns with the outputs."""
    model = _conv_model(batch=2)
    sess = pydla.InferenceSession(model, providers=[CUDA], cache_dir=tmp_path)
    x_host = torch.randn(2, 3, 8, 8)
    want = _want(model, x_host.numpy())[0]
    x = torch.zeros(2, 3, 8, 8, device="cuda")
    x_dev = x_host.cuda()
    binding = sess.io_binding()
    binding.bind_input("x", x)
    binding.bind_output("logits", "cpu")
    sess.run_with_iobinding(binding)  # build and bind first: binding synchronizes the GPU
    torch.cuda.synchronize()
    producer = torch.cuda.Stream()
    with torch.cuda.stream(producer):
        torch.cuda._sleep(SLEEP_CYCLES)
        x.copy_(x_dev)
        sess.run_with_iobinding(binding)
    [logits] = binding.get_outputs()
    np.testing.assert_allclose(logits, want, rtol=2e-2, atol=2e-2)


def test_user_compute_stream_provider_option(tmp_path):
    model = _conv_model(batch=2)
    stream = torch.cuda.Stream()
    sess = pydla.InferenceSession(
        model, providers=[(CUDA, {"user_compute_stream": str(stream.cuda_stream)})],
        cache_dir=tmp_path)
    x = torch.randn(2, 3, 8, 8, device="cuda")
    logits = torch.empty(2, 4, device="cuda")
    binding = sess.io_binding()
    binding.bind_input("x", x)
    binding.bind_output("logits", logits)
    torch.cuda.synchronize()
    with torch.cuda.stream(stream):
        sess.run_with_iobinding(binding)
    binding.synchronize_outputs()
    want = _want(model, x.cpu().numpy())[0]
    np.testing.assert_allclose(logits.cpu().numpy(), want, rtol=2e-2, atol=2e-2)


def test_half_and_bfloat16_tensors(tmp_path):
    for elem, dtype in ((TensorProto.FLOAT16, torch.float16),
                        (TensorProto.BFLOAT16, torch.bfloat16)):
        graph = helper.make_graph(
            [helper.make_node("Cast", ["x"], ["f"], to=TensorProto.FLOAT),
             helper.make_node("Relu", ["f"], ["r"]),
             helper.make_node("Cast", ["r"], ["y"], to=elem)], "g",
            [helper.make_tensor_value_info("x", elem, [4, 16])],
            [helper.make_tensor_value_info("y", elem, [4, 16])])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        sess = pydla.InferenceSession(model, providers=[CUDA], cache_dir=tmp_path)
        x = torch.randn(4, 16, device="cuda").to(dtype)
        y = torch.empty(4, 16, device="cuda", dtype=dtype)
        binding = sess.io_binding()
        binding.bind_input("x", x)
        binding.bind_output("y", y)
        sess.run_with_iobinding(binding)
        assert torch.equal(y, torch.relu(x)), dtype


def test_device_tensor_errors(tmp_path):
    sess = pydla.InferenceSession(_conv_model(batch=2), providers=[CUDA], cache_dir=tmp_path)
    binding = sess.io_binding()
    binding.bind_input("x", torch.randn(2, 8, 8, 3, device="cuda").permute(0, 3, 1, 2))
    binding.bind_output("logits", "cuda")
    with pytest.raises(SessionError, match="not C-contiguous"):
        sess.run_with_iobinding(binding)
    binding.bind_input("x", torch.randn(2, 3, 8, 8, device="cuda", dtype=torch.float64))
    with pytest.raises(SessionError, match="unexpected data type float64"):
        sess.run_with_iobinding(binding)
    binding.bind_input("x", torch.randn(2, 3, 8, 8, device="cuda"))
    binding.bind_output("logits", torch.empty(2, 5, device="cuda"))
    with pytest.raises(SessionError, match=r"has shape \[2, 5\], the output has \[2, 4\]"):
        sess.run_with_iobinding(binding)
