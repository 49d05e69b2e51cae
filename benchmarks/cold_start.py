"""A fresh process loading a saved loadable: import, load and first-run costs.

``python -m benchmarks.cold_start model.pydla feeds.npz`` prints one JSON line: seconds to
import pydla, to load the module, the first run's and a later run's milliseconds. The
first run is where JIT compilation would show; with the on-disk kernel cache it should be
close to the later one. cpu_suite runs this in a subprocess.
"""

from __future__ import annotations

import json
import sys
import time


def measure(loadable: str, feeds_file: str) -> dict[str, float]:
    start = time.perf_counter()
    import numpy as np

    from pydla.engine import LoadedModule

    imported = time.perf_counter()
    with open(loadable, "rb") as f:
        module = LoadedModule(f.read())
    loaded = time.perf_counter()
    with np.load(feeds_file) as data:
        feeds = {k: data[k] for k in data.files}
    inputs = [feeds[name] for name in module.input_names]
    t0 = time.perf_counter()
    module.run(inputs)
    first = time.perf_counter() - t0
    later = []
    for _ in range(3):
        t0 = time.perf_counter()
        module.run(inputs)
        later.append(time.perf_counter() - t0)
    return {"import_s": imported - start, "load_s": loaded - imported,
            "first_run_ms": first * 1e3, "steady_run_ms": float(np.median(later)) * 1e3}


def main() -> None:
    print(json.dumps(measure(sys.argv[1], sys.argv[2])))


if __name__ == "__main__":
    main()
