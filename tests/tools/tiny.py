"""Tiny models and engine files for the tool tests (each builds in milliseconds)."""

from __future__ import annotations

import hashlib
import struct
from pathlib import Path

import numpy as np
import onnx
from onnx import helper

from pydla.builder import build
from pydla.loadable import read_loadable
from pydla.loadable.format import DIGEST_OFFSET, DIGEST_SIZE, HEADER, HEADER_SIZE
from tests.oracle import make_model


def conv_chain() -> onnx.ModelProto:
    """x[1,3,8,8] → conv1+bn1+relu1 → conv2+bn2+relu2 → conv3 → y[1,2,8,8]."""
    rng = np.random.default_rng(0)
    w = {}

    def conv(i: int, cin: int, cout: int, k: int) -> list[onnx.NodeProto]:
        w[f"w{i}"] = (rng.standard_normal((cout, cin, k, k)) * 0.3).astype(np.float32)
        return [helper.make_node("Conv", [f"x{i - 1}" if i > 1 else "x", f"w{i}"], [f"c{i}"],
                                 pads=[k // 2] * 4, name=f"conv{i}")]

    def bn_relu(i: int, c: int) -> list[onnx.NodeProto]:
        w[f"s{i}"] = rng.uniform(0.5, 1.5, c).astype(np.float32)
        w[f"b{i}"] = rng.standard_normal(c).astype(np.float32) * 0.1
        w[f"m{i}"] = rng.standard_normal(c).astype(np.float32) * 0.1
        w[f"v{i}"] = rng.uniform(0.5, 1.5, c).astype(np.float32)
        return [helper.make_node("BatchNormalization", [f"c{i}", f"s{i}", f"b{i}", f"m{i}",
                                                        f"v{i}"], [f"n{i}"], name=f"bn{i}"),
                helper.make_node("Relu", [f"n{i}"], [f"x{i}"], name=f"relu{i}")]

    nodes = conv(1, 3, 4, 3) + bn_relu(1, 4) + conv(2, 4, 4, 3) + bn_relu(2, 4)
    nodes += [helper.make_node("Conv", ["x2", "w3"], ["y"], name="conv3")]
    w["w3"] = (rng.standard_normal((2, 4, 1, 1)) * 0.3).astype(np.float32)
    return make_model(nodes, {"x": (np.float32, [1, 3, 8, 8])}, ["y"], w)


def save_model(model: onnx.ModelProto, folder: Path, name: str = "m") -> tuple[Path, Path]:
    """Write ``name.onnx`` and its loadable ``name.bin``; returns both paths."""
    onnx_path, bin_path = folder / f"{name}.onnx", folder / f"{name}.bin"
    onnx.save(model, onnx_path)
    bin_path.write_bytes(build(model))
    return onnx_path, bin_path


def perturb_weight(data: bytes, layer_name: str, delta: float = 0.5) -> bytes:
    """Add ``delta`` to the first element of the named layer's weight and re-sign the file
    (the digest covers the header before it and everything after the header)."""
    prog = read_loadable(data)
    layer = next(lay for lay in prog.layers if lay.name == layer_name)
    t = prog.tensors[layer.inputs[1]]
    assert t.kind == "weight", t
    weights_offset = HEADER.unpack(data[:HEADER.size])[7]
    out = bytearray(data)
    at = weights_offset + t.offset
    (value,) = struct.unpack_from("<f", out, at)
    struct.pack_into("<f", out, at, value + delta)
    digest = hashlib.sha256(bytes(out[:DIGEST_OFFSET]) + bytes(out[HEADER_SIZE:])).digest()
    out[DIGEST_OFFSET:DIGEST_OFFSET + DIGEST_SIZE] = digest
    return bytes(out)
