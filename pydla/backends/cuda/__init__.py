"""The CUDA backend (``pip install pydla[cuda]``): cuDNN frontend, NVRTC kernels through
CuPy, CUDA graphs through cuda-bindings. Imported only when chosen; the CPU path never
loads it. The planning and code-generation modules (``layout``, ``codegen``) are pure
Python and import without CUDA."""

from __future__ import annotations

from typing import Any

__all__ = ["CudaBackend", "CudaProgram"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from pydla.backends.cuda import backend

        return getattr(backend, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
