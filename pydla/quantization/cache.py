"""TensorRT calibration caches (``trtexec --calib=FILE``), read and written as TensorRT does.

Plain text: a header ``TRT-<version>-<algorithm>`` (``EntropyCalibration2``,
``MinMaxCalibration``, ``LegacyCalibration``, also ``EntropyCalibration`` when read), then one
``<tensor name>: <scale>`` line per tensor, the scale being the IEEE-754 float32 bit pattern in
8 hex digits, big-endian (``3c010a14`` = 0.00787402 = 1/127), and scale = dynamic range / 127.
TensorRT's version number is major*10000 + minor*100 + patch from 10 on (8.6.1 was written
8601); pydla writes 100300, TensorRT 10.3, the version of JetPack 6.1 for the Orin DLA.
"""

from __future__ import annotations

import os
import re
import struct
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass

from pydla.errors import CalibrationError

WRITTEN_VERSION = "100300"
KNOWN_ALGORITHMS = ("EntropyCalibration2", "EntropyCalibration", "MinMaxCalibration",
                    "LegacyCalibration")
_HEADER = re.compile(r"TRT-(\d+)-([A-Za-z0-9]+)")
_SCALE = re.compile(r"[0-9a-fA-F]{8}")


@dataclass(frozen=True)
class CalibrationCache:
    version: str
    algorithm: str
    # tensor name -> scale (dynamic range / 127); 0 where TensorRT recorded no range.
    scales: dict[str, float]

    def ranges(self) -> dict[str, float]:
        return {name: s * 127.0 for name, s in self.scales.items()}


def scale_hex(scale: float) -> str:
    return struct.pack(">f", scale).hex()


def parse_cache(text: str, path: str = "<cache>") -> CalibrationCache:
    lines = text.splitlines()
    if not lines:
        raise CalibrationError(f"calibration cache {path!r} is empty")
    m = _HEADER.fullmatch(lines[0].strip())
    if not m:
        raise CalibrationError(f"calibration cache {path!r} line 1: {lines[0][:60]!r} is not "
                               "a TRT-<version>-<algorithm> header")
    if m.group(2) not in KNOWN_ALGORITHMS:
        raise CalibrationError(f"calibration cache {path!r} line 1: unknown calibration "
                               f"algorithm {m.group(2)!r} (known: {', '.join(KNOWN_ALGORITHMS)})")
    scales: dict[str, float] = {}
    for number, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        name, sep, value = line.rpartition(":")
        value = value.strip()
        where = f"calibration cache {path!r} line {number}"
        if not sep or not name.strip() or not _SCALE.fullmatch(value):
            raise CalibrationError(f"{where}: {line[:60]!r} is not '<tensor>: <8 hex digits>'")
        name = name.strip()
        scale = struct.unpack(">f", bytes.fromhex(value))[0]
        if not (scale >= 0.0 and scale < float("inf")):
            raise CalibrationError(f"{where}: tensor {name!r} has the scale {scale} "
                                   "(negative, infinite or NaN)")
        if name in scales:
            raise CalibrationError(f"{where}: tensor {name!r} appears twice")
        scales[name] = scale
    return CalibrationCache(m.group(1), m.group(2), scales)


def read_cache(path: str) -> CalibrationCache:
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except UnicodeDecodeError as e:
        raise CalibrationError(f"calibration cache {path!r} is not text: {e}") from e
    return parse_cache(text, path)


def format_cache(algorithm: str, scales: Mapping[str, float]) -> str:
    for name in scales:
        if "\n" in name:
            raise CalibrationError(f"tensor name {name!r} cannot be written to a cache line")
    lines = [f"TRT-{WRITTEN_VERSION}-{algorithm}"]
    lines += [f"{name}: {scale_hex(scale)}" for name, scale in scales.items()]
    return "\n".join(lines) + "\n"


def write_cache(path: str, algorithm: str, scales: Mapping[str, float]) -> None:
    """Write atomically: a temporary file beside ``path``, renamed over it when complete."""
    text = format_cache(algorithm, scales)
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".calib-", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
