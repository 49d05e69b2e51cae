"""Inputs and outputs in Polygraphy's JSON, so `pydla compare` and `polygraphy run` trade
files: `polygraphy run --save-inputs in.json` → `pydla compare --load-inputs in.json`, and
`pydla compare --save-outputs out.json` → `polygraphy run --load-outputs out.json`.

The files are written and read by Polygraphy's own serializer (``polygraphy.json``: arrays
as base64 ``np.save`` bytes, read back with ``allow_pickle=False``), so the format is
Polygraphy's by construction; Polygraphy is needed only for these flags.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from pydla.tools.flags import FlagError

RUNNER = "pydla-runner"
ORT_RUNNER = "onnxrt-runner"


def _polygraphy(flag: str) -> Any:
    try:
        import polygraphy.json as pjson
    except ImportError:
        raise FlagError(f"{flag} reads and writes Polygraphy's JSON, which needs Polygraphy: "
                        "pip install polygraphy") from None
    return pjson


def load_feeds(path: str, names: Sequence[str]) -> list[dict[str, np.ndarray]]:
    """The feed dicts of a ``polygraphy run --save-inputs`` file, one per iteration."""
    pjson = _polygraphy("--load-inputs")
    try:
        data = pjson.load_json(path, description="input data")
    except OSError:
        raise
    except Exception as e:  # noqa: BLE001  (Polygraphy raises its own types for bad files)
        raise FlagError(f"--load-inputs {path}: not Polygraphy JSON input data ({e})") from None
    if isinstance(data, Mapping):
        data = [data]
    if not isinstance(data, list) or not data or not all(isinstance(d, Mapping) for d in data):
        raise FlagError(f"--load-inputs {path}: expected a list of feed dicts (what "
                        "`polygraphy run --save-inputs` writes)")
    out = []
    for k, feed in enumerate(data):
        unknown = sorted(set(feed) - set(names))
        if unknown:
            raise FlagError(f"--load-inputs {path} iteration {k}: inputs {unknown} are not "
                            f"inputs of the engine ({list(names)})")
        arrays = {}
        for name, value in feed.items():
            value = value.numpy() if hasattr(value, "numpy") and not isinstance(
                value, np.ndarray) else value
            if not isinstance(value, np.ndarray):
                raise FlagError(f"--load-inputs {path} iteration {k}: {name!r} is a "
                                f"{type(value).__name__}, not an array")
            arrays[name] = value
        out.append(arrays)
    return out


def save_feeds(path: str, feeds: Sequence[Mapping[str, np.ndarray]]) -> None:
    _polygraphy("--save-inputs").save_json([dict(f) for f in feeds], path,
                                           description="input data")


def save_results(path: str, runs: Mapping[str, Sequence[Mapping[str, np.ndarray]]]) -> None:
    """``runs``: runner name → the outputs of each iteration, as Polygraphy's RunResults."""
    pjson = _polygraphy("--save-outputs")
    from polygraphy.comparator import RunResults
    from polygraphy.comparator.struct import IterationResult

    results = RunResults()
    for runner, iterations in runs.items():
        results.append((runner, [IterationResult(outputs=dict(o), runner_name=runner)
                                 for o in iterations]))
    pjson.save_json(results, path, description="inference outputs")
