"""pydla: compile ONNX models once into a standalone loadable, run it with a small runtime.

Importing ``pydla`` loads nothing heavy; the builder (``pydla.builder``) needs onnx, the
runtime (``pydla.engine``, ``pydla.cudla``) needs only numpy (and numba).
"""

import logging
from typing import Any

# A library logs and lets the program choose where (the CLI installs trtexec's format).
logging.getLogger("pydla").addHandler(logging.NullHandler())

__version__ = "0.1.0"
__all__ = ["InferenceSession", "NodeArg", "__version__", "get_num_threads", "set_num_threads"]


def __getattr__(name: str) -> Any:
    # The session pulls in the runtime (numpy, numba): only when asked for.
    if name in ("InferenceSession", "NodeArg"):
        from pydla import session

        return getattr(session, name)
    if name in ("set_num_threads", "get_num_threads"):
        # the CPU engine's thread count (pydla.backends.cpu.threads), for programs bound next
        from pydla.backends.cpu import threads

        return threads.set_num_threads if name == "set_num_threads" else threads.num_threads
    raise AttributeError(f"module 'pydla' has no attribute {name!r}")
