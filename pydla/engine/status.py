"""The one table from pydla's typed errors to cuDLA ``Status`` codes.

``pydla.cudla`` raises ``CudlaError(status_of(e))`` for every failure of a call and reports
``status_of(last failure)`` from ``get_last_error``; task statistics record it too. The
first matching class wins, so subclasses come before their bases.
"""

from __future__ import annotations

from pydla.engine import faults
from pydla.engine.enums import Status
from pydla.errors import IncompatibleLoadableError, LoadableError, PydlaError
from pydla.formats import FormatError

_TABLE: tuple[tuple[type[BaseException], Status], ...] = (
    (IncompatibleLoadableError, Status.ErrorIncompatibleDlaSWVersion),
    (LoadableError, Status.ErrorInvalidModule),
    (faults.InvalidDeviceError, Status.ErrorInvalidDevice),
    (faults.ClosedError, Status.ErrorInvalidDevice),
    (faults.InvalidAddressError, Status.ErrorInvalidAddress),
    (faults.MemoryRegisteredError, Status.ErrorMemoryRegistered),
    (faults.InvalidParamError, Status.ErrorInvalidParam),
    (faults.InvalidResourceError, Status.ErrorInvalidParam),  # a bad stream handle
    (faults.InvalidAttributeError, Status.ErrorInvalidAttribute),
    (faults.UnsupportedOperationError, Status.ErrorUnsupportedOperation),
    (faults.TaskTimeoutError, Status.ErrorDlaErrEngineTimeout),
    (FormatError, Status.ErrorInvalidParam),
    (MemoryError, Status.ErrorOutOfResources),
    (PydlaError, Status.ErrorUnknown),  # e.g. a kernel failing at run time
)


def status_of(error: BaseException | None) -> Status:
    if error is None:
        return Status.Success
    for cls, status in _TABLE:
        if isinstance(error, cls):
            return status
    return Status.ErrorUnknown
