"""Parsers of trtexec's flag syntax (shapes, I/O formats, memory pools)."""

from __future__ import annotations

import re

import numpy as np

from pydla.dtypes import DType
from pydla.formats import FORMATS
from pydla.plan.lower import IOFormat

IO_TYPES = ("fp32", "fp16", "bf16", "int8", "uint8", "int32", "int64", "bool")


class FlagError(ValueError):
    """A command-line flag value is malformed; the message names the flag and the value."""


def parse_shapes(text: str | None) -> tuple[dict[str, tuple[int, ...]], dict[str, np.ndarray]]:
    """``name:1x3x224x224,other:2x8`` → shapes; ``name:[1,2,3]`` fixes a shape tensor's value."""
    shapes: dict[str, tuple[int, ...]] = {}
    values: dict[str, np.ndarray] = {}
    if not text:
        return shapes, values
    for item in _split_top(text):
        name, sep, spec = item.rpartition(":")
        name = name.strip("'\"")
        if not sep or not name:
            raise FlagError(f"--shapes entry {item!r} is not name:dims")
        if spec.startswith("["):
            try:
                values[name] = np.array([int(v) for v in spec.strip("[]").split(",") if v],
                                        dtype=np.int64)
            except ValueError:
                raise FlagError(f"--shapes entry {item!r}: values must be integers") from None
            continue
        try:
            dims = tuple(int(d) for d in spec.split("x")) if spec else ()
        except ValueError:
            raise FlagError(f"--shapes entry {item!r}: dims must be integers like 1x3x224x224"
                            ) from None
        if any(d < 0 for d in dims):
            raise FlagError(f"--shapes entry {item!r}: negative dimension")
        shapes[name] = dims
    return shapes, values


def _split_top(text: str) -> list[str]:
    """Split on commas outside brackets."""
    return [p for p in re.split(r",(?![^\[]*\])", text) if p]


def parse_io_formats(text: str | None, flag: str) -> list[IOFormat] | None:
    if not text:
        return None
    out = []
    for item in text.split(","):
        parts = item.split(":")
        if len(parts) == 1:
            dtype, fmt = None, parts[0]
        elif len(parts) == 2:
            if parts[0] not in IO_TYPES:
                raise FlagError(f"{flag}: unknown type {parts[0]!r} in {item!r}; types: "
                                f"{', '.join(IO_TYPES)}")
            dtype, fmt = DType.from_name(parts[0]), parts[1]
        else:
            raise FlagError(f"{flag}: {item!r} is not type:format")
        fmt = fmt.strip().lower()
        if fmt not in FORMATS:
            raise FlagError(f"{flag}: unknown format {fmt!r}; formats: {', '.join(FORMATS)}")
        out.append(IOFormat(dtype, fmt))
    return out


_UNITS = {"": 1 << 20, "b": 1, "k": 1 << 10, "kib": 1 << 10, "kb": 1 << 10, "m": 1 << 20,
          "mib": 1 << 20, "mb": 1 << 20, "g": 1 << 30, "gib": 1 << 30, "gb": 1 << 30}
MEM_POOLS = ("workspace", "dlaSRAM", "dlaLocalDRAM", "dlaGlobalDRAM", "tacticSharedMem")


def parse_mem_pools(text: str | None) -> dict[str, int]:
    """``workspace:1024,dlaSRAM:1`` (MiB unless suffixed) → bytes per pool."""
    pools: dict[str, int] = {}
    if not text:
        return pools
    for item in text.split(","):
        name, sep, size = item.partition(":")
        if not sep or name not in MEM_POOLS:
            raise FlagError(f"--memPoolSize entry {item!r}: pools are {', '.join(MEM_POOLS)}")
        m = re.fullmatch(r"([0-9.]+)\s*([a-zA-Z]*)", size.strip())
        if not m or m.group(2).lower() not in _UNITS:
            raise FlagError(f"--memPoolSize entry {item!r}: size must be a number with an "
                            "optional unit (B, KiB, MiB, GiB)")
        pools[name] = int(float(m.group(1)) * _UNITS[m.group(2).lower()])
    return pools


def parse_size(text: str, flag: str) -> int:
    """``512MiB``, ``64g``, ``1024`` (MiB, as --memPoolSize) → bytes."""
    m = re.fullmatch(r"([0-9.]+)\s*([a-zA-Z]*)", text.strip())
    if not m or m.group(2).lower() not in _UNITS:
        raise FlagError(f"{flag}={text!r}: expected a number with an optional unit (B, KiB, "
                        "MiB, GiB; MiB if none)")
    return int(float(m.group(1)) * _UNITS[m.group(2).lower()])


def parse_layer_precisions(text: str | None) -> dict[str, str]:
    """``conv1:fp32,fc:fp16`` → {layer: precision}; ``*`` wildcards name many layers;
    int8 is for --int8."""
    out: dict[str, str] = {}
    for item in (text or "").split(","):
        if not item:
            continue
        name, sep, prec = item.rpartition(":")
        if not sep or prec not in ("fp32", "fp16", "bf16", "int8"):
            raise FlagError(f"--layerPrecisions entry {item!r}: expected "
                            "name:fp32|fp16|bf16|int8")
        out[name] = prec
    return out
