"""Serialize a planned program into loadable bytes (builder side)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from pydla.loadable.format import (
    ALIGNMENT,
    DIGEST_OFFSET,
    HEADER,
    HEADER_SIZE,
    MAGIC,
    VERSION_MAJOR,
    VERSION_MINOR,
    align,
)


def write_loadable(meta: dict[str, Any],
                   weights: dict[int, np.ndarray] | dict[Any, np.ndarray],
                   profile_weights: Sequence[Mapping[int, np.ndarray]] = ()) -> bytes:
    """``meta`` follows docs/loadable-format.md; ``weights`` maps tensor index → data, and
    ``(k, index)`` → data for a tensor of ``meta["subprograms"][k]`` (one weights section);
    ``profile_weights[k - 1]`` maps the tensors of ``meta["profiles"][k]`` → data.

    Weight offsets (64-byte aligned) are assigned here and written into ``meta``. Weights
    of equal bytes, type and shape are written once (the plans of an optimization profile
    share them all but the few a plan's shapes change).
    """
    entries = [(meta["tensors"][index] if isinstance(index, int)
                else meta["subprograms"][index[0]]["tensors"][index[1]], weights[index], index)
               for index in sorted(weights, key=lambda i: (-1, i) if isinstance(i, int) else i)]
    for k, plan in enumerate(profile_weights, 1):
        entries += [(meta["profiles"][k]["tensors"][i], plan[i], f"profiles[{k}].{i}")
                    for i in sorted(plan)]
    blobs: list[bytes] = []
    placed: dict[tuple[bytes, str, tuple[int, ...]], int] = {}
    cursor = 0
    for t, array, index in entries:
        data = np.ascontiguousarray(array).tobytes()
        if t["kind"] != "weight" or len(data) != t["nbytes"]:
            raise ValueError(f"weight for tensor {index} ({t['name']}) does not match its entry")
        key = (hashlib.sha256(data).digest(), t["dtype"], tuple(t["shape"]))
        if key in placed:
            t["offset"] = placed[key]
            continue
        t["offset"] = placed[key] = cursor
        pad = align(len(data)) - len(data)
        blobs.append(data + b"\0" * pad)
        cursor += len(data) + pad
    weights_blob = b"".join(blobs)
    meta_bytes = json.dumps(meta, separators=(",", ":"), allow_nan=True).encode("utf-8")

    meta_offset = HEADER_SIZE
    weights_offset = align(meta_offset + len(meta_bytes), ALIGNMENT)
    file_size = weights_offset + len(weights_blob)
    head = HEADER.pack(MAGIC, VERSION_MAJOR, VERSION_MINOR, HEADER_SIZE, file_size, meta_offset,
                       len(meta_bytes), weights_offset, len(weights_blob), 0, 0)
    body = (meta_bytes + b"\0" * (weights_offset - meta_offset - len(meta_bytes))
            + weights_blob)
    digest = hashlib.sha256(head + body).digest()
    header = head + digest + b"\0" * (HEADER_SIZE - DIGEST_OFFSET - len(digest))
    return header + body
