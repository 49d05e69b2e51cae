"""The one error funnel: every failure inside pydla becomes one of these typed errors.

Each message names what is wrong (file offset, tensor, layer, node, shape). The cuDLA
facade maps them to ``Status`` codes in one place (``pydla.cudla``).
"""

from __future__ import annotations


class PydlaError(Exception):
    """Base class of all pydla errors."""


class ModelImportError(PydlaError):
    """An ONNX model cannot be imported; names the node, op and reason."""

    def __init__(self, reason: str, node: str | None = None, op: str | None = None) -> None:
        self.node = node
        self.op = op
        self.reason = reason
        where = ""
        if node is not None or op is not None:
            where = f"node {node!r} ({op}): "
        super().__init__(where + reason)


class NotConstantError(ModelImportError):
    """A parameter input (shape, axes, pads…) is not known at build time.

    ``value`` names the tensor; when it is a network input, its value can be fixed at build
    time (``--shapes=name:[v0,v1,…]``, ``BuildOptions.input_values``).
    """

    def __init__(self, reason: str, node: str | None, op: str | None, value: str) -> None:
        self.value = value
        super().__init__(reason, node, op)


class ShapeError(ModelImportError):
    """A tensor's shape is missing, dynamic or inconsistent."""


class BuildError(PydlaError):
    """The builder cannot satisfy an option (I/O format, memory pool, precision…)."""


class ResourceLimitError(PydlaError, MemoryError):
    """Building or loading would need more memory than its limit allows; names the tensor
    or arena and the bytes it needs. Refused before allocating; a MemoryError too, so the
    cuDLA facade reports ``ErrorOutOfResources``."""


class LoadableError(PydlaError):
    """A loadable is malformed; ``offset`` is the byte offset in the file where it was found."""

    def __init__(self, offset: int, reason: str) -> None:
        self.offset = offset
        self.reason = reason
        super().__init__(f"invalid loadable at offset {offset}: {reason}")


class IncompatibleLoadableError(LoadableError):
    """A loadable from a newer major format version (or for another target)."""


class KernelError(PydlaError):
    """A kernel failed at bind or run time; names the layer."""

    def __init__(self, layer: str, op: str, reason: str) -> None:
        self.layer = layer
        self.op = op
        self.reason = reason
        super().__init__(f"layer {layer!r} ({op}): {reason}")


class DeviceError(PydlaError):
    """A device cannot serve the command: it is not here (no CUDA driver, GPU or CuPy), or it
    has no kernel for some of a loadable's layers; names the device and what is missing."""


class RequestError(PydlaError):
    """A batch or serving request does not fit the module (pydla.ray): names the tensor,
    shape, dtype or field that is wrong."""


class CalibrationError(BuildError):
    """INT8 calibration cannot proceed: calibration data, a data-loader script or a
    calibration cache is wrong; names the file (and line), tensor, shape or dtype."""
