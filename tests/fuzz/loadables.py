"""Structure-aware and byte-level mutation of loadables.

A case is ``(seed file, case number)``: the mutation is a pure function of them, so any
failure replays from its recipe alone. Structure-aware cases decode the metadata, change
one to three things (shapes, dtypes, offsets, tensor references, attributes, layer order,
numbers at type boundaries), often re-lay the file so the change is self-consistent (sizes
recomputed, activations moved apart, weights re-packed, I/O descriptors re-derived) and
always re-sign it: the digest only stops accidents, anyone can recompute it.
"""

from __future__ import annotations

import copy
import hashlib
import json
import random
from typing import Any

import numpy as np

from pydla import formats
from pydla.dtypes import DType
from pydla.loadable.format import ALIGNMENT, DIGEST_OFFSET, HEADER, HEADER_SIZE, align

BOUNDARY_INTS = (0, 1, -1, 2, 3, 7, 16, 17, 255, 2**15, 2**31 - 1, 2**31, -2**31, 2**32,
                 2**40, 2**40 + 1, 2**53, 2**62, 2**63 - 1, 2**63, -2**63, 2**64, 10**30)
ODD_VALUES: tuple[Any, ...] = (None, True, False, "", "nchw16c", [], {}, [0], [-1], 0.5,
                               1e308, float("nan"), float("inf"), -0.0, "reference")
DTYPES = ("float32", "float16", "bfloat16", "int8", "uint8", "int32", "int64", "bool",
          "float64", "int16", "uint16", "uint32", "uint64", "float8e4m3", "string")


def split(data: bytes) -> tuple[dict[str, Any], bytes]:
    h = HEADER.unpack_from(data, 0)
    meta_offset, meta_size, weights_offset = h[5], h[6], h[7]
    return json.loads(data[meta_offset:meta_offset + meta_size]), data[weights_offset:]


def sign(meta_bytes: bytes, weights: bytes) -> bytes:
    """Lay out header, metadata and weights and compute the digest, as the writer does."""
    woff = align(HEADER_SIZE + len(meta_bytes), ALIGNMENT)
    size = woff + len(weights)
    head = HEADER.pack(b"PYDLALD\x00", 1, 1, HEADER_SIZE, size, HEADER_SIZE, len(meta_bytes),
                       woff, len(weights), 0, 0)
    body = meta_bytes + b"\0" * (woff - HEADER_SIZE - len(meta_bytes)) + weights
    digest = hashlib.sha256(head + body).digest()
    return head + digest + b"\0" * (HEADER_SIZE - DIGEST_OFFSET - 32) + body


def _nbytes(t: dict[str, Any]) -> int | None:
    try:
        count = 1
        for d in t["shape"]:
            count *= int(d)
        return count * DType.from_name(t["dtype"]).itemsize
    except (ValueError, TypeError, KeyError, OverflowError):
        return None


def relay(meta: dict[str, Any], weights: bytes) -> tuple[dict[str, Any], bytes]:
    """Make sizes, offsets, arena and descriptors consistent again after a mutation, so the
    case reaches the shape, alias and kernel checks behind the layout checks."""
    tensors = meta.get("tensors")
    if not isinstance(tensors, list):
        return meta, weights
    blobs, cursor, arena = [], 0, 0
    for t in tensors:
        if not isinstance(t, dict):
            continue
        n = _nbytes(t)
        if n is None or n > 1 << 24:
            continue
        t["nbytes"] = n
        if t.get("kind") == "weight":
            off = t.get("offset", 0)
            old = weights[off:off + n] if isinstance(off, int) and off >= 0 else b""
            blob = old + b"\0" * (n - len(old))
            t["offset"] = cursor
            blobs.append(blob + b"\0" * (align(n) - n))
            cursor += align(n)
        elif not isinstance(t.get("alias"), dict):
            t["offset"] = arena
            arena += align(max(n, 1))
    for t in tensors:  # a child keeps its place inside its parent
        a = t.get("alias") if isinstance(t, dict) else None
        if isinstance(a, dict) and isinstance(a.get("tensor"), int) \
                and 0 <= a["tensor"] < len(tensors) and isinstance(a.get("offset"), int):
            parent = tensors[a["tensor"]]
            if isinstance(parent, dict) and isinstance(parent.get("offset"), int):
                t["offset"] = parent["offset"] + a["offset"]
    meta["arena_bytes"] = arena
    for key in ("inputs", "outputs"):
        for io in meta.get(key, []) if isinstance(meta.get(key), list) else []:
            try:
                t = tensors[io["tensor"]]
                d = formats.describe(t["name"], io["format"], tuple(t["shape"]),
                                     DType.from_name(io["dtype"]))
                io["descriptor"] = {k: list(v) if isinstance(v, tuple) else v
                                    for k, v in d.__dict__.items()}
            except Exception:  # noqa: BLE001  (a mutated entry stays as mutated)
                pass
    return meta, b"".join(blobs)


def _paths(obj: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every leaf and container path below ``obj``."""
    out = [prefix]
    if isinstance(obj, dict):
        for k, v in obj.items():
            out += _paths(v, prefix + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            out += _paths(v, prefix + (i,))
    return out


def _get(obj: Any, path: tuple[Any, ...]) -> Any:
    for k in path:
        obj = obj[k]
    return obj


def _set(obj: Any, path: tuple[Any, ...], value: Any) -> None:
    _get(obj, path[:-1])[path[-1]] = value


def _number_near(rng: random.Random, v: Any) -> Any:
    r = rng.random()
    if r < 0.4:
        return rng.choice(BOUNDARY_INTS)
    if r < 0.7 and isinstance(v, (int, float)) and not isinstance(v, bool):
        return v + rng.choice((-2, -1, 1, 2, 16))
    if r < 0.85 and isinstance(v, (int, float)) and not isinstance(v, bool):
        return v * rng.choice((0, -1, 2, 3))
    return rng.choice(ODD_VALUES)


def _mutate_value(rng: random.Random, meta: dict[str, Any], path: tuple[Any, ...]) -> None:
    v = _get(meta, path)
    if isinstance(v, list) and v and rng.random() < 0.5:
        op = rng.randrange(4)
        if op == 0:
            v.pop(rng.randrange(len(v)))
        elif op == 1:
            v.insert(rng.randrange(len(v) + 1), copy.deepcopy(rng.choice(v)))
        elif op == 2:
            rng.shuffle(v)
        else:
            v[rng.randrange(len(v))] = _number_near(rng, 1)
        return
    if isinstance(v, dict) and v and rng.random() < 0.5:
        del v[rng.choice(list(v))]
        return
    _set(meta, path, _number_near(rng, v) if not isinstance(v, str) else
         rng.choice(ODD_VALUES + DTYPES[:3]))


def _tensor_mutation(rng: random.Random, meta: dict[str, Any]) -> None:
    t = rng.choice(meta["tensors"])
    what = rng.randrange(7)
    if what == 0 and t["shape"]:  # one dimension
        i = rng.randrange(len(t["shape"]))
        t["shape"][i] = rng.choice((0, 1, 2, t["shape"][i] + 1, t["shape"][i] * 2,
                                    max(t["shape"][i] - 1, 0), 16, 2**31, 2**40))
    elif what == 1:  # rank
        if t["shape"] and rng.random() < 0.5:
            t["shape"].pop(rng.randrange(len(t["shape"])))
        else:
            t["shape"].insert(rng.randrange(len(t["shape"]) + 1), rng.choice((1, 2, 16)))
    elif what == 2:
        t["dtype"] = rng.choice(DTYPES)
    elif what == 3:
        t["kind"] = rng.choice(("input", "output", "activation", "weight", "scratch"))
    elif what == 4:
        t["offset"] = _number_near(rng, t["offset"])
    elif what == 5:  # alias: add, drop or rewire
        others = [u for u in meta["tensors"] if u is not t]
        if "alias" in t and rng.random() < 0.5:
            del t["alias"]
        elif others:
            p = rng.randrange(len(meta["tensors"]))
            t["alias"] = {"tensor": p, "offset": rng.choice((0, 0, 64, -64, t["nbytes"])),
                          "kind": rng.choice(("view", "reshape", "reuse", "copy"))}
    else:  # same element count, another shape
        n = 1
        for d in t["shape"]:
            n *= d
        t["shape"] = rng.choice(([n], [1, n], [n, 1], t["shape"][::-1]))


def _layer_mutation(rng: random.Random, meta: dict[str, Any]) -> None:
    layers, tensors = meta["layers"], meta["tensors"]
    lay = rng.choice(layers)
    what = rng.randrange(7)
    if what <= 1:  # rewire a reference, preferring a tensor of the same byte size
        key = rng.choice(("inputs", "outputs")) if what == 0 else "inputs"
        refs = lay[key]
        if refs:
            k = rng.randrange(len(refs))
            cur = tensors[refs[k]] if 0 <= refs[k] < len(tensors) else None
            same = [i for i, t in enumerate(tensors)
                    if cur is not None and t["nbytes"] == cur["nbytes"] and i != refs[k]]
            refs[k] = (rng.choice(same) if same and rng.random() < 0.6
                       else rng.choice((-1, rng.randrange(len(tensors)), len(tensors), 2**63)))
    elif what == 2:  # order
        i, j = rng.randrange(len(layers)), rng.randrange(len(layers))
        layers[i], layers[j] = layers[j], layers[i]
    elif what == 3:
        lay["op"] = rng.choice([x["op"] for x in layers] + ["Conv", "MaxPool", "Gemm",
                                                            "Reorder", "Gather", "Pointwise"])
    elif what == 4:
        lay["tactic"] = rng.choice(("reference", "blas", "packed", "rows", "fused_loop",
                                    "middle", "planes", "direct_nchw16c", "gemm1x1",
                                    "winograd4", "im2col", "depthwise", "parallel_copy",
                                    "strided_copy", "gather", "max_nchw16c", "nope"))
    else:  # an attribute, deep inside if need be
        paths = [p for p in _paths(lay["attrs"]) if p]
        if paths:
            _mutate_value(rng, lay["attrs"], rng.choice(paths))
        else:
            lay["attrs"][rng.choice(("axis", "perm", "in_place", "epilogue"))] = \
                _number_near(rng, 0)


def mutate_structure(data: bytes, rng: random.Random) -> bytes:
    meta, weights = split(data)
    meta = copy.deepcopy(meta)
    for _ in range(rng.choice((1, 1, 1, 2, 3))):
        r = rng.random()
        try:
            if r < 0.35:
                _tensor_mutation(rng, meta)
            elif r < 0.8:
                _layer_mutation(rng, meta)
            else:  # anything anywhere
                paths = [p for p in _paths(meta) if p]
                _mutate_value(rng, meta, rng.choice(paths))
        except (KeyError, IndexError, TypeError, ValueError, AttributeError):
            pass  # an earlier mutation broke what this one expected: the case keeps it
    if rng.random() < 0.7:
        try:
            meta, weights = relay(meta, weights)
        except (OverflowError, MemoryError, TypeError, ValueError):
            pass  # too broken to re-lay: the case tests the layout checks instead
    try:
        text = json.dumps(meta, separators=(",", ":"), allow_nan=True).encode()
    except (TypeError, ValueError):
        text = b"{}"
    return sign(text, weights)


def mutate_bytes(data: bytes, rng: random.Random) -> bytes:
    """Flip, overwrite, insert or cut bytes; mostly re-signed so the change gets parsed."""
    buf = bytearray(data)
    for _ in range(rng.choice((1, 2, 4, 8))):
        r = rng.random()
        pos = rng.randrange(len(buf)) if buf else 0
        if r < 0.5 and buf:
            buf[pos] ^= 1 << rng.randrange(8)
        elif r < 0.7 and buf:
            buf[pos] = rng.choice((0, 0xFF, 0x7F, 0x80, ord("9"), ord("-"), ord("[")))
        elif r < 0.85:
            buf[pos:pos] = bytes(rng.randrange(256) for _ in range(rng.choice((1, 8))))
        else:
            del buf[pos:pos + rng.choice((1, 8, 64))]
    if rng.random() < 0.8 and len(buf) >= HEADER_SIZE:
        h = HEADER.unpack_from(data, 0)
        meta_end = min(max(h[5] + h[6] + (len(buf) - len(data)), HEADER_SIZE), len(buf))
        meta = bytes(buf[HEADER_SIZE:meta_end]).rstrip(b"\0")
        return sign(meta, bytes(buf[align(meta_end):]) if rng.random() < 0.5
                    else data[h[7]:])
    return bytes(buf)


def mutated_loadable(seed: bytes, mode: str, case: int) -> bytes:
    rng = random.Random(f"{mode}:{case}")
    if mode == "structure":
        return mutate_structure(seed, rng)
    if mode == "bytes":
        return mutate_bytes(seed, rng)
    raise ValueError(f"unknown mode {mode!r}")


def random_inputs(module: Any, rng: np.random.Generator) -> list[np.ndarray]:
    """Inputs for a loaded module: small values, and integer inputs that also probe indices
    out of range (a Gather's ids are data, which the kernel must check)."""
    arrays = []
    for io in module.program.inputs:
        t = module.program.tensors[io.tensor]
        if t.dtype.np.kind in "iu":
            arrays.append(rng.integers(-3, 12, size=t.shape).astype(t.dtype.np))
        elif t.dtype.np.kind == "b":
            arrays.append(rng.random(t.shape) < 0.5)
        else:
            arrays.append(rng.standard_normal(t.shape).astype(t.dtype.np))
    return arrays
