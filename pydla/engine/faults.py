"""Typed failures of the runtime engine (device, memory, streams, tasks).

The engine raises these with a message that names the handle, address, size or tensor
involved. The API layers translate them in one place each: ``pydla.cudla`` into ``Status``
codes, ``pydla.runtime``/``pydla.driver`` into ``cudaError_t``/``CUresult``.
"""

from __future__ import annotations

from pydla.errors import PydlaError


class RuntimeFault(PydlaError):
    """Base class: a runtime call was given something it cannot accept, or a task failed."""


class InvalidDeviceError(RuntimeFault):
    """A device index out of range, or a device or module handle that is unknown or closed."""


class InvalidAddressError(RuntimeFault):
    """An address (or address range) that is not memory pydla knows, misaligned, or not
    registered with the device."""


class MemoryRegisteredError(RuntimeFault):
    """The memory is already registered with this device."""


class InvalidParamError(RuntimeFault):
    """A size, count, flag or task field that the call cannot accept."""


class InvalidAttributeError(RuntimeFault):
    """An attribute kind the device does not have."""


class UnsupportedOperationError(RuntimeFault):
    """A valid request that pydla does not (or cannot) perform."""


class InvalidResourceError(RuntimeFault):
    """An unknown or destroyed stream or event handle."""


class MemcpyDirectionError(RuntimeFault):
    """A copy kind that contradicts where the source or destination lives."""


class NotReadyError(RuntimeFault):
    """Work captured by a stream or event has not finished yet."""


class NotInitializedError(RuntimeFault):
    """A driver call before ``cuInit``."""


class TaskTimeoutError(RuntimeFault):
    """A task ran past the device's task timeout; its outputs are undefined."""


class ClosedError(RuntimeFault):
    """A Pythonic-API object used after ``close()``."""
