"""Hammer pydla's Ray Serve deployment over HTTP with N concurrent clients.

::

    pip install "pydla[ray]"
    pydla build --onnx model.onnx --shapes=x:8x3x224x224 --saveEngine model.bin
    python examples/ray_serve_client.py --loadEngine model.bin --clients 100 --requests 2000

Without ``--url`` it starts a local Ray cluster and the deployment
(``pydla.ray.deployment``) on a free loopback port, then runs the clients; with ``--url`` it
only runs the clients against a deployment already serving there (``--loadEngine`` then
just tells the input shapes). Clients are asyncio tasks on one aiohttp session, each sending
one sample (raw base64 float32, ``pydla.ray.codec``'s schema) and waiting for its answer
before the next. The run is bounded by ``--requests`` and ``--duration``, and only loopback
URLs are accepted: this is a load generator for your own machine, not for anyone else's.
Prints p50/p90/p99 latency, throughput and failed requests (any non-200 answer, transport
error, or output of the wrong shape).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import numpy as np

LOOPBACK = {"127.0.0.1", "localhost", "::1"}


def sample_request(loadable: bytes, seed: int = 0) -> tuple[bytes, dict[str, tuple]]:
    """One random sample per input (no row dimension) as a JSON body, and the output
    shapes a correct answer has."""
    from pydla.loadable import read_loadable
    from pydla.ray import codec

    program = read_loadable(loadable)
    rng = np.random.default_rng(seed)
    inputs = {}
    for io in program.inputs:
        t = program.tensors[io.tensor]
        inputs[t.name] = rng.standard_normal(t.shape[1:]).astype(t.dtype.np)
    outputs = {program.tensors[io.tensor].name: tuple(program.tensors[io.tensor].shape[1:])
               for io in program.outputs}
    return json.dumps(codec.encode_request(inputs, "base64")).encode(), outputs


async def hammer(url: str, body: bytes, outputs: dict[str, tuple], clients: int,
                 requests: int, duration: float) -> dict[str, Any]:
    import aiohttp

    latencies: list[float] = []
    failures: list[str] = []
    issued = 0
    deadline = time.perf_counter() + duration

    async def client(session: aiohttp.ClientSession) -> None:
        nonlocal issued
        while issued < requests and time.perf_counter() < deadline:
            issued += 1
            start = time.perf_counter()
            try:
                async with session.post(url, data=body,
                                        headers={"content-type": "application/json"}) as r:
                    text = await r.text()
                ok = r.status == 200 and _shapes(json.loads(text)) == outputs
                if not ok:
                    failures.append(f"{r.status}: {text[:200]}")
            except (aiohttp.ClientError, asyncio.TimeoutError, ValueError) as e:
                failures.append(f"{type(e).__name__}: {e}")
                ok = False
            if ok:
                latencies.append(time.perf_counter() - start)

    timeout = aiohttp.ClientTimeout(total=max(60.0, duration))
    connector = aiohttp.TCPConnector(limit=clients)
    start = time.perf_counter()
    async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:
        await asyncio.gather(*(client(session) for _ in range(clients)))
    return {"seconds": time.perf_counter() - start, "latencies": latencies,
            "failures": failures}


def _shapes(body: dict[str, Any]) -> dict[str, tuple]:
    return {k: tuple(v["shape"]) for k, v in body["outputs"].items()}


def report(result: dict[str, Any], clients: int) -> str:
    lat = np.array(result["latencies"]) * 1e3
    done, failed = len(lat), len(result["failures"])
    if not done:
        return f"{clients} clients: no request succeeded; {failed} failed"
    p50, p90, p99 = np.percentile(lat, [50, 90, 99])
    return (f"{clients} clients, {done + failed} requests in {result['seconds']:.1f} s: "
            f"throughput {done / result['seconds']:.1f} req/s, latency p50 {p50:.1f} ms, "
            f"p90 {p90:.1f} ms, p99 {p99:.1f} ms, max {lat.max():.1f} ms; "
            f"failed requests: {failed}")


def start_local(loadable: bytes, num_cpus: int | None, replicas: int, max_batch_size: int,
                batch_wait_timeout_s: float) -> tuple[str, Any]:
    """A local Ray cluster serving the loadable on a free loopback port: (url, handle)."""
    import ray
    from ray import serve

    from pydla.ray import deployment, put_loadable

    ray.init(num_cpus=num_cpus, include_dashboard=False, log_to_driver=False)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    app = deployment(put_loadable(loadable), num_replicas=replicas,
                     max_batch_size=max_batch_size, batch_wait_timeout_s=batch_wait_timeout_s,
                     # One log line per request costs the replica more than a small model.
                     logging_config={"enable_access_log": False})
    handle = serve.run(app, route_prefix="/pydla")
    return f"http://127.0.0.1:{port}/pydla", handle


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--loadEngine", required=True, help="the loadable (for input shapes, and "
                   "to serve when --url is not given)")
    p.add_argument("--url", help="a running deployment (loopback only)")
    p.add_argument("--clients", type=int, default=100)
    p.add_argument("--requests", type=int, default=1000, help="at most this many requests")
    p.add_argument("--duration", type=float, default=60.0, help="at most this many seconds")
    p.add_argument("--warmup", type=int, default=20, help="requests before measuring")
    p.add_argument("--num-cpus", type=int, default=None, help="local cluster size")
    p.add_argument("--replicas", type=int, default=1)
    p.add_argument("--max-batch-size", type=int, default=16)
    p.add_argument("--batch-wait-timeout-s", type=float, default=0.005)
    args = p.parse_args(argv)
    if args.clients < 1 or args.requests < 1 or args.duration <= 0:
        p.error("--clients, --requests and --duration must be positive")

    loadable = Path(args.loadEngine).read_bytes()
    body, outputs = sample_request(loadable)
    handle = None
    if args.url:
        host = urlparse(args.url).hostname
        if host not in LOOPBACK:
            p.error(f"--url must be a loopback address ({sorted(LOOPBACK)}), not {host!r}")
        url = args.url
    else:
        url, handle = start_local(loadable, args.num_cpus, args.replicas, args.max_batch_size,
                                  args.batch_wait_timeout_s)
    print(f"{url}: request body {len(body):,} bytes, outputs {outputs}")
    if args.warmup:
        asyncio.run(hammer(url, body, outputs, min(args.clients, args.warmup), args.warmup,
                           args.duration))
    result = asyncio.run(hammer(url, body, outputs, args.clients, args.requests,
                                args.duration))
    print(report(result, args.clients))
    for failure in result["failures"][:5]:
        print("  failed:", failure)
    if handle is not None:
        stats = handle.stats.remote().result()
        per_batch = stats["requests"] / max(1, stats["batches"])
        print(f"replica: {stats['batches']} batches, {per_batch:.1f} requests per batch "
              f"(largest {stats['largest_batch_requests']}), {stats['num_threads']} "
              f"pydla thread(s), loadable batch {stats['batch']}")
    return 1 if result["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
