"""The CPU backend (numpy + numba): pydla's embedded default."""

from pydla.backends.cpu import kernel_cache

kernel_cache.install()  # before any kernel module is imported

from pydla.backends.cpu.backend import CpuBackend  # noqa: E402

__all__ = ["CpuBackend"]
