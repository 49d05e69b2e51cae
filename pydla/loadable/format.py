"""Byte layout constants of the loadable format, shared by the writer and the reader."""

from __future__ import annotations

import struct

MAGIC = b"PYDLALD\x00"
VERSION_MAJOR = 1
# 1: a tensor's alias may be of kind "reshape" (a 1.0 reader refuses it: bad alias kind)
# 2: "subprograms" (Loop bodies) and the Loop layer (a 1.1 reader refuses the op);
#    optimization profiles: "shape_range" and "profiles", a plan per shape set sharing the
#    weights section (a 1.1 reader ignores them and runs profile 0, the top level, alone)
VERSION_MINOR = 2
HEADER_SIZE = 128
ALIGNMENT = 64
DIGEST_OFFSET = 64
DIGEST_SIZE = 32

# magic, major, minor, header_size, file_size, meta_offset, meta_size, weights_offset,
# weights_size, flags, reserved
HEADER = struct.Struct("<8sHHIQQQQQII")
assert HEADER.size == DIGEST_OFFSET

# Field name → byte offset in the header, so the reader can name the offset of a bad field.
HEADER_FIELDS = {
    "magic": 0, "version_major": 8, "version_minor": 10, "header_size": 12, "file_size": 16,
    "meta_offset": 24, "meta_size": 32, "weights_offset": 40, "weights_size": 48,
    "flags": 56, "reserved": 60, "digest": DIGEST_OFFSET,
}

TENSOR_KINDS = ("input", "output", "activation", "weight")
MAX_RANK = 8
# One dimension: int32 as in TensorRT. An empty tensor can carry a huge dimension at
# zero bytes (2**40 × 0), and a kernel looping over it would spin for hours.
MAX_DIM = 2**31 - 1
MAX_TENSORS = 1 << 20
MAX_ARENA_BYTES = 1 << 40
MAX_PROFILES = 4096  # plans of one optimization profile (the builder's limit is lower)


def align(x: int, a: int = ALIGNMENT) -> int:
    return -(-x // a) * a
