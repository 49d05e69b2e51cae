"""The cuDNN plan cache without a GPU: keys, the entry reader's checks, and the fallback to
building when an entry is missing, foreign, corrupt or refused (pydla.backends.cuda.plan_cache
is pure Python; fakes stand in for cuDNN)."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

import pytest

from pydla.backends.cuda.layout import LINEAR, NHWC, Placement
from pydla.backends.cuda.plan_cache import (
    HEAD,
    MAX_PAYLOAD,
    Fingerprint,
    PlanCache,
    PlanCacheError,
    cache_dir,
    conv_spec,
    decode_entry,
    encode_entry,
    plan_key,
    tuning_env_note,
)
from pydla.dtypes import DType

H200 = Fingerprint(gpu="NVIDIA H200", arch="sm_90", driver=13000, cudnn=91900,
                   frontend="1.32.0")
KEY = plan_key(H200, {"op": "test"})


def spec(ptr_shift: int = 0, **changes: Any) -> dict[str, Any]:
    x = Placement(0x1000 + ptr_shift, (1, 64, 56, 56), DType.FLOAT16, NHWC)
    out = Placement(0x9000 + ptr_shift, (1, 64, 56, 56), DType.FLOAT16, NHWC)
    bias = Placement(0x5000 + ptr_shift, (64,), DType.FLOAT16, LINEAR)
    args: dict[str, Any] = dict(x=x, w_dims=[64, 64, 3, 3], w_strides=[576, 1, 192, 64],
                                w_dtype=DType.FLOAT16, bias=bias,
                                program=[{"op": "Relu", "in": [0], "dtype": "float16",
                                          "attrs": {}}],
                                extras=[], out=out, geometry=((1, 1), (1, 1), (1, 1), (1, 1)),
                                heuristics=("A", "FALLBACK"), no_tf32=False)
    args.update(changes)
    return conv_spec(**args)


class FakeGraph:
    def __init__(self, payload: bytes) -> None:
        self.payload = payload


def run(cache: PlanCache, payload: bytes = b"plan-bytes", the_spec: Any = None,
        refuse: bool = False) -> tuple[FakeGraph, list[str]]:
    """load_or_build with fakes; returns the graph and which callbacks ran."""
    calls: list[str] = []

    def restore(blob: bytes) -> FakeGraph:
        calls.append("restore")
        if refuse:
            raise RuntimeError("[json.exception.parse_error.112] parse error")
        return FakeGraph(blob)

    def build() -> FakeGraph:
        calls.append("build")
        return FakeGraph(payload)

    graph = cache.load_or_build(the_spec or spec(), restore, build, lambda g: g.payload)
    return graph, calls


def test_key_ignores_pointers_and_dict_order_but_not_the_graph_or_environment():
    assert plan_key(H200, spec()) == plan_key(H200, spec(ptr_shift=0x100))
    assert plan_key(H200, {"a": 1, "b": 2}) == plan_key(H200, {"b": 2, "a": 1})
    base = plan_key(H200, spec())
    for change in (dict(w_dims=[64, 64, 1, 1]), dict(w_dtype=DType.FLOAT32),
                   dict(geometry=((0, 0), (0, 0), (1, 1), (1, 1))), dict(program=[]),
                   dict(heuristics=("A",)), dict(bias=None)):
        assert plan_key(H200, spec(**change)) != base, change
    for name, value in (("gpu", "NVIDIA H100 80GB HBM3"), ("arch", "sm_89"),
                        ("driver", 12080), ("cudnn", 91000), ("frontend", "1.31.0")):
        other = dataclasses.replace(H200, **{name: value})
        assert plan_key(other, spec()) != base, name


def test_no_tf32_matters_for_float32_outputs_only():
    assert spec(no_tf32=True) == spec(no_tf32=False)  # fp16 output: no TF32 involved
    out32 = Placement(0x9000, (1, 64, 56, 56), DType.FLOAT32, NHWC)
    assert spec(out=out32, no_tf32=True) != spec(out=out32, no_tf32=False)


def test_entry_roundtrip_and_every_check():
    payload = b"\x00serialized plan\xff" * 10
    entry = encode_entry(KEY, payload)
    assert decode_entry(entry, KEY) == payload
    bad = {
        "shorter than": entry[:HEAD.size - 1],
        "bad magic at offset 0": b"X" + entry[1:],
        "at offset 8": entry[:8] + (2).to_bytes(4, "little") + entry[12:],
        "over the": entry[:12] + (MAX_PAYLOAD + 1).to_bytes(4, "little") + entry[16:],
        "the file holds": entry[:-1],
        "key at offset 16": entry[:16] + bytes(32) + entry[48:],
        "checksum (offset 48)": entry[:-1] + bytes([entry[-1] ^ 1]),
    }
    for reason, data in bad.items():
        with pytest.raises(PlanCacheError, match=reason.replace("(", r"\(").replace(")", r"\)")):
            decode_entry(data, KEY, "p.plan")
    with pytest.raises(PlanCacheError, match="over the"):
        encode_entry(KEY, bytes(MAX_PAYLOAD + 1))


def test_second_load_restores_and_builds_nothing(tmp_path):
    first = PlanCache(tmp_path, H200)
    graph, calls = run(first)
    assert calls == ["build"] and first.stats.stored == 1 and first.stats.built == 1
    assert len(list(tmp_path.glob("*.plan"))) == 1
    second = PlanCache(tmp_path, H200)
    graph, calls = run(second)
    assert calls == ["restore"] and graph.payload == b"plan-bytes"
    assert (second.stats.cached, second.stats.built, second.notes) == (1, 0, [])


def test_foreign_gpu_or_cudnn_misses_and_builds(tmp_path):
    run(PlanCache(tmp_path, H200))
    for other in (dataclasses.replace(H200, gpu="NVIDIA H100 80GB HBM3"),
                  dataclasses.replace(H200, cudnn=91000)):
        cache = PlanCache(tmp_path, other)
        _, calls = run(cache)
        assert calls == ["build"] and cache.stats.rejected == 0
    assert len(list(tmp_path.glob("*.plan"))) == 3  # one entry per environment


@pytest.mark.parametrize("damage", ["truncate", "flip", "garbage", "empty"])
def test_corrupt_entry_is_rebuilt_with_a_note_and_overwritten(tmp_path, damage):
    run(PlanCache(tmp_path, H200))
    [path] = tmp_path.glob("*.plan")
    data = path.read_bytes()
    path.write_bytes({"truncate": data[:-3], "flip": data[:-1] + bytes([data[-1] ^ 0x40]),
                      "garbage": os.urandom(len(data)), "empty": b""}[damage])
    cache = PlanCache(tmp_path, H200)
    graph, calls = run(cache)
    assert calls == ["build"] and cache.stats.rejected == 1
    assert len(cache.notes) == 1 and str(path) in cache.notes[0]
    assert cache.notes[0].endswith("rebuilt")
    assert decode_entry(path.read_bytes(), bytes.fromhex(path.stem)) == b"plan-bytes"


def test_entry_cudnn_refuses_is_rebuilt(tmp_path):
    """A well-formed entry whose payload cuDNN cannot deserialize (tampered, or written by a
    library that changed its format under the same version) costs a rebuild."""
    run(PlanCache(tmp_path, H200), payload=b"not a plan")
    cache = PlanCache(tmp_path, H200)
    graph, calls = run(cache, refuse=True)
    assert calls == ["restore", "build"] and cache.stats.rejected == 1
    assert "refused by cuDNN" in cache.notes[0] and "parse error" in cache.notes[0]


def test_off_and_unwritable_directories_still_build(tmp_path, monkeypatch):
    off = PlanCache(None, H200)
    _, calls = run(off)
    assert calls == ["build"] and off.stats.stored == 0
    blocker = tmp_path / "file"
    blocker.write_bytes(b"")
    cache = PlanCache(blocker / "plans", H200)  # a directory under a file: never writable
    for _ in range(3):
        _, calls = run(cache)
        assert calls == ["build"]
    assert cache.stats.unwritable == 3 and len(cache.notes) == 1
    assert "cannot write" in cache.notes[0]


def test_unserializable_plan_leaves_a_note(tmp_path):
    cache = PlanCache(tmp_path, H200)

    def serialize(graph: FakeGraph) -> bytes:
        raise RuntimeError("OSS engine graphs are not serializable")

    cache.load_or_build(spec(), lambda b: FakeGraph(b), lambda: FakeGraph(b""), serialize)
    assert cache.stats.built == 1 and cache.stats.stored == 0
    assert "not serializable" in cache.notes[0]


def test_cache_dir_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("PYDLA_CUDNN_PLAN_CACHE", str(tmp_path / "p"))
    assert cache_dir() == tmp_path / "p"
    for off in ("off", "0", "OFF"):
        monkeypatch.setenv("PYDLA_CUDNN_PLAN_CACHE", off)
        assert cache_dir() is None
    monkeypatch.delenv("PYDLA_CUDNN_PLAN_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "xdg" / "pydla" / "cudnn-plans"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert cache_dir() == Path.home() / ".cache" / "pydla" / "cudnn-plans"


def test_tuning_env_note_names_what_differs_and_reads_untrusted_input_safely():
    same = H200.as_dict()
    assert tuning_env_note(same, H200) is None
    assert tuning_env_note(None, H200) is None  # tuned before the env was recorded
    assert tuning_env_note(["not", "a", "dict"], H200) is None
    note = tuning_env_note(dict(same, gpu="NVIDIA H100 80GB HBM3", cudnn=91000), H200)
    assert note is not None
    assert "gpu NVIDIA H100 80GB HBM3 (here NVIDIA H200)" in note
    assert "cudnn 91000 (here 91900)" in note and "built here" in note
    long = tuning_env_note(dict(same, gpu="x" * 10_000), H200)
    assert long is not None and len(long) < 300
