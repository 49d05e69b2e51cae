"""The loadable: one standalone file (spec in docs/loadable-format.md).

``write_loadable`` (builder side) and ``read_loadable`` (runtime side, validating) are the
only two places that know the byte layout.
"""

from pydla.loadable.program import (
    InputRange,
    IOTensor,
    LayerInfo,
    Profile,
    ProfileSet,
    Program,
    TensorInfo,
)
from pydla.loadable.reader import read_loadable
from pydla.loadable.writer import write_loadable

__all__ = ["IOTensor", "InputRange", "LayerInfo", "Profile", "ProfileSet", "Program", "TensorInfo",
           "read_loadable", "write_loadable"]
