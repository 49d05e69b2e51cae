"""pydla.ray on a local two-CPU Ray cluster (started once for the module): Ray Data batch
inference against single-process pydla, threads pinned per actor, Ray Serve through its
Python handle and over HTTP. Skipped where Ray is not installed (``pip install pydla[ray]``).
"""

from __future__ import annotations

import importlib
import socket
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from onnx import helper

ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'pydla[ray]')")
pytest.importorskip("ray.data", reason="Ray Data is not installed (pip install 'pydla[ray]')")
serve = pytest.importorskip("ray.serve",
                            reason="Ray Serve is not installed (pip install 'pydla[ray]')")
requests = pytest.importorskip("requests", reason="requests (a Ray Serve dependency) missing")

from pydla.builder import BuildOptions, build  # noqa: E402
from pydla.ray import codec, deployment, put_loadable  # noqa: E402
from pydla.ray.predictor import PydlaPredictor, pin_threads  # noqa: E402
from tests.oracle import make_model  # noqa: E402

SAMPLES = Path(__file__).resolve().parents[2] / "pydla" / "samples"
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
BATCH = 8


@pytest.fixture(scope="module")
def cluster() -> Iterator[None]:
    ray.init(num_cpus=2, include_dashboard=False, object_store_memory=150 * 2**20,
             log_to_driver=False, configure_logging=False)
    yield
    if serve.status().applications:
        serve.shutdown()
    ray.shutdown()


@pytest.fixture(scope="module")
def loadable() -> bytes:
    return build(str(SAMPLES / "digits_mlp.onnx"), BuildOptions(shapes={"image": (BATCH, 1,
                                                                                   8, 8)}))


@pytest.fixture(scope="module")
def digits() -> np.ndarray:
    return np.load(SAMPLES / "digits_test.npz")["images"].astype(np.float32)


def test_batch_inference_equals_single_process(cluster: None, loadable: bytes,
                                               digits: np.ndarray) -> None:
    ds = ray.data.from_items([{"image": x, "id": i} for i, x in enumerate(digits)])
    # 37 rows per batch: not a multiple of the loadable's 8, so every batch pads its tail.
    out = ds.map_batches(PydlaPredictor, batch_size=37, num_cpus=1,
                         compute=ray.data.ActorPoolStrategy(size=2),
                         fn_constructor_kwargs={"loadable": put_loadable(loadable),
                                                "passthrough": ["id"]}).take_all()
    got = np.stack([r["probabilities"] for r in sorted(out, key=lambda r: r["id"])])
    expected = PydlaPredictor(loadable)({"image": digits})["probabilities"]
    assert got.shape == (450, 10)
    np.testing.assert_array_equal(got, expected)


def test_actors_pin_threads_to_their_cpus(cluster: None) -> None:
    import numba

    for cpus in (1, 2):
        expected = min(cpus, numba.config.NUMBA_NUM_THREADS)
        assert ray.get(ray.remote(num_cpus=cpus)(pin_threads).remote()) == expected


def test_an_object_ref_loads_in_process(cluster: None, loadable: bytes) -> None:
    assert PydlaPredictor(ray.put(loadable)).batch == BATCH


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_serve_batches_concurrent_requests(cluster: None, loadable: bytes,
                                           digits: np.ndarray) -> None:
    port = _free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    handle = serve.run(deployment(put_loadable(loadable), max_batch_size=16,
                                  batch_wait_timeout_s=0.05), route_prefix="/digits")
    expected = PydlaPredictor(loadable)({"image": digits[:40]})["probabilities"]

    # The handle: one sample without the row dimension, then 3 rows, then 40 at once.
    one = handle.predict.remote({"image": digits[0]}).result()["probabilities"]
    np.testing.assert_array_equal(one, expected[0])
    three = handle.predict.remote({"image": digits[:3]}).result()["probabilities"]
    np.testing.assert_array_equal(three, expected[:3])
    pending = [handle.predict.remote({"image": digits[i]}) for i in range(40)]
    got = np.stack([p.result()["probabilities"] for p in pending])
    np.testing.assert_array_equal(got, expected)
    stats = handle.stats.remote().result()
    assert stats["largest_batch_requests"] > 1, stats  # requests were batched together
    assert stats["num_threads"] == 1 and stats["failed"] == 0

    # HTTP: raw base64 and nested lists, concurrently; both decode to the same outputs.
    url = f"http://127.0.0.1:{port}/digits"

    def post(i: int) -> np.ndarray:
        body = codec.encode_request({"image": digits[i:i + 2]}, "base64" if i % 2 else "list")
        r = requests.post(url, json=body, timeout=60)
        assert r.status_code == 200, r.text
        return codec.decode_response(r.json())["probabilities"]

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(post, range(16)))
    for i, probs in enumerate(results):
        np.testing.assert_allclose(probs, expected[i:i + 2], rtol=1e-6)  # lists: JSON floats

    bad = requests.post(url, json={"inputs": {"image": [1.0, 2.0]}}, timeout=60)
    assert bad.status_code == 400
    assert "input 'image' has shape (2,)" in bad.json()["error"]
    assert requests.post(url, data=b"{", timeout=60).status_code == 400
    app = serve.status().applications["default"]
    assert app.deployments["pydla"].status == "HEALTHY"


@pytest.mark.ray_slow
def test_image_folder_example_equals_single_process(cluster: None, tmp_path: Path) -> None:
    """examples/ray_batch.py: PNGs → read_images → preprocess → 2 actors → Parquet; every
    image's scores equal a plain in-process predictor's on the same preprocessed input."""
    sys.path.insert(0, str(EXAMPLES))
    try:
        example = importlib.import_module("ray_batch")
    finally:
        sys.path.remove(str(EXAMPLES))
    # Ray's workers cannot import examples/: its functions travel by value.
    ray.cloudpickle.register_pickle_by_value(example)
    rng = np.random.default_rng(1)
    model = make_model([helper.make_node("Conv", ["x", "w"], ["y"], strides=[4, 4]),
                        helper.make_node("Softmax", ["y"], ["p"], axis=1)],
                       {"x": (np.float32, [4, 3, 16, 16])}, ["p"],
                       {"w": rng.standard_normal((5, 3, 4, 4)).astype(np.float32)})
    loadable = build(model)
    images, out = tmp_path / "images", tmp_path / "parquet"
    example.make_images(images, 10, size=(40, 36))
    result = example.run(loadable, images, out, actors=2, cpus_per_actor=1, batch_size=4)
    got = example.read_results(out, result["output"])
    want = example.expected_outputs(loadable, images)
    assert result["images"] == 10 and sorted(got) == sorted(want)
    for path, scores in want.items():
        np.testing.assert_array_equal(got[path], scores)
