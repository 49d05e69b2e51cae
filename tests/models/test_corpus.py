"""Real published models (the corpus, tests/models/corpus.py) against onnxruntime.

Each model is built with its benchmarked input shapes and run twice: through ``pydla.cudla``
as a cuDLA program would (nine steps, every tensor found by its ONNX name through the
module's tensor descriptors) and through the Pythonic API (``pydla.api``). Every output the
model declares must match onnxruntime: max |Δ| ≤ 1e-3·max(1, max|ref|).

The default run covers ``corpus.DEFAULT`` (small, fast to build); ``-m corpus`` runs the
rest (fetch them first: ``python -m tests.models.corpus fetch --all``). A model that cannot
be fetched (offline, or ``PYDLA_CORPUS_OFFLINE=1``) is skipped with the reason.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import onnx
import pytest

from pydla import api, cudla
from pydla.api import pack_tensor, unpack_tensor
from pydla.builder import BuildOptions, build
from tests.models import corpus

ort = pytest.importorskip("onnxruntime")

# Models that do not match yet, each with the precise reason (strict: a fix must remove it).
XFAIL: dict[str, str] = {
}


try:
    MODELS = corpus.load()
    NO_CORPUS = ""
except corpus.FetchError as e:
    MODELS, NO_CORPUS = [], str(e)


def _param(m: corpus.Model):  # noqa: ANN202
    marks = [] if m.default else [pytest.mark.corpus]
    if m.id in XFAIL:
        marks.append(pytest.mark.xfail(strict=True, reason=XFAIL[m.id]))
    return pytest.param(m, id=m.id, marks=marks)


@pytest.fixture(autouse=True)
def _full_corpus_on_request(request):
    if request.node.get_closest_marker("corpus") and \
            "corpus" not in (request.config.option.markexpr or ""):
        pytest.skip("not in the default subset: run with -m corpus "
                    "(after `python -m tests.models.corpus fetch --all`)")


def model_path(m: corpus.Model) -> Path:
    if corpus.is_cached(m):
        return m.path()
    if os.environ.get("PYDLA_CORPUS_OFFLINE"):
        pytest.skip(f"{m.id} is not in {corpus.cache_dir()} and PYDLA_CORPUS_OFFLINE is set")
    try:
        return corpus.fetch(m, log=lambda _msg: None)
    except (corpus.FetchError, OSError) as e:
        pytest.skip(f"{m.id} could not be fetched: {e}")


def reference(path: Path, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    sess = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return {n: _as_tensor(v) for n, v in zip(names, sess.run(names, dict(feeds)))}


def _as_tensor(value: object) -> np.ndarray:
    """A ZipMap output (a list of {label: probability}) as the (N, C) tensor the loadable
    holds, columns in label order; any other output as it is."""
    if isinstance(value, list):
        return np.array([list(row.values()) for row in value], np.float32)
    return np.asarray(value)


def run_cudla(loadable: bytes, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The nine steps (on pydla's CPU device the buffers are host memory, so the copies
    of the CUDA runtime are plain array copies), each tensor found by its name."""
    from pydla import driver, runtime

    def check(result: tuple):  # noqa: ANN202
        err, *values = result
        assert err == 0, f"CUDA call failed: {err!r}"
        return values[0] if len(values) == 1 else None

    check(driver.cuInit(0))
    dev = cudla.create_device(0, cudla.Mode.CUDA_DLA)
    module = cudla.module_load_from_memory(dev, loadable, len(loadable), 0)
    kinds = cudla.ModuleAttributeType
    in_descs = cudla.module_get_attributes(module, kinds.INPUT_TENSOR_DESCRIPTORS)
    out_descs = cudla.module_get_attributes(module, kinds.OUTPUT_TENSOR_DESCRIPTORS)
    bufs = {id(d): check(runtime.cudaMalloc(d.size_)) for d in in_descs + out_descs}
    regs = {id(d): cudla.mem_register(dev, int(bufs[id(d)]), d.size_, 0)
            for d in in_descs + out_descs}
    stream = check(driver.cuStreamCreate(0))
    kind = runtime.cudaMemcpyKind
    for d in in_descs:
        host = pack_tensor(feeds[d.name], d)
        check(runtime.cudaMemcpyAsync(bufs[id(d)], host, d.size_,
                                      kind.cudaMemcpyHostToDevice, stream))
    task = cudla.Task()
    task.module_handle = module
    task.input_tensor = [regs[id(d)] for d in in_descs]
    task.output_tensor = [regs[id(d)] for d in out_descs]
    task.wait_events = 0
    task.signal_events = 0
    cudla.submit_task(dev, int(task), 1, int(stream), 0)
    outputs = {}
    for d in out_descs:
        host = np.zeros(d.size_, np.uint8)
        check(runtime.cudaMemcpyAsync(host, bufs[id(d)], d.size_,
                                      kind.cudaMemcpyDeviceToHost, stream))
        check(runtime.cudaStreamSynchronize(stream))
        outputs[d.name] = unpack_tensor(host, d)  # (n, c, h, w), as cuDLA describes it
    for reg in regs.values():
        cudla.mem_unregister(dev, reg)
    cudla.module_unload(module, 0)
    cudla.destroy_device(dev)
    for buf in bufs.values():
        check(runtime.cudaFree(buf))
    check(driver.cuStreamDestroy(stream))
    return outputs


def run_api(loadable: bytes, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    with api.Device() as dev, dev.load(loadable) as module:
        outs = module.run(dict(feeds))
        return {d.name: o for d, o in zip(module.output_descriptors, outs)}


def assert_matches(got: Mapping[str, np.ndarray], want: Mapping[str, np.ndarray],
                   how: str) -> None:
    assert list(got) == list(want), f"{how}: outputs {list(got)}, the model's {list(want)}"
    for name, ref in want.items():
        out = np.asarray(got[name])
        if how == "pydla.cudla" and out.ndim == 4 and ref.ndim < 4:
            # A descriptor pads a lower rank with ones at the end; the program knows its
            # model's shapes, as a Jetson program does.
            assert out.shape == (*ref.shape, *[1] * (4 - ref.ndim)), \
                f"{how}: {name!r} descriptor {out.shape} for an ONNX shape {ref.shape}"
            out = out.reshape(ref.shape)
        elif how == "pydla.cudla" and out.ndim == 4 and ref.ndim > 4:
            # ... and folds a higher rank's leading dimensions into n (cuDLA's NCHW).
            folded = (int(np.prod(ref.shape[:-3])), *ref.shape[-3:])
            assert out.shape == folded, \
                f"{how}: {name!r} descriptor {out.shape} for an ONNX shape {ref.shape}"
            out = out.reshape(ref.shape)
        assert out.shape == ref.shape, f"{how}: {name!r} shape {out.shape}, want {ref.shape}"
        ref64, out64 = ref.astype(np.float64), out.astype(np.float64)
        err = float(np.max(np.abs(out64 - ref64), initial=0.0))
        limit = 1e-3 * max(1.0, float(np.max(np.abs(ref64), initial=0.0)))
        assert err <= limit, f"{how}: {name!r} max |Δ| {err:.3g} > {limit:.3g}"


@pytest.mark.skipif(not MODELS, reason=NO_CORPUS or "empty corpus")
@pytest.mark.parametrize("m", [_param(m) for m in MODELS])
def test_model_matches_onnxruntime(m: corpus.Model):
    path = model_path(m)
    feeds = m.random_inputs()
    want = reference(path, feeds)
    assert list(want) == list(m.outputs), "corpus.json lists the model's outputs"
    # Dims the model leaves free are fixed to the benchmarked shapes; the others must agree.
    # Without autotuning (minutes of timing on the large models): tuned builds are checked
    # against onnxruntime by the corpus benchmark, which records each one's agreement.
    shapes = {k: list(v.shape) for k, v in feeds.items()}
    loadable = build(onnx.load(str(path)), BuildOptions(shapes=shapes, autotune=False))
    assert_matches(run_cudla(loadable, feeds), want, "pydla.cudla")
    assert_matches(run_api(loadable, feeds), want, "pydla.api")
