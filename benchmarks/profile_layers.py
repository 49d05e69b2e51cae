"""Where a model's time goes in pydla: per layer type (and tactic), median of a few runs.

``python -m benchmarks.profile_layers resnet50 --batch 1`` builds the suite model, runs it
with the backend's per-layer hook and prints the time per (op, tactic), slowest first.
"""

from __future__ import annotations

import argparse
import time
from collections import defaultdict

import numpy as np

from benchmarks.models import SUITE
from pydla.builder import BuildOptions, build
from pydla.engine import LoadedModule


def profile(name: str, batch: int, runs: int, autotune: bool, top: int) -> None:
    model, feeds = SUITE[name](batch)
    start = time.perf_counter()
    module = LoadedModule(build(model, BuildOptions(autotune=autotune)))
    print(f"{name} batch {batch}: built and loaded in {time.perf_counter() - start:.1f} s")
    layers = module.program.layers
    per_layer = np.zeros((runs, len(layers)))
    run_index = 0

    def hook(index: int, begin: int, end: int) -> None:
        per_layer[run_index, index] = (end - begin) * 1e-6

    ins = [feeds[k] for k in module.input_names]
    outs = module.run(ins)  # warm-up
    totals = []
    for run_index in range(runs):  # noqa: B007  (the hook reads run_index)
        begin = time.perf_counter()
        module.bound.execute(ins, outs, hook)
        totals.append((time.perf_counter() - begin) * 1e3)
    med = np.median(per_layer, axis=0)
    groups: dict[str, list[float]] = defaultdict(list)
    for layer, ms in zip(layers, med):
        key = f"{layer.op}[{layer.tactic}]"
        if layer.op == "Pointwise":
            key += "(" + ",".join(s["op"] for s in layer.attrs["program"]) + ")"
        elif "epilogue" in layer.attrs:
            key += "+" + ",".join(s["op"] for s in layer.attrs["epilogue"]["program"])
        groups[key].append(float(ms))
    print(f"total {np.median(totals):.2f} ms (layers {med.sum():.2f} ms, {len(layers)} layers)")
    for key, times in sorted(groups.items(), key=lambda kv: -sum(kv[1]))[:top]:
        print(f"  {sum(times):9.3f} ms  {len(times):4d}×  {key}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("models", nargs="+", choices=sorted(SUITE))
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--top", type=int, default=25)
    p.add_argument("--no-autotune", action="store_true")
    args = p.parse_args()
    for name in args.models:
        profile(name, args.batch, args.runs, not args.no_autotune, args.top)


if __name__ == "__main__":
    main()
