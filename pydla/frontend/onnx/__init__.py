"""ONNX frontend: ModelProto → IR, with shape inference and constant/shape folding."""

from pydla.frontend.onnx import ops as _ops  # noqa: E402,F401,I001  (registers every importer)
from pydla.frontend.onnx.importer import import_model

__all__ = ["import_model"]
