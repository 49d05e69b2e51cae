"""numba's cache entries for the backend's kernels are stamped with the whole backend
source (pydla.backends.cpu.kernel_cache): an edit to a shared module invalidates them."""

from __future__ import annotations

import numpy as np
from numba import njit
from numba.core import caching

import pydla.backends.cpu  # noqa: F401  (installs the locators)
from pydla.backends.cpu import kernel_cache
from pydla.backends.cpu.kernels.conv_fast import im2col


def test_backend_kernels_use_the_backend_stamp() -> None:
    locator = im2col.implicit_gemm._cache._impl.locator
    assert isinstance(locator, kernel_cache._BackendStamp)
    assert locator.get_source_stamp() == kernel_cache.source_stamp()


def test_stamp_covers_shared_modules(tmp_path, monkeypatch) -> None:
    """Changing any backend file (here: a copy of the tree) changes the stamp."""
    import shutil

    tree = tmp_path / "cpu"
    shutil.copytree(kernel_cache._BACKEND, tree, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(kernel_cache, "_BACKEND", tree)
    kernel_cache.source_stamp.cache_clear()
    try:
        before = kernel_cache.source_stamp()
        gemm = tree / "kernels" / "conv_fast" / "gemm.py"
        gemm.write_text(gemm.read_text() + "\n# edited\n")
        kernel_cache.source_stamp.cache_clear()
        assert kernel_cache.source_stamp() != before
    finally:
        kernel_cache.source_stamp.cache_clear()


def test_other_code_keeps_numba_locators() -> None:
    def twice(a: np.ndarray) -> np.ndarray:
        return a * 2

    f = njit(cache=True)(twice)
    assert f(np.ones(2)).tolist() == [2.0, 2.0]
    locator = f._cache._impl.locator
    assert not isinstance(locator, kernel_cache._BackendStamp)
    assert kernel_cache._UserProvided in caching.CacheImpl._locator_classes
