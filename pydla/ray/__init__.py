"""Scale-out on Ray (``pip install "pydla[ray]"``, docs/ray.md).

- ``PydlaPredictor``: a callable class for ``ray.data.Dataset.map_batches``;
- ``build_once`` / ``put_loadable``: build on the driver, ship the bytes by the object store;
- ``deployment``: a Ray Serve application with dynamic batching, HTTP (JSON) and handles.

Importing ``pydla`` never imports this package, and importing this package imports Ray only
when an attribute that needs it is used: ``PydlaPredictor`` runs without Ray.
"""

from __future__ import annotations

import importlib
from typing import Any

_WHERE = {
    "PydlaPredictor": "pydla.ray.predictor",
    "pin_threads": "pydla.ray.predictor",
    "BatchRunner": "pydla.ray.batching",
    "build_once": "pydla.ray.build",
    "put_loadable": "pydla.ray.build",
    "deployment": "pydla.ray.serve",
    "PydlaServer": "pydla.ray.serve",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(importlib.import_module(_WHERE[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
