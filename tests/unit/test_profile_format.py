"""The loadable's optimization profiles (format 1.2): every plan validated as the top level
is, the ranges and plan shapes checked; a tampered profile is refused naming its path."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Any

import pytest

from pydla.backends.cpu import CpuBackend
from pydla.builder import BuildOptions, build
from pydla.errors import LoadableError
from pydla.loadable import read_loadable
from pydla.loadable.format import DIGEST_OFFSET, HEADER, HEADER_SIZE, align
from tests.unit.test_profiles import X, batch_model, centred_model, spatial_model

Meta = dict[str, Any]


def _profile(model: Any, lo: int, opt: int, hi: int) -> bytes:
    return build(model, BuildOptions(min_shapes={"x": (lo, *X)}, opt_shapes={"x": (opt, *X)},
                                     max_shapes={"x": (hi, *X)}, autotune=False))


@pytest.fixture(scope="module")
def padded() -> bytes:
    return _profile(batch_model(), 1, 4, 8)


@pytest.fixture(scope="module")
def exact() -> bytes:
    return _profile(centred_model(), 1, 2, 3)


def tamper(data: bytes, edit: Callable[[Meta], None]) -> bytes:
    """``data`` with its metadata edited, re-framed with a valid digest (as an attacker can)."""
    fields = HEADER.unpack_from(data, 0)
    meta_offset, meta_size, weights_offset = fields[5], fields[6], fields[7]
    meta = json.loads(data[meta_offset:meta_offset + meta_size])
    weights = data[weights_offset:]
    edit(meta)
    text = json.dumps(meta, separators=(",", ":")).encode()
    w_off = align(HEADER_SIZE + len(text))
    head = HEADER.pack(*fields[:4], w_off + len(weights), HEADER_SIZE, len(text), w_off,
                       len(weights), 0, 0)
    body = text + b"\0" * (w_off - HEADER_SIZE - len(text)) + weights
    digest = hashlib.sha256(head + body).digest()
    return head + digest + b"\0" * (HEADER_SIZE - DIGEST_OFFSET - len(digest)) + body


def test_profiles_read_back(padded: bytes, exact: bytes) -> None:
    ps = read_loadable(padded).profiles
    assert ps is not None and ps.pad_batch
    (r,) = ps.ranges
    assert (r.name, r.min, r.opt, r.max) == ("x", (1, *X), (4, *X), (8, *X))
    assert ps.profiles[0].body is None  # profile 0 is the top-level program
    assert all(p.body is not None for p in ps.profiles[1:])
    program = read_loadable(padded)
    plan = program.profile_program(3)
    assert plan.tensors[plan.inputs[0].tensor].shape == (8, *X)
    assert plan.weights is program.weights and plan.profiles is None
    ex = read_loadable(exact).profiles
    assert ex is not None and not ex.pad_batch and len(ex.profiles) == 3
    fixed = build(batch_model(), BuildOptions(shapes={"x": (2, *X)}, autotune=False))
    assert read_loadable(fixed).profiles is None


def _first_activation(meta: Meta) -> int:
    return next(i for i, t in enumerate(meta["tensors"]) if t["kind"] == "activation")


def _overlap(meta: Meta) -> None:
    """Move profile 1's output onto its input: both are alive for the whole run."""
    prof = meta["profiles"][1]
    out = prof["tensors"][prof["outputs"][0]["tensor"]]
    out["offset"] = prof["tensors"][prof["inputs"][0]["tensor"]]["offset"]


def _unknown_op(meta: Meta) -> None:
    meta["profiles"][1]["layers"][0]["op"] = "NoSuchOp"


def _bad_plan_shape(meta: Meta) -> None:
    meta["profiles"][1]["shapes"][0][0] = 3  # the plan's tensors are of batch 1


@pytest.mark.parametrize("edit, where", [
    (_bad_plan_shape, r"profiles\[1\]\.inputs\[0\]: 'x' has shape \[1, 3, 8, 8\], the profile "
                      r"says \[3, 3, 8, 8\]"),
    (_overlap, r"profiles\[1\]\.tensors\[\d+\]: .* shares arena bytes"),
    (_unknown_op, r"profiles\[1\]\.layers\[0\]\.op: unknown op 'NoSuchOp'"),
    (lambda m: m["profiles"][1]["shapes"][0].__setitem__(0, 9),
     r"profiles\[1\]\.shapes\[0\]: \[9, 3, 8, 8\] is not a shape of 'x'"),
    (lambda m: m["profiles"][1].__setitem__("arena_bytes", -1),
     r"profiles\[1\]\.arena_bytes: -1 is outside"),
    (lambda m: m["profiles"][2]["tensors"][_first_activation(m["profiles"][2])]["shape"]
     .__setitem__(0, 7), r"profiles\[2\]\.tensors\[\d+\]\.nbytes"),
    (lambda m: m["shape_range"]["inputs"][0].__setitem__("min", [5, *X]),
     r"shape_range\.inputs\[0\]: input 'x': min \[5, 3, 8, 8\] <= opt"),
    (lambda m: m["shape_range"]["inputs"][0].__setitem__("opt", [2, *X]),
     r"shape_range\.inputs\[0\]\.opt: \[2, 3, 8, 8\] is not the top-level shape"),
    (lambda m: m["profiles"].pop(), r"profiles: no profile runs the largest batch 8"),
    (lambda m: m["profiles"][0].__setitem__("layers", []), r"profiles\[0\]: profile 0 is the "
     r"top-level program"),
    (lambda m: m["profiles"].append(m["profiles"][1]), r"profiles\[4\]\.shapes: repeat "
     r"profiles\[1\]"),
    (lambda m: m.pop("shape_range"), r"missing field 'shape_range'"),
    (lambda m: m["profiles"][1]["outputs"].pop(), r"profiles\[1\]\.outputs"),
])
def test_tampered_profile_refused(padded: bytes, edit: Callable[[Meta], None],
                                  where: str) -> None:
    read_loadable(tamper(padded, lambda m: None), CpuBackend().supported_ops())  # framing ok
    with pytest.raises(LoadableError, match=where):
        read_loadable(tamper(padded, edit), CpuBackend().supported_ops())


def test_padding_claim_checked() -> None:
    """A profile relabelled as padded must vary the inputs' axis 0 alone (here the height
    varies: padding it would be wrong, and the reader refuses the claim)."""
    data = build(spatial_model(), BuildOptions(
        min_shapes={"x": (1, 3, 7, 8)}, opt_shapes={"x": (1, 3, 8, 8)},
        max_shapes={"x": (1, 3, 8, 8)}, autotune=False))
    read_loadable(data)
    with pytest.raises(LoadableError, match=r"shape_range\.pad_batch: padding needs the "
                       "inputs' axis 0 alone to vary"):
        read_loadable(tamper(data, lambda m: m["shape_range"].__setitem__("pad_batch", True)))
