"""Build time of ResNet-50 (224×224, batch 1): without autotuning, with autotuning, and again
with the timing cache the autotuned build wrote — with numba's compiled kernels on disk, and
once more in a fresh process with empty kernel caches (the first build after installing or
upgrading pydla, which compiles every kernel it times). Writes
benchmarks/results/build_time.json.

    python benchmarks/build_time.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pydla.builder import BuildOptions, build  # noqa: E402
from pydla.loadable import read_loadable  # noqa: E402
from tests.models.families import resnet50  # noqa: E402


def timed(model, options: BuildOptions) -> tuple[float, bytes]:
    start = time.perf_counter()
    data = build(model, options)
    return time.perf_counter() - start, data


def cold_jit_build_s() -> float:
    """An autotuned build in a fresh process whose kernel caches are empty."""
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "NUMBA_CACHE_DIR": str(Path(tmp) / "numba"),
               "PYDLA_KERNEL_CACHE": str(Path(tmp) / "kernels")}
        done = subprocess.run([sys.executable, __file__, "--inner-cold-jit"], env=env,
                              capture_output=True, text=True, check=True)
        return float(done.stdout.strip().splitlines()[-1])


def main() -> None:
    model, _ = resnet50()
    if sys.argv[1:] == ["--inner-cold-jit"]:
        print(timed(model, BuildOptions())[0])
        return
    results: dict[str, float | int | str] = {"model": "resnet50 224x224 batch 1"}
    with tempfile.TemporaryDirectory() as tmp:
        cache = str(Path(tmp) / "timing.json")
        results["no_autotune_s"], data = timed(model, BuildOptions(opt_level=2))
        results["layers"] = len(read_loadable(data).layers)
        results["autotune_s"], _ = timed(model, BuildOptions(timing_cache=cache))
        results["autotune_with_cache_s"], _ = timed(model, BuildOptions(timing_cache=cache))
    results["autotune_empty_kernel_cache_s"] = cold_jit_build_s()
    for k, v in results.items():
        print(f"{k:24s} {v:.2f}" if isinstance(v, float) else f"{k:24s} {v}")
    out = ROOT / "benchmarks" / "results" / "build_time.json"
    out.write_text(json.dumps(results, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
