"""pydla.ray without Ray: batching any row count on a fixed-batch loadable, the HTTP
codec, thread pinning, build_once, and that importing pydla.ray does not import Ray."""

from __future__ import annotations

import base64
import subprocess
import sys

import numpy as np
import pytest
from onnx import helper

from pydla.backends.cpu import threads
from pydla.builder import BuildOptions, build
from pydla.engine import LoadedModule
from pydla.errors import BuildError, RequestError
from pydla.ray import codec
from pydla.ray.batching import BatchRunner
from pydla.ray.build import build_once
from pydla.ray.predictor import PydlaPredictor, pin_threads
from tests.oracle import make_model

BATCH = 4


def two_in_two_out(batch: int = BATCH):  # noqa: ANN201
    """s = relu(a + b), p = a * b: every row depends on its own row only."""
    shape = [batch, 3, 2]
    return make_model([helper.make_node("Add", ["a", "b"], ["t"]),
                       helper.make_node("Relu", ["t"], ["s"]),
                       helper.make_node("Mul", ["a", "b"], ["p"])],
                      {"a": (np.float32, shape), "b": (np.float32, shape)}, ["s", "p"])


@pytest.fixture(scope="module")
def loadable() -> bytes:
    return build(two_in_two_out())


def rows(n: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {k: rng.standard_normal((n, 3, 2)).astype(np.float32) for k in "ab"}


@pytest.mark.parametrize("n", [0, 1, 3, 4, 5, 11])
def test_any_row_count_is_split_padded_and_trimmed(loadable: bytes, n: int) -> None:
    predictor = PydlaPredictor(loadable, passthrough=["id"])
    batch = {**rows(n), "id": np.arange(n)}
    out = predictor(batch)
    assert sorted(out) == ["id", "p", "s"]
    np.testing.assert_array_equal(out["s"], np.maximum(batch["a"] + batch["b"], 0))
    np.testing.assert_array_equal(out["p"], batch["a"] * batch["b"])
    np.testing.assert_array_equal(out["id"], np.arange(n))


def test_chunks_equal_direct_runs_of_the_module(loadable: bytes) -> None:
    """The padded last chunk gives its real rows exactly what a full batch gives them."""
    x = rows(2 * BATCH)
    direct = LoadedModule(loadable)
    full = [direct.run({k: v[i:i + BATCH] for k, v in x.items()}) for i in (0, BATCH)]
    got = BatchRunner(direct).run({k: v[:BATCH + 3] for k, v in x.items()})
    np.testing.assert_array_equal(got["s"], np.concatenate([full[0][0], full[1][0][:3]]))


def test_inputs_are_cast_same_kind_and_refused_otherwise(loadable: bytes) -> None:
    runner = BatchRunner(LoadedModule(loadable))
    x = rows(2)
    out = runner.run({k: v.astype(np.float64) for k, v in x.items()})
    np.testing.assert_allclose(out["p"], x["a"] * x["b"], rtol=1e-6)
    with pytest.raises(RequestError, match="input 'a' is complex64; the module takes float32"):
        runner.run({"a": np.ones((2, 3, 2), np.complex64), "b": x["b"]})


@pytest.mark.parametrize(("batch", "match"), [
    ({"a": np.zeros((2, 3, 2), np.float32)}, r"missing inputs \['b'\]"),
    ({**rows(2), "c": np.zeros(2)}, r"unknown inputs \['c'\]"),
    ({"a": np.zeros((2, 3, 3), np.float32), "b": np.zeros((2, 3, 2), np.float32)},
     r"input 'a' has shape \(2, 3, 3\); the module takes \(n, 3, 2\)"),
    ({"a": np.zeros((2, 3, 2), np.float32), "b": np.zeros((3, 3, 2), np.float32)},
     "different row counts"),
])
def test_bad_batches_name_what_is_wrong(loadable: bytes, batch: dict, match: str) -> None:
    with pytest.raises(RequestError, match=match):
        BatchRunner(LoadedModule(loadable)).run(batch)


def test_a_single_sample_loses_its_row_dimension(loadable: bytes) -> None:
    runner = BatchRunner(LoadedModule(loadable))
    arrays, single = runner.check_request({"a": np.ones((3, 2)), "b": np.ones((3, 2))})
    assert single and arrays[0].shape == (1, 3, 2) and arrays[0].dtype == np.float32
    arrays, single = runner.check_request(rows(2))
    assert not single and arrays[0].shape == (2, 3, 2)


def test_a_loadable_without_a_common_batch_is_refused() -> None:
    model = make_model([helper.make_node("ReduceSum", ["x"], ["y"], keepdims=0)],
                       {"x": (np.float32, [4, 3])}, ["y"])
    with pytest.raises(RequestError, match=r"lead with the same batch.*'y' \(\)"):
        BatchRunner(LoadedModule(build(model)))


def test_predictor_rejects_bad_arguments(loadable: bytes) -> None:
    with pytest.raises(RequestError, match="device must be 'cpu' or 'cuda'"):
        PydlaPredictor(loadable, device="tpu")
    with pytest.raises(RequestError, match="loadable must be bytes"):
        PydlaPredictor(12345)
    with pytest.raises(RequestError, match=r"passthrough columns \['s'\]"):
        PydlaPredictor(loadable, passthrough=["s"])
    with pytest.raises(RequestError, match="passthrough column 'id' is not in the batch"):
        PydlaPredictor(loadable, passthrough=["id"])(rows(1))


def test_pin_threads_sets_pydlas_thread_count() -> None:
    try:
        assert pin_threads(1) == 1
        assert threads.num_threads() == 1
        # Outside a Ray worker nothing was reserved: pydla's default applies.
        assert pin_threads(None) == threads.num_threads()
    finally:
        threads.set_num_threads(None)


def test_build_once_takes_pydla_builds_flag_syntax(tmp_path) -> None:  # noqa: ANN001
    path = tmp_path / "m.onnx"
    model = two_in_two_out(batch=1)
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "n"
    model.graph.input[1].type.tensor_type.shape.dim[0].dim_param = "n"
    path.write_bytes(model.SerializeToString())
    data = build_once(path, shapes="a:6x3x2,b:6x3x2", opt_level=2)
    assert PydlaPredictor(data).batch == 6
    assert data == build(str(path), BuildOptions(shapes={"a": (6, 3, 2), "b": (6, 3, 2)},
                                                 opt_level=2))
    with pytest.raises(BuildError, match=r"unknown build flags \['saveEngine'\]"):
        build_once(path, saveEngine="x.bin")


def test_codec_round_trips_lists_and_base64() -> None:
    x = np.arange(12, dtype=np.float32).reshape(2, 3, 2) / 7
    for encoding in ("base64", "list"):
        inputs, _ = codec.decode_request(codec.encode_request({"a": x}, encoding))
        np.testing.assert_array_equal(inputs["a"].astype(np.float32), x)
        body = codec.encode_response({"p": x}, encoding)
        np.testing.assert_array_equal(codec.decode_response(body)["p"], x)


@pytest.mark.parametrize(("body", "match"), [
    ([1, 2], "JSON object with an \"inputs\" object"),
    ({"inputs": {}, "extra": 1}, r"unknown request fields \['extra'\]"),
    ({"inputs": {}, "encoding": "hex"}, "\"encoding\" must be one of"),
    ({"inputs": {"a": [[1, 2], [3]]}}, "input 'a': nested lists are not rectangular"),
    ({"inputs": {"a": ["x"]}}, "input 'a': nested lists must hold numbers"),
    ({"inputs": {"a": {"base64": "AAAA", "dtype": "object", "shape": [1]}}},
     "dtype 'object' is not one of"),
    ({"inputs": {"a": {"base64": "AAAA", "dtype": "float32", "shape": [-1]}}},
     "shape must be a list of non-negative integers"),
    ({"inputs": {"a": {"base64": "!!", "dtype": "float32", "shape": [1]}}}, "invalid base64"),
    ({"inputs": {"a": {"base64": base64.b64encode(b"123").decode(), "dtype": "float32",
                       "shape": [1]}}}, r"3 bytes given, shape \[1\] of float32 is 4 bytes"),
    ({"inputs": {"a": {"base64": "AAAA"}}}, "a raw input has exactly"),
])
def test_codec_names_what_is_wrong(body: object, match: str) -> None:
    with pytest.raises(RequestError, match=match):
        codec.decode_request(body)


def test_importing_pydla_ray_does_not_import_ray() -> None:
    code = ("import sys, pydla, pydla.ray; from pydla.ray import PydlaPredictor, build_once; "
            "assert 'ray' not in sys.modules, 'ray was imported'")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
