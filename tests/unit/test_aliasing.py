"""Reshapes planned as views (pydla.plan.aliasing): the output shares its input's bytes, the
layer copies nothing, nothing later rewrites those bytes, and the loadable reader refuses
a reshape alias that does not hold."""

from __future__ import annotations

import json

import numpy as np
import pytest
from onnx import helper

from pydla.backends.cpu import CpuBackend
from pydla.builder import BuildOptions, build
from pydla.engine import LoadedModule
from pydla.errors import LoadableError
from pydla.loadable import read_loadable
from tests.oracle import check_against_ort, make_model
from tests.unit.test_loadable import meta_of, resign

RNG = np.random.default_rng(5)
OPS = CpuBackend().supported_ops()


def _model():
    """r = Relu(x) is reshaped twice (v, then w = Unsqueeze(v)) and negated: Neg is r's last
    reader and could run in place over r, but v and w still read r's bytes afterwards."""
    shape = np.array([6, 8], np.int64)
    return make_model(
        [helper.make_node("Relu", ["x"], ["r"], name="relu"),
         helper.make_node("Reshape", ["r", "shape"], ["v"], name="reshape"),
         helper.make_node("Unsqueeze", ["v", "axes"], ["w"], name="unsqueeze"),
         helper.make_node("Neg", ["r"], ["n"], name="neg"),
         helper.make_node("Reshape", ["n", "shape"], ["nv"], name="reshape_n"),
         helper.make_node("Unsqueeze", ["nv", "axes"], ["nw"], name="unsqueeze_n"),
         helper.make_node("Add", ["w", "nw"], ["sum"], name="add"),
         helper.make_node("Mul", ["w", "b"], ["y"], name="mul")],
        {"x": (np.float32, [2, 3, 8])}, ["y", "sum"],
        {"shape": shape, "axes": np.array([0], np.int64),
         "b": RNG.standard_normal(8).astype(np.float32)})


@pytest.mark.parametrize("opt_level", [0, 3])
def test_reshapes_are_views_and_results_hold(opt_level: int) -> None:
    model = _model()
    feeds = {"x": RNG.standard_normal((2, 3, 8)).astype(np.float32)}
    data = build(model, BuildOptions(opt_level=opt_level))
    check_against_ort(model, feeds, options=BuildOptions(opt_level=opt_level))
    meta = meta_of(data)
    tensors = meta["tensors"]
    reshapes = [lay for lay in meta["layers"] if lay["op"] in ("Reshape", "Unsqueeze")]
    assert reshapes
    for lay in reshapes:
        out = tensors[lay["outputs"][0]]
        if out["kind"] == "output":  # a network output keeps its own bytes
            continue
        assert lay["attrs"].get("in_place") is True, lay["name"]
        assert out["alias"] == {"tensor": lay["inputs"][0], "offset": 0, "kind": "reshape"}
        assert out["offset"] == tensors[lay["inputs"][0]]["offset"]
    # The reshaped value's bytes are never rewritten in place (Neg gets its own).
    neg = next((lay for lay in meta["layers"] if lay["op"] == "Neg"), None)
    if neg is not None:
        assert "alias" not in tensors[neg["outputs"][0]]
    # The module runs with the shared bytes and agrees with itself run after run.
    module = LoadedModule(data)
    first = [o.copy() for o in module.run(feeds)]
    for got, want in zip(module.run(feeds), first):
        np.testing.assert_array_equal(got, want)


def _reshape_child(meta: dict) -> dict:
    return next(t for t in meta["tensors"] if t.get("alias", {}).get("kind") == "reshape")


MISPLACED = "does not lie inside|may not share"


@pytest.mark.parametrize("mutate, fragment", [
    (lambda m, t: t["alias"].__setitem__("offset", 4), MISPLACED),
    (lambda m, t: t["alias"].__setitem__("tensor", next(
        i for i, u in enumerate(m["tensors"]) if u["kind"] == "input")), MISPLACED),
    (lambda m, t: next(lay for lay in m["layers"] if t is m["tensors"][lay["outputs"][0]])[
        "attrs"].pop("in_place"), "may not share"),
    (lambda m, t: next(lay for lay in m["layers"] if t is m["tensors"][lay["outputs"][0]])
        .__setitem__("op", "Neg"), "may not share|cannot run in place"),
], ids=["offset", "parent", "not in place", "not a reshape"])
def test_reader_refuses_a_bad_reshape_alias(mutate, fragment: str) -> None:
    data = build(_model(), BuildOptions(opt_level=0))
    meta = meta_of(data)
    mutate(meta, _reshape_child(meta))
    with pytest.raises(LoadableError, match=fragment):
        read_loadable(resign(data, json.loads(json.dumps(meta))), OPS)


def _empty_part_model():
    """The watermark encoder's shape: a 5-D Conv's output concatenated on channels with an
    empty slice (channels [0:0] of a 5-D activation), then used by one more Conv."""
    w = RNG.standard_normal((4, 3, 1, 3, 3)).astype(np.float32)
    w2 = RNG.standard_normal((2, 4, 1, 1, 1)).astype(np.float32)
    return make_model(
        [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[0, 1, 1, 0, 1, 1]),
         helper.make_node("Relu", ["x"], ["r"], name="relu"),
         helper.make_node("Slice", ["r", "zero", "zero", "one"], ["e"], name="empty"),
         helper.make_node("Concat", ["c", "e"], ["cat"], name="cat", axis=1),
         helper.make_node("Conv", ["cat", "w2"], ["y"], name="conv2")],
        {"x": (np.float32, [1, 3, 1, 8, 8])}, ["y"],
        {"w": w, "w2": w2, "zero": np.array([0], np.int64), "one": np.array([1], np.int64)})


def test_5d_concat_with_an_empty_part_is_in_place_and_readable() -> None:
    model = _empty_part_model()
    feeds = {"x": RNG.standard_normal((1, 3, 1, 8, 8)).astype(np.float32)}
    data = build(model, BuildOptions(opt_level=0))
    cat = next(lay for lay in meta_of(data)["layers"] if lay["op"] == "Concat")
    assert cat["attrs"].get("in_place") is True
    assert len(cat["inputs"]) == 1  # the empty part was dropped, not given a stray address
    read_loadable(data, OPS)
    LoadedModule(data).run(feeds)  # binding checks every in-place Concat's slices
    check_against_ort(model, feeds, options=BuildOptions(opt_level=0))
