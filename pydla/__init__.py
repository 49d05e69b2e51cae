"""pydla: compile ONNX models once into a standalone loadable, run it with a small runtime.

Importing ``pydla`` loads nothing heavy; the builder (``pydla.builder``) needs onnx, the
runtime (``pydla.engine``, ``pydla.cudla``) needs only numpy (and numba).
"""

__version__ = "0.1.0"
