"""numba's on-disk cache for the backend's own kernels, keyed by the whole backend source.

numba keys a cached function by its own file's timestamp, but a kernel inlines code and
constants from other modules (the GEMM's blocking, the epilogue interpreter): after an
upgrade, or an edit to a shared module, numba would load stale machine code that no longer
matches its callers — wrong results, not an error. ``install()`` puts locators first in
numba's list that, for files of this package only, stamp entries with a hash of every
source file of the CPU backend and numba's version: any change recompiles everything.
Where the cache lives does not change (beside the module, ``NUMBA_CACHE_DIR``, or numba's
user-wide directory).
"""

from __future__ import annotations

import hashlib
from functools import cache
from pathlib import Path
from typing import Any

import numba
from numba.core import caching

_BACKEND = Path(__file__).resolve().parent
_PACKAGE = _BACKEND.parent.parent


@cache
def source_stamp() -> str:
    digest = hashlib.sha256(numba.__version__.encode())
    for path in sorted(_BACKEND.rglob("*.py")):
        digest.update(str(path.relative_to(_BACKEND)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


class _BackendStamp:
    """Mixin: claim only this package's files; stamp them with the backend's hash."""

    @classmethod
    def from_function(cls, py_func: Any, py_file: str) -> Any:
        try:
            Path(py_file).resolve().relative_to(_PACKAGE)
        except (ValueError, OSError):
            return None
        return super().from_function(py_func, py_file)  # type: ignore[misc]

    def get_source_stamp(self) -> str:
        return source_stamp()


def _numba(name: str) -> Any:
    """A numba caching class by its current name, or its name before numba 0.60."""
    found = getattr(caching, name, None) or getattr(caching, "_" + name, None)
    if found is None:
        raise ImportError(f"numba {numba.__version__} has no numba.core.caching.{name}")
    return found


class _UserProvided(_BackendStamp, _numba("UserProvidedCacheLocator")):  # type: ignore[misc]
    pass


class _InTree(_BackendStamp, _numba("InTreeCacheLocator")):  # type: ignore[misc]
    pass


class _UserWide(_BackendStamp, _numba("UserWideCacheLocator")):  # type: ignore[misc]
    pass


def install() -> None:
    """Idempotent; must run before the kernel modules are imported (their decorators pick
    a locator)."""
    locators = _numba("CacheImpl")._locator_classes
    if _UserProvided not in locators:
        locators[:0] = [_UserProvided, _InTree, _UserWide]
