"""pydla: compile ONNX models once into a standalone loadable, run it with a small runtime.

Importing ``pydla`` loads nothing heavy; the builder (``pydla.builder``) needs onnx, the
runtime (``pydla.engine``, ``pydla.cudla``) needs only numpy (and numba).
"""

from typing import Any

__version__ = "0.1.0"
__all__ = ["InferenceSession", "NodeArg", "__version__"]


def __getattr__(name: str) -> Any:
    # The session pulls in the runtime (numpy, numba): only when asked for.
    if name in ("InferenceSession", "NodeArg"):
        from pydla import session

        return getattr(session, name)
    raise AttributeError(f"module 'pydla' has no attribute {name!r}")
