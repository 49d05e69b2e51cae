"""The CPU backend (numpy + numba): pydla's embedded default."""

from pydla.backends.cpu.backend import CpuBackend

__all__ = ["CpuBackend"]
