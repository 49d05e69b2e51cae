"""Steady-state throughput of 1, 2, … ``PydlaPredictor`` actors on one machine.

::

    python examples/ray_actor_throughput.py --loadEngine model.bin --actors 1 2 --rows 256

Ray Data's end-to-end time (examples/ray_batch.py) includes starting the actors and loading
the module in each, which on a cold kernel cache means compiling; this measures what the
actors sustain once loaded. For each actor count it starts that many actors, each reserving
``cores / actors`` CPUs (so each pins that many pydla threads), loads the module in each,
warms each with one batch, then times ``--rows`` random rows split evenly across them, all
in flight at once. It also times the same rows in this process with all cores' threads, as
the single-process reference.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np


def rows_for(loadable: bytes, count: int) -> dict[str, np.ndarray]:
    from pydla.loadable import read_loadable

    program = read_loadable(loadable)
    rng = np.random.default_rng(0)
    out = {}
    for io in program.inputs:
        t = program.tensors[io.tensor]
        out[t.name] = rng.standard_normal((count, *t.shape[1:])).astype(t.dtype.np)
    return out


def actors_throughput(ref: object, actors: int, cpus: float,
                      rows: dict[str, np.ndarray]) -> tuple[float, int]:
    """Rows per second of ``actors`` loaded actors, and the pydla threads each pinned."""
    import ray

    from pydla.ray import PydlaPredictor

    class Predictor(PydlaPredictor):  # defined here, so Ray ships it by value
        def threads(self) -> int:
            return int(self.num_threads)

    remote = ray.remote(num_cpus=cpus)(Predictor)
    pool = [remote.remote(ref) for _ in range(actors)]
    n = len(next(iter(rows.values())))
    parts = [{k: v[i * n // actors:(i + 1) * n // actors] for k, v in rows.items()}
             for i in range(actors)]
    ray.get([a.__call__.remote({k: v[:1] for k, v in p.items()})
             for a, p in zip(pool, parts)])  # loaded and warm
    threads = ray.get(pool[0].threads.remote())
    parts_refs = [ray.put(p) for p in parts]
    start = time.perf_counter()
    ray.get([a.__call__.remote(p) for a, p in zip(pool, parts_refs)])
    seconds = time.perf_counter() - start
    for a in pool:
        ray.kill(a)
    return n / seconds, threads


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--loadEngine", required=True)
    p.add_argument("--actors", type=int, nargs="+", default=[1, 2])
    p.add_argument("--rows", type=int, default=256)
    p.add_argument("--num-cpus", type=int, default=None, help="local cluster size")
    args = p.parse_args(argv)

    import ray

    from pydla.ray import PydlaPredictor, put_loadable

    loadable = Path(args.loadEngine).read_bytes()
    rows = rows_for(loadable, args.rows)
    ray.init(num_cpus=args.num_cpus, include_dashboard=False, log_to_driver=False)
    cores = ray.cluster_resources()["CPU"]
    ref = put_loadable(loadable)
    print(f"{args.rows} rows, {cores:g} CPUs, load average "
          f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    for actors in args.actors:
        rate, threads = actors_throughput(ref, actors, cores / actors, rows)
        print(f"{actors} actor(s) × {cores / actors:g} CPU ({threads} pydla thread(s) each): "
              f"{rate:.1f} rows/s")
    single = PydlaPredictor(loadable, num_threads=int(cores))
    single({k: v[:1] for k, v in rows.items()})
    start = time.perf_counter()
    single(rows)
    print(f"single process, {single.num_threads} thread(s): "
          f"{args.rows / (time.perf_counter() - start):.1f} rows/s "
          f"(load average {os.getloadavg()[0]:.1f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
