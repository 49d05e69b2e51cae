"""pydla.InferenceSession against onnxruntime.InferenceSession: the same feeds, names,
types and symbolic shapes; one session over a symbolic batch runs batch 1, 3 and 8."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import pydla
from pydla import builder
from pydla.session import SessionError

ort = pytest.importorskip("onnxruntime")


def _conv_model(batch: str | int = "N", label: bool = True) -> onnx.ModelProto:
    """Conv → ReLU → global pool → MatMul → logits, and an int64 ArgMax ``label`` — or, with
    ``label=False``, the float feature map ``feat`` instead (every op then has a CUDA
    kernel)."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((6, 3, 3, 3)).astype(np.float32), "w")
    fc = numpy_helper.from_array(rng.standard_normal((6, 4)).astype(np.float32), "fc")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], name="conv"),
             helper.make_node("Relu", ["c"], ["feat"], name="relu"),
             helper.make_node("GlobalAveragePool", ["feat"], ["g"], name="gap"),
             helper.make_node("Flatten", ["g"], ["f"], name="flat"),
             helper.make_node("MatMul", ["f", "fc"], ["logits"], name="fc")]
    outputs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [batch, 4])]
    if label:
        nodes.append(helper.make_node("ArgMax", ["logits"], ["label"], axis=1, keepdims=0,
                                      name="am"))
        outputs.append(helper.make_tensor_value_info("label", TensorProto.INT64, [batch]))
    else:
        outputs.append(helper.make_tensor_value_info("feat", TensorProto.FLOAT,
                                                     [batch, 6, 8, 8]))
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, 8, 8])],
        outputs, [w, fc])
    # IR 10: onnxruntime builds that read no newer IR (the GPU machine's) load it too
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)


def _ort(model: onnx.ModelProto):  # noqa: ANN202
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def test_same_description_as_onnxruntime(tmp_path):
    model = _conv_model()
    ours, theirs = pydla.InferenceSession(model, cache_dir=tmp_path), _ort(model)
    for a, b in ((ours.get_inputs(), theirs.get_inputs()),
                 (ours.get_outputs(), theirs.get_outputs())):
        assert [(x.name, x.shape, x.type) for x in a] == [(x.name, x.shape, x.type) for x in b]
    assert ours.get_providers() == ["CPUExecutionProvider"]


def test_symbolic_batch_runs_1_3_8(tmp_path):
    model = _conv_model()
    ours, theirs = pydla.InferenceSession(model, cache_dir=tmp_path), _ort(model)
    for batch in (1, 3, 8, 3):
        x = np.random.default_rng(batch).standard_normal((batch, 3, 8, 8)).astype(np.float32)
        got, want = ours.run(None, {"x": x}), theirs.run(None, {"x": x})
        assert [g.dtype for g in got] == [w.dtype for w in want]
        np.testing.assert_allclose(got[0], want[0], rtol=1e-4, atol=1e-4)
        np.testing.assert_array_equal(got[1], want[1])
        label = ours.run(["label"], {"x": x})
        assert len(label) == 1 and label[0].shape == (batch,)
    assert len(list(tmp_path.glob("*.bin"))) == 3  # one loadable per batch size, cached


def test_cached_loadables_are_reused(tmp_path, monkeypatch):
    model = _conv_model()
    x = np.ones((2, 3, 8, 8), np.float32)
    first = pydla.InferenceSession(model, cache_dir=tmp_path).run(None, {"x": x})

    def no_build(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        raise AssertionError("built again")

    monkeypatch.setattr(builder, "build", no_build)
    again = pydla.InferenceSession(model, cache_dir=tmp_path).run(None, {"x": x})
    np.testing.assert_array_equal(first[0], again[0])


def test_session_over_a_loadable(tmp_path):
    from pydla.builder import BuildOptions, build

    model = _conv_model(batch=2)
    data = build(model, BuildOptions())
    (tmp_path / "m.bin").write_bytes(data)
    sess = pydla.InferenceSession(str(tmp_path / "m.bin"))
    assert [i.shape for i in sess.get_inputs()] == [[2, 3, 8, 8]]
    x = np.random.default_rng(1).standard_normal((2, 3, 8, 8)).astype(np.float32)
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], _ort(model).run(None, {"x": x})[0],
                               rtol=1e-4, atol=1e-4)
    with pytest.raises(SessionError, match="dimension 0 is 3, expected 2"):
        sess.run(None, {"x": np.zeros((3, 3, 8, 8), np.float32)})


def test_bfloat16_in_and_out_as_ml_dtypes(tmp_path):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.BFLOAT16, ["N", 4])],
        [helper.make_tensor_value_info("y", TensorProto.BFLOAT16, ["N", 4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    sess = pydla.InferenceSession(model, cache_dir=tmp_path)
    assert sess.get_inputs()[0].type == "tensor(bfloat16)"
    x = np.array([[-1.5, 0.25, 3.0, -0.0]] * 2, dtype=ml_dtypes.bfloat16)
    (y,) = sess.run(None, {"x": x})
    assert y.dtype == np.dtype(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(y.astype(np.float32), np.maximum(x.astype(np.float32), 0))
    with pytest.raises(SessionError, match="unexpected data type uint16"):
        sess.run(None, {"x": x.view(np.uint16)})


@pytest.mark.parametrize("feed, message", [
    ({"x": np.zeros((1, 3, 8, 8), np.float64)}, "unexpected data type float64"),
    ({"x": np.zeros((1, 8, 8, 3), np.float32)}, "dimension 1 is 8, expected 3"),
    ({"x": np.zeros((3, 8, 8), np.float32)}, "rank 3 given, expected 4"),
    ({"y": np.zeros((1, 3, 8, 8), np.float32)}, "unknown input names ['y']"),
    ({}, "missing inputs ['x']"),
])
def test_bad_feeds(tmp_path, feed, message):
    sess = pydla.InferenceSession(_conv_model(), cache_dir=tmp_path)
    with pytest.raises(SessionError) as e:
        sess.run(None, feed)
    assert message in str(e.value)


def test_providers(tmp_path):
    with pytest.raises(SessionError, match="unknown providers"):
        pydla.InferenceSession(_conv_model(), providers=["TensorrtExecutionProvider"])
    try:
        import cupy

        has_gpu = cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:  # noqa: BLE001
        has_gpu = False
    if not has_gpu:
        with pytest.warns(UserWarning, match="CUDAExecutionProvider is not available"):
            sess = pydla.InferenceSession(_conv_model(), providers=["CUDAExecutionProvider"],
                                          cache_dir=tmp_path)
        assert sess.get_providers() == ["CPUExecutionProvider"]


def test_missing_model_file(tmp_path):
    with pytest.raises(SessionError, match="no such model file"):
        pydla.InferenceSession(tmp_path / "nope.onnx")
