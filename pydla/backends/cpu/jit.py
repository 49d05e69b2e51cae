"""Generated numba kernels, cached on disk so that a loaded module's first run is no compile.

A kernel generator (e.g. the pointwise-program compiler) produces Python source whose
functions are decorated ``@njit(cache=True)``. The source is written once to
``<cache>/k_<hash>.py`` — content-addressed, never rewritten, so numba's own cache index
(keyed by the file's path and timestamp) stays valid across processes — and imported from
there. numba then stores the machine code beside it (or under ``NUMBA_CACHE_DIR``).

The cache directory is, in order: ``PYDLA_KERNEL_CACHE``, ``$NUMBA_CACHE_DIR/pydla-kernels``,
``$XDG_CACHE_HOME/pydla/kernels`` or ``~/.cache/pydla/kernels``; read when a kernel is first
needed, not at import. An unwritable directory falls back to one under the system's temp dir.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
import tempfile
import threading
from pathlib import Path
from types import ModuleType

import numba

# Bump when the code generators change in a way the source text does not show.
GENERATOR_VERSION = "1"

_LOADED: dict[str, ModuleType] = {}
_LOCK = threading.Lock()


def kernel_cache_dir() -> Path:
    explicit = os.environ.get("PYDLA_KERNEL_CACHE")
    if explicit:
        return Path(explicit)
    numba_dir = os.environ.get("NUMBA_CACHE_DIR")
    if numba_dir:
        return Path(numba_dir) / "pydla-kernels"
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "pydla" / "kernels"


def _write_once(directory: Path, name: str, source: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.py"
    if path.exists():
        return path
    # Another process may write the same file at the same time: rename is atomic and the
    # content is identical, so whichever rename lands last is as good as the first.
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{name}.", suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        f.write(source)
    os.replace(tmp, path)
    return path


def load_source(source: str) -> ModuleType:
    """Import generated ``source`` as a module (once per process, from the disk cache)."""
    digest = hashlib.sha256(
        f"{GENERATOR_VERSION}|{numba.__version__}|{sys.version_info[:2]}|{source}".encode()
    ).hexdigest()[:24]
    name = f"k_{digest}"
    with _LOCK:
        module = _LOADED.get(name)
        if module is not None:
            return module
        try:
            path = _write_once(kernel_cache_dir(), name, source)
        except OSError:
            path = _write_once(Path(tempfile.gettempdir()) / "pydla-kernels", name, source)
        qualified = f"pydla_{name}"
        spec = importlib.util.spec_from_file_location(qualified, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        # numba's cache pickles references to the module by name: it must be importable.
        sys.modules[qualified] = module
        spec.loader.exec_module(module)
        _LOADED[name] = module
        return module
