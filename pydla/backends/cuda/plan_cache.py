"""On-disk cache of built cuDNN execution plans, so a second load builds none.

Building a cuDNN frontend graph at load costs ~20 ms per convolution (heuristics queries,
then finalizing the plan); deserializing the built plan costs under 1 ms. Each plan is
stored once, in its own file, under a key hashing everything the build depends on:

- the graph (``spec``): shapes, strides and types of every tensor, the convolution's
  geometry, the fused epilogue steps, the heuristics modes and numeric-note filters —
  never a device pointer (the variant pack binds those at execution);
- the environment (``Fingerprint``): GPU name and architecture, driver, cuDNN library and
  frontend versions. Another GPU or library misses the cache and builds (with a note).

Entries are untrusted input: a file is accepted only when its magic, format, length, key
and SHA-256 all check (``decode_entry``), and a payload cuDNN still refuses is rebuilt and
overwritten — a bad entry costs a rebuild, never a crash. The directory is
``$PYDLA_CUDNN_PLAN_CACHE`` (``off`` disables the cache), else
``$XDG_CACHE_HOME/pydla/cudnn-plans`` (default ``~/.cache/pydla/cudnn-plans``); like
CuPy's kernel cache it must be writable only by its user.

Pure Python (no CUDA import): the host-side tests exercise it without a GPU.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from pydla.backends.cuda.layout import Placement
from pydla.dtypes import DType
from pydla.errors import PydlaError

MAGIC = b"PYDLACP\x00"
FORMAT = 1  # bump when the spec or the entry layout changes meaning
# magic, format, payload length, key (SHA-256), payload SHA-256
HEAD = struct.Struct("<8sII32s32s")
MAX_PAYLOAD = 16 << 20  # a serialized plan is a few KB; anything near this is not one
ENV_VAR = "PYDLA_CUDNN_PLAN_CACHE"
_OFF = {"off", "0", "false", "no", "none"}

T = TypeVar("T")


class PlanCacheError(PydlaError):
    """A cache entry failed its checks (the caller rebuilds the plan)."""


@dataclass(frozen=True)
class Fingerprint:
    """What a serialized plan is valid for."""

    gpu: str
    arch: str
    driver: int
    cudnn: int
    frontend: str

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def cache_dir() -> Path | None:
    """The cache directory from the environment (read at each call), None when off."""
    explicit = os.environ.get(ENV_VAR)
    if explicit is not None and explicit.strip().lower() in _OFF:
        return None
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "pydla" / "cudnn-plans"


def plan_key(fingerprint: Fingerprint, spec: Mapping[str, Any]) -> bytes:
    """SHA-256 of the canonical JSON of (format, environment, graph spec)."""
    text = json.dumps({"format": FORMAT, "env": fingerprint.as_dict(), "graph": spec},
                      sort_keys=True, separators=(",", ":"), allow_nan=True)
    return hashlib.sha256(text.encode()).digest()


def encode_entry(key: bytes, payload: bytes) -> bytes:
    if len(key) != 32:
        raise ValueError("a plan key is 32 bytes")
    if len(payload) > MAX_PAYLOAD:
        raise PlanCacheError(f"a serialized plan of {len(payload)} bytes is over the "
                             f"{MAX_PAYLOAD}-byte limit")
    return HEAD.pack(MAGIC, FORMAT, len(payload), key,
                     hashlib.sha256(payload).digest()) + payload


def decode_entry(data: bytes, key: bytes, where: str = "entry") -> bytes:
    """The payload of entry ``data`` stored under ``key``; PlanCacheError (naming the
    field's offset) unless every check passes."""
    if len(data) < HEAD.size:
        raise PlanCacheError(f"{where}: {len(data)} bytes, shorter than the {HEAD.size}-byte "
                             "header")
    magic, fmt, length, stored_key, digest = HEAD.unpack_from(data)
    if magic != MAGIC:
        raise PlanCacheError(f"{where}: bad magic at offset 0")
    if fmt != FORMAT:
        raise PlanCacheError(f"{where}: format {fmt} at offset 8, expected {FORMAT}")
    if length > MAX_PAYLOAD:
        raise PlanCacheError(f"{where}: payload length {length} at offset 12 is over the "
                             f"{MAX_PAYLOAD}-byte limit")
    if len(data) != HEAD.size + length:
        raise PlanCacheError(f"{where}: the header (offset 12) says {length} payload bytes, "
                             f"the file holds {len(data) - HEAD.size}")
    if stored_key != key:
        raise PlanCacheError(f"{where}: the key at offset 16 is another plan's")
    payload = data[HEAD.size:]
    if hashlib.sha256(payload).digest() != digest:
        raise PlanCacheError(f"{where}: payload checksum (offset 48) does not match")
    return payload


@dataclass
class PlanStats:
    cached: int = 0  # plans deserialized from the cache
    built: int = 0  # plans built (cache miss, cache off, or a rejected entry)
    rejected: int = 0  # entries that failed a check or that cuDNN refused
    stored: int = 0  # entries written
    unwritable: int = 0  # entries that could not be written (read-only directory, …)
    restore_seconds: float = 0.0
    build_seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["restore_seconds"] = round(self.restore_seconds, 4)
        out["build_seconds"] = round(self.build_seconds, 4)
        return out


@dataclass
class PlanCache:
    """The cache for one bound program: ``directory`` None means off (every plan is built,
    nothing is written). ``notes`` says why entries were rejected or not written."""

    directory: Path | None
    fingerprint: Fingerprint
    stats: PlanStats = field(default_factory=PlanStats)
    notes: list[str] = field(default_factory=list)

    def path(self, key: bytes) -> Path:
        assert self.directory is not None
        return self.directory / f"{key.hex()}.plan"

    def load(self, key: bytes) -> bytes | None:
        """The payload stored under ``key``, or None (missing, unreadable or rejected)."""
        if self.directory is None:
            return None
        path = self.path(key)
        try:
            with open(path, "rb") as f:
                data = f.read(HEAD.size + MAX_PAYLOAD + 1)
        except OSError:
            return None
        try:
            return decode_entry(data, key, str(path))
        except PlanCacheError as e:
            self.reject(str(e))
            return None

    def reject(self, reason: str) -> None:
        self.stats.rejected += 1
        self.notes.append(f"cuDNN plan cache: {reason}; rebuilt")

    def store(self, key: bytes, payload: bytes) -> None:
        """Write the entry atomically (a concurrent writer of the same key writes the same
        bytes); a directory that cannot be written leaves a note, not an error."""
        if self.directory is None:
            return
        try:
            data = encode_entry(key, payload)
            self.directory.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=".plan.", suffix=".tmp")
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
                os.replace(tmp, self.path(key))
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
        except (OSError, PlanCacheError) as e:
            self.stats.unwritable += 1
            if self.stats.unwritable == 1:  # one note per program, not one per layer
                self.notes.append(f"cuDNN plan cache: cannot write {self.directory} "
                                  f"({type(e).__name__}: {e}); plans are built at each load")
            return
        self.stats.stored += 1

    def load_or_build(self, spec: Mapping[str, Any], restore: Callable[[bytes], T],
                      build: Callable[[], T], serialize: Callable[[T], bytes]) -> T:
        """The plan for ``spec``: ``restore`` the cached entry, or ``build`` it (its errors
        propagate: the graph is unsupported) and store ``serialize`` of it. An entry
        ``restore`` refuses is rebuilt and overwritten."""
        key = plan_key(self.fingerprint, spec)
        blob = self.load(key)
        if blob is not None:
            started = time.perf_counter()
            try:
                plan = restore(blob)
            except Exception as e:  # noqa: BLE001  (cuDNN reports bad data many ways)
                self.reject(f"{self.path(key)} refused by cuDNN ({type(e).__name__}: "
                            f"{str(e)[:160]})")
            else:
                self.stats.cached += 1
                self.stats.restore_seconds += time.perf_counter() - started
                return plan
        started = time.perf_counter()
        plan = build()
        self.stats.built += 1
        self.stats.build_seconds += time.perf_counter() - started
        if self.directory is not None:
            try:
                payload = serialize(plan)
            except Exception as e:  # noqa: BLE001  (an engine cuDNN cannot serialize)
                self.notes.append(f"cuDNN plan cache: plan not serializable "
                                  f"({type(e).__name__}: {str(e)[:160]})")
            else:
                self.store(key, payload)
        return plan


def _desc(p: Placement) -> list[Any]:
    return [list(p.shape), list(p.strides), p.dtype.name]


def conv_spec(x: Placement, w_dims: Sequence[int], w_strides: Sequence[int], w_dtype: DType,
              bias: Placement | None, program: Sequence[Mapping[str, Any]],
              extras: Sequence[Placement], out: Placement,
              geometry: Sequence[Sequence[int]], heuristics: Sequence[str],
              no_tf32: bool) -> dict[str, Any]:
    """Everything the cuDNN convolution graph of ``kernels.cudnn_graphs.conv_graph``
    depends on, no device pointer (``geometry``: pre-padding, post-padding, stride,
    dilation): the ``spec`` of its plan's key."""
    used = {int(r) for step in program for r in step["in"]}
    return {"op": "conv_fprop", "x": _desc(x),
            "w": [list(w_dims), list(w_strides), w_dtype.name],
            "bias": None if bias is None else [bias.size, bias.dtype.name],
            "extras": [_desc(e) if k + 1 in used else None for k, e in enumerate(extras)],
            "program": [dict(step) for step in program], "out": _desc(out),
            "geometry": [list(g) for g in geometry], "heuristics": list(heuristics),
            "no_tf32": bool(no_tf32 and out.dtype is DType.FLOAT32)}


_ENV_FIELDS = ("gpu", "arch", "driver", "cudnn", "frontend")


def tuning_env_note(recorded: Any, here: Fingerprint) -> str | None:
    """A note when the loadable was tuned under another GPU or library (``recorded``: the
    untrusted ``build["cuda_autotune"]["env"]`` of the loadable), else None."""
    if not isinstance(recorded, Mapping):
        return None
    current = here.as_dict()
    differ = []
    for name in _ENV_FIELDS:
        value = recorded.get(name)
        if value is None:
            continue
        shown = str(value)[:80]
        if shown != str(current[name]):
            differ.append(f"{name} {shown} (here {current[name]})")
    if not differ:
        return None
    return ("tuned under another GPU or library: " + ", ".join(differ)
            + "; the recorded tactics are used and their cuDNN plans built here")
