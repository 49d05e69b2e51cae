"""Loadable writer/reader round trip and corrupted files: every defect gives a typed error."""

from __future__ import annotations

import hashlib
import json
import mmap
import struct
from pathlib import Path

import numpy as np
import pytest
from onnx import helper

from pydla.backends.cpu import CpuBackend
from pydla.builder import BuildOptions, build
from pydla.engine import LoadedModule
from pydla.errors import IncompatibleLoadableError, LoadableError
from pydla.loadable import read_loadable
from pydla.loadable.format import (
    DIGEST_OFFSET,
    HEADER,
    HEADER_SIZE,
    VERSION_MAJOR,
    VERSION_MINOR,
)
from tests.oracle import make_model

OPS = CpuBackend().supported_ops()


@pytest.fixture(scope="module")
def loadable() -> bytes:
    rng = np.random.default_rng(0)
    model = make_model(
        [helper.make_node("Add", ["x", "b1"], ["s"], name="add1"),
         helper.make_node("Relu", ["s"], ["r"], name="relu1"),
         helper.make_node("Add", ["r", "b2"], ["y"], name="add2")],
        {"x": (np.float32, [2, 3, 8])}, ["y"],
        {"b1": rng.standard_normal(8).astype(np.float32),
         "b2": rng.standard_normal((3, 8)).astype(np.float32)})
    return build(model, BuildOptions(opt_level=0))  # three layers, unfused


def header(data: bytes) -> dict:
    names = ["magic", "major", "minor", "header_size", "file_size", "meta_offset", "meta_size",
             "weights_offset", "weights_size", "flags", "reserved"]
    return dict(zip(names, HEADER.unpack_from(data, 0)))


def meta_of(data: bytes) -> dict:
    h = header(data)
    return json.loads(data[h["meta_offset"]:h["meta_offset"] + h["meta_size"]])


def resign(data: bytes, meta: dict | None = None, raw_meta: bytes | None = None) -> bytes:
    """Rewrite the metadata and fix sizes and digest, so the deeper checks are reached."""
    h = header(data)
    weights = data[h["weights_offset"]:]
    body = raw_meta if raw_meta is not None else json.dumps(meta).encode()
    woff = -(-(HEADER_SIZE + len(body)) // 64) * 64
    head = HEADER.pack(h["magic"], h["major"], h["minor"], HEADER_SIZE, woff + len(weights),
                       HEADER_SIZE, len(body), woff, len(weights), 0, 0)
    rest = body + b"\0" * (woff - HEADER_SIZE - len(body)) + weights
    digest = hashlib.sha256(head + rest).digest()
    return head + digest + b"\0" * 32 + rest


def test_round_trip_and_run(loadable: bytes) -> None:
    prog = read_loadable(loadable, OPS)
    assert prog.version == (VERSION_MAJOR, VERSION_MINOR) == (1, 2)
    assert [lay.op for lay in prog.layers] == ["Add", "Relu", "Add"]
    assert [lay.fused_from for lay in prog.layers] == [("add1",), ("relu1",), ("add2",)]
    assert prog.inputs[0].descriptor.size == 2 * 3 * 8 * 4
    assert [t.kind for t in prog.tensors].count("weight") == 2


@pytest.mark.parametrize("wrap", ["bytes", "bytearray", "memoryview", "numpy", "mmap"])
def test_zero_copy_from_any_buffer(loadable: bytes, wrap: str, tmp_path) -> None:
    if wrap == "mmap":
        path = tmp_path / "m.bin"
        path.write_bytes(loadable)
        with open(path, "rb") as f:
            buf = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    else:
        buf = {"bytes": loadable, "bytearray": bytearray(loadable),
               "memoryview": memoryview(loadable),
               "numpy": np.frombuffer(loadable, np.uint8)}[wrap]
    prog = read_loadable(buf, OPS)
    w = next(t for t in prog.tensors if t.kind == "weight")
    arr = prog.weight(w)
    assert np.shares_memory(arr, np.frombuffer(buf, np.uint8))
    assert not arr.flags.writeable or wrap == "bytearray"
    x = np.ones((2, 3, 8), np.float32)
    assert LoadedModule(buf).run([x])[0].shape == (2, 3, 8)


def section_boundaries(data: bytes) -> list[int]:
    h = header(data)
    meta = meta_of(data)
    cuts = {0, 1, 7, 8, 12, 16, 63, 64, 96, 127, 128, h["meta_offset"] + h["meta_size"],
            h["weights_offset"], len(data) - 1}
    for t in meta["tensors"]:
        if t["kind"] == "weight":
            cuts.add(h["weights_offset"] + t["offset"])
            cuts.add(h["weights_offset"] + t["offset"] + t["nbytes"])
    return sorted(c for c in cuts if c < len(data))


def test_truncation_at_every_boundary(loadable: bytes) -> None:
    for cut in section_boundaries(loadable):
        with pytest.raises(LoadableError):
            read_loadable(loadable[:cut], OPS)
    with pytest.raises(LoadableError, match="file_size"):
        read_loadable(loadable + b"\0", OPS)


@pytest.mark.parametrize("region", ["header", "metadata", "weights"])
def test_random_bit_flips(loadable: bytes, region: str) -> None:
    h = header(loadable)
    lo, hi = {"header": (0, HEADER_SIZE),
              "metadata": (h["meta_offset"], h["meta_offset"] + h["meta_size"]),
              "weights": (h["weights_offset"], len(loadable))}[region]
    rng = np.random.default_rng(hash(region) % 2**32)
    for _ in range(300):
        buf = bytearray(loadable)
        pos = int(rng.integers(lo, hi))
        buf[pos] ^= 1 << int(rng.integers(0, 8))
        with pytest.raises(LoadableError):
            read_loadable(bytes(buf), OPS)


def test_newer_major_version_is_incompatible(loadable: bytes) -> None:
    buf = bytearray(loadable)
    struct.pack_into("<H", buf, 8, 2)
    with pytest.raises(IncompatibleLoadableError) as e:
        read_loadable(bytes(buf), OPS)
    assert e.value.offset == 8


def test_bad_magic_and_digest_name_their_offsets(loadable: bytes) -> None:
    buf = bytearray(loadable)
    buf[0] = ord("X")
    with pytest.raises(LoadableError) as e:
        read_loadable(bytes(buf), OPS)
    assert e.value.offset == 0 and "magic" in str(e.value)
    buf = bytearray(loadable)
    buf[-1] ^= 0xFF
    with pytest.raises(LoadableError) as e:
        read_loadable(bytes(buf), OPS)
    assert e.value.offset == DIGEST_OFFSET and "digest" in str(e.value)


def test_not_a_buffer() -> None:
    with pytest.raises(LoadableError):
        read_loadable(12345, OPS)  # type: ignore[arg-type]
    with pytest.raises(LoadableError):
        read_loadable(b"", OPS)


def _mutations():
    """(description, mutate(meta) in place, expected message fragment)."""

    def tensors(m):
        return m["tensors"]

    def first(kind):
        return lambda m: next(t for t in m["tensors"] if t["kind"] == kind)

    weight, act = first("weight"), first("activation")
    yield "ref out of range", lambda m: m["layers"][0]["inputs"].__setitem__(0, 99), "out of range"
    yield "negative ref", lambda m: m["layers"][0]["outputs"].__setitem__(0, -1), "out of range"
    yield "bool ref", lambda m: m["layers"][0]["inputs"].__setitem__(0, True), "out of range"
    yield "weight offset", lambda m: weight(m).__setitem__("offset", 1 << 30), "outside"
    yield "misaligned", lambda m: weight(m).__setitem__("offset", 3), "aligned"
    yield "negative offset", lambda m: weight(m).__setitem__("offset", -64), "negative"
    yield "nbytes", lambda m: weight(m).__setitem__("nbytes", 4), "does not match"
    yield "huge dim", lambda m: act(m).__setitem__("shape", [1 << 62]), "bad dimension"
    yield "rank", lambda m: act(m).__setitem__("shape", [1] * 9), "rank"
    yield "float dim", lambda m: act(m).__setitem__("shape", [2.5]), "bad dimension"
    yield "dtype", lambda m: act(m).__setitem__("dtype", "complex64"), "unknown dtype"
    yield "kind", lambda m: act(m).__setitem__("kind", "secret"), "unknown kind"
    yield "op", lambda m: m["layers"][1].__setitem__("op", "__import__"), "unknown op"
    yield "arena absurd", lambda m: m.__setitem__("arena_bytes", 1 << 50), "outside"
    yield "arena too big", lambda m: m.__setitem__("arena_bytes", m["arena_bytes"] + 4096), \
        "larger than"
    yield "arena small", lambda m: m.__setitem__("arena_bytes", 8), "exceed arena_bytes"
    yield "tensor count", lambda m: m.__setitem__("tensors", [0] * ((1 << 20) + 1)), "limit"
    yield "tensors not list", lambda m: m.__setitem__("tensors", {"a": 1}), "expected list"
    yield "missing field", lambda m: m["layers"][0].pop("attrs"), "missing field"
    yield "attr depth", lambda m: m["layers"][0]["attrs"].__setitem__("x", [[[[[[[1]]]]]]]), \
        "nests deeper"
    yield "read before write", lambda m: m["layers"].reverse(), "before it is written"
    yield "written twice", lambda m: m["layers"][2].__setitem__("outputs",
                                                                 m["layers"][0]["outputs"]), \
        "already written"
    yield "writes weight", lambda m: m["layers"][0]["outputs"].__setitem__(
        0, tensors(m).index(weight(m))), "a weight"
    def overlap(m):
        arena = [t for t in tensors(m) if t["kind"] != "weight"]
        for t in arena:
            t["offset"] = 0
        m["arena_bytes"] = max(t["nbytes"] for t in arena)

    yield "overlap", overlap, "shares arena bytes"
    yield "descriptor", lambda m: m["inputs"][0]["descriptor"].__setitem__("size", 1), \
        "does not match"
    yield "io format", lambda m: m["inputs"][0].__setitem__("format", "chw99"), "format"
    yield "io twice", lambda m: m["outputs"].append(m["outputs"][0]), "output"
    yield "io kind", lambda m: m["inputs"][0].__setitem__("tensor", m["outputs"][0]["tensor"]), \
        "not an input"
    yield "top level", lambda m: m.clear(), "missing field"


@pytest.mark.parametrize("case", list(_mutations()), ids=lambda c: c[0])
def test_metadata_defects_are_typed(loadable: bytes, case) -> None:
    _, mutate, fragment = case
    meta = meta_of(loadable)
    mutate(meta)
    with pytest.raises(LoadableError, match=fragment):
        read_loadable(resign(loadable, meta), OPS)


@pytest.mark.parametrize("raw", [b"\xff\xfe", b"{not json", b"[" * 100000 + b"]" * 100000,
                                 b"[1, 2]", b'{"producer": 1}'])
def test_metadata_not_json(loadable: bytes, raw: bytes) -> None:
    with pytest.raises(LoadableError):
        read_loadable(resign(loadable, raw_meta=raw), OPS)


def test_absent_first_input_fails_at_load(loadable: bytes) -> None:
    meta = meta_of(loadable)
    meta["layers"][1]["inputs"] = [-1]
    with pytest.raises(LoadableError, match="relu1"):
        LoadedModule(resign(loadable, meta))


# -- layer contracts (pydla.loadable.validate): shapes re-derived from each op's rule ---------

SEEDS = Path(__file__).resolve().parents[1] / "fuzz" / "seeds"


def _layer(meta: dict, op: str) -> dict:
    return next(lay for lay in meta["layers"] if lay["op"] == op)


def _contracts():
    """(seed, mutate(meta), expected path and reason fragment): each leaves sizes and
    offsets valid (the tensors fit their buffers) but the layer is not its op's."""
    def rewire(m):  # the defect measured in issue 29: an input of another shape
        m["layers"][2]["inputs"][0] = next(i for i, t in enumerate(m["tensors"])
                                           if t["name"] == "b1")

    yield "rewired input", None, rewire, r"layers\[2\]\.outputs\[0\].*makes \(3, 8\)"
    yield "conv pads", "conv_net", lambda m: _layer(m, "Conv")["attrs"].__setitem__(
        "pads", [0, 0, 0, 0]), r"layers\[0\]\..*\(1, 1, 6, 6, 16\)"
    yield "conv stride 0", "conv_net", lambda m: _layer(m, "Conv")["attrs"].__setitem__(
        "strides", [0, 1]), r"layers\[0\]\.attrs\.strides"
    yield "pool dilation 0", "conv_net", lambda m: _layer(m, "MaxPool")["attrs"].__setitem__(
        "dilations", [0, 1]), r"attrs\.dilations"
    yield "epilogue shape", "conv_net", lambda m: _layer(m, "Conv")["attrs"]["epilogue"][
        "program"][0].__setitem__("shape", [1, 16, 8, 8]), r"epilogue\.program\[0\]\.shape"
    yield "gemm transB", "conv_net", lambda m: _layer(m, "Gemm")["attrs"].__setitem__(
        "transB", 0), r"inner dimensions"
    yield "reorder channels", "conv_net", lambda m: _layer(m, "Reorder")["attrs"].__setitem__(
        "channels", 32), r"attrs|inputs\[0\]"
    yield "matmul operands", "attention", lambda m: _layer(m, "MatMul")["inputs"].reverse(), \
        r"inner dimensions|before it is written"
    yield "transpose perm", "attention", lambda m: _layer(m, "Transpose")["attrs"].__setitem__(
        "perm", [0, 1, 1]), r"attrs\.perm.*not a permutation"
    yield "softmax axis", "attention", lambda m: _layer(m, "Softmax")["attrs"].__setitem__(
        "axes", [3]), r"attrs\.axes"
    yield "layernorm scale", "attention", lambda m: _layer(
        m, "LayerNormalization")["inputs"].__setitem__(1, 1), r"inputs\[1\].*\(8, 8\)"
    yield "reduce keepdims", "attention", lambda m: _layer(m, "ReduceMean")["attrs"].__setitem__(
        "keepdims", 0), r"outputs\[0\].*\(2, 5\)"
    yield "concat axis", "shapes", lambda m: _layer(m, "Concat")["attrs"].__setitem__(
        "axis", 2), r"does not concatenate"
    yield "split sizes", "shapes", lambda m: _layer(m, "Split")["attrs"].__setitem__(
        "split", [4, 12]), r"outputs\[0\]"
    yield "slice ends", "shapes", lambda m: _layer(m, "Slice")["attrs"].__setitem__(
        "ends", [2, 2**63]), r"attrs\.ends"
    yield "pad", "shapes", lambda m: _layer(m, "Pad")["attrs"].__setitem__(
        "pads", [0, 2, 0, 1]), r"outputs\[0\]"
    yield "gather axis", "shapes", lambda m: _layer(m, "Gather")["attrs"].__setitem__(
        "axis", 1), r"outputs\[0\]"
    yield "pointwise register", "shapes", lambda m: _layer(m, "Pointwise")["attrs"][
        "program"][0].__setitem__("in", [0, 9]), r"program\[0\]\.in"
    yield "resize scale", "resize_pointwise", lambda m: _layer(m, "Resize")["attrs"].__setitem__(
        "scales", [1.0, 1.0, 3.0, 2.0]), r"dim 2"
    yield "attr inf", "resize_pointwise", lambda m: _layer(m, "AveragePool")[
        "attrs"].__setitem__("strides", [float("inf"), 1]), r"attrs\.strides"


@pytest.mark.parametrize("case", list(_contracts()), ids=lambda c: c[0])
def test_layer_contracts_are_proved(loadable: bytes, case) -> None:
    _, seed, mutate, pattern = case
    data = loadable if seed is None else (SEEDS / f"{seed}.pdla").read_bytes()
    meta = meta_of(data)
    read_loadable(data, OPS)  # the seed itself passes
    mutate(meta)
    with pytest.raises(LoadableError, match=pattern):
        read_loadable(resign(data, meta), OPS)


def test_every_compiled_tactic_has_a_shape_rule() -> None:
    """Ops without a rule must run numpy-only kernels (bounds-checked by numpy); every op a
    compiled tactic can run is proved by a rule before binding."""
    from pydla.backends.cpu.registry import TACTICS
    from pydla.loadable.validate import BIND_CHECKED, RULES

    assert sorted(op for op in TACTICS if op not in RULES and op not in BIND_CHECKED) == []
    compiled_kernels = {"Reorder", "Conv", "MatMul", "Gemm", "LSTM"}  # @kernel with numba
    assert compiled_kernels <= set(RULES)
