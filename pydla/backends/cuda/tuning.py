"""Build-time autotuning for ``target="cuda"``: bind the loadable on the visible GPU, time
every layer's candidate kernels there, and return the choices the builder records in the
loadable (``target["cuda_tactics"]``, layer name → candidate name). A module loaded from
such a loadable builds only the recorded candidates and times nothing.

The builder runs on the GPU machine (the loadable also records the GPU architecture and is
refused by another); where no GPU is visible the loadable records no tactics and the
backend times the candidates when the module is loaded.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from pydla.backends.cuda.backend import CudaBackend, CudaProgram
from pydla.backends.cuda.context import fingerprint
from pydla.loadable import read_loadable


def tune(data: bytes, device: int = 0, reps: int = 10, log: Callable[[str], Any] | None = None,
         progress: Callable[[int, int], Any] | None = None) -> dict[str, Any]:
    """Time the candidates of every layer of loadable ``data`` on GPU ``device``.

    Returns ``{"tactics": {layer: candidate}, "ms": {layer: time of the choice},
    "seconds": wall time, "timed_layers": layers with more than one candidate, "env": the
    GPU and library versions tuned under}``. The cuDNN plans built go to the plan cache,
    so the first load on this GPU builds none.
    """
    started = time.perf_counter()
    program = read_loadable(data)
    backend = CudaBackend(device=device, autotune=True, graph=False, log=log, recorded=False,
                          reps=reps, tune_only=True, progress=progress)
    bound = CudaProgram(program, backend)
    try:
        tactics = {c.layer: c.tactic for c in bound.choices}
        ms = {c.layer: round(c.ms, 5) for c in bound.choices if c.ms is not None}
        timed = sum(c.source == "timed" for c in bound.choices)
    finally:
        bound.close()
    return {"tactics": tactics, "ms": ms, "seconds": round(time.perf_counter() - started, 3),
            "timed_layers": timed, "env": fingerprint(device).as_dict()}
