"""A TreeEnsemble loadable is untrusted: its shape rule (pydla.loadable.rules_ml) refuses
arrays that do not fit one another, and its kernel refuses ids that point outside them and
trees that never reach a leaf — typed errors, never an out-of-bounds read or a hang."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import pydla
from pydla.backends.cpu import CpuBackend
from pydla.builder import build
from pydla.engine import LoadedModule
from pydla.errors import KernelError, LoadableError
from pydla.loadable import read_loadable
from pydla.session import SessionError
from tests.ops.test_ml import F, random_trees, tree_model, zipped_model
from tests.unit.test_loadable import header, meta_of, resign

OPS = CpuBackend().supported_ops()


@pytest.fixture(scope="module")
def loadable() -> bytes:
    a = random_trees(2, 2, 3, 1, seed=1)  # 2 trees of 7 nodes: branches 0-2, leaves 3-6
    return build(tree_model("TreeEnsembleRegressor", a, 3, {"y": (F, [16, 1])}, n_targets=1))


def _with_weights(data: bytes, name: str, edit: Callable[[np.ndarray], None]) -> bytes:
    """The loadable with weight tensor ``name`` edited in place (and re-signed)."""
    meta = meta_of(data)
    t = next(t for t in meta["tensors"] if t["name"] == name)
    start = header(data)["weights_offset"] + t["offset"]
    raw = bytearray(data)
    arr = np.frombuffer(raw, np.int32, t["nbytes"] // 4, start).copy().reshape(t["shape"])
    edit(arr)
    raw[start:start + t["nbytes"]] = arr.tobytes()
    return resign(bytes(raw), meta)


def _run(data: bytes) -> None:
    module = LoadedModule(data)
    module.run({"x": np.zeros((16, 3), np.float32)})


@pytest.mark.parametrize("name,edit,message", [
    ("tree_nodes", lambda a: a.__setitem__((0, 1), 10_000), "child index 10000"),
    ("tree_nodes", lambda a: a.__setitem__((0, 0), 3), "feature 3, outside"),
    ("tree_nodes", lambda a: a.__setitem__((0, 3), 7 | 8), "flags 15"),
    ("tree_leaf_offsets", lambda a: a.__setitem__(5, 1_000), "leaf offset"),
    ("tree_leaf_targets", lambda a: a.__setitem__(0, 1), "targets 1, outside"),
    ("tree_roots", lambda a: a.__setitem__(1, -1), "root -1"),
])
def test_out_of_range_ids_are_refused(loadable: bytes, name: str,
                                      edit: Callable[[np.ndarray], None], message: str) -> None:
    with pytest.raises(KernelError, match=message):
        _run(_with_weights(loadable, name, edit))


def test_a_cycle_is_refused(loadable: bytes) -> None:
    """Every child of the first tree's root points back at the root: a walk that never
    reaches a leaf stops after the node count."""
    def loop(a: np.ndarray) -> None:
        root = 0
        a[root, 1] = a[root, 2] = root
        a[root, 3] = 0  # BRANCH_LEQ: 0 <= threshold or not, the walk comes back
    with pytest.raises(KernelError, match="cycle"):
        _run(_with_weights(loadable, "tree_nodes", loop))


def test_valid_loadable_runs(loadable: bytes) -> None:
    _run(loadable)


@pytest.mark.parametrize("tamper,message", [
    (lambda lay, meta: lay["attrs"].__setitem__("n_targets", 2), "outputs[0]"),
    (lambda lay, meta: lay["attrs"].__setitem__("aggregate", "MEDIAN"), "attrs.aggregate"),
    (lambda lay, meta: lay["inputs"].__setitem__(2, lay["inputs"][6]), "inputs[2]"),
    (lambda lay, meta: meta["tensors"][lay["inputs"][4]].__setitem__("shape", [4, 2]),
     "inputs[4]"),
])
def test_rule_refuses_arrays_that_do_not_fit(loadable: bytes, tamper, message: str) -> None:
    meta = meta_of(loadable)
    index, layer = next((i, lay) for i, lay in enumerate(meta["layers"])
                        if lay["op"] == "TreeEnsemble")
    tamper(layer, meta)
    with pytest.raises(LoadableError, match=rf"layers\[{index}\]\.{re.escape(message)}: "
                       r"layer .* \(TreeEnsemble\)"):
        read_loadable(resign(loadable, meta), OPS)


@pytest.mark.parametrize("zipmap,message", [
    ({"probs": [7, 8]}, "2 labels for output 'probs' of shape"),
    ({"probs": ["a", "b", "c"]}, "not a list of int64 labels"),
    ([1, 2], "not an object"),
])
def test_session_refuses_bad_zipmap_metadata(tmp_path: Any, zipmap: Any, message: str) -> None:
    """build['zipmap'] is metadata of an untrusted file too: the session checks it names
    one int label per column before it makes maps from it."""
    data = build(zipped_model())
    meta = meta_of(data)
    meta["build"]["zipmap"] = zipmap
    with pytest.raises(SessionError, match=message):
        pydla.InferenceSession(resign(data, meta), cache_dir=tmp_path)


@pytest.mark.parametrize("name", ["tree_nodes", "tree_leaf_offsets", "tree_leaf_targets",
                                  "tree_roots"])
def test_random_id_corruption_ends_typed(loadable: bytes, name: str) -> None:
    """Ten random corruptions of one id array (any int32 at any entry, several at once):
    each loads and runs, or is refused with a KernelError — nothing else, no hang; some
    are refused."""
    rng = np.random.default_rng(sum(map(ord, name)))
    outcomes = set()
    for _ in range(10):
        def corrupt(a: np.ndarray) -> None:
            flat = a.reshape(-1)
            for _ in range(int(rng.integers(1, 4))):
                flat[rng.integers(flat.size)] = rng.choice(
                    [-1, 0, 1, 2, 3, 6, 7, 15, 16, 2**31 - 1, -2**31, int(rng.integers(-99, 99))])
        try:
            _run(_with_weights(loadable, name, corrupt))
            outcomes.add("ok")
        except KernelError:
            outcomes.add("typed")
    assert "typed" in outcomes  # (any other exception has failed the test already)
