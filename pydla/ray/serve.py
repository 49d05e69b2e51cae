"""Ray Serve: one deployment that batches concurrent requests dynamically.

::

    app = pydla.ray.deployment(pydla.ray.put_loadable("model.bin"), max_batch_size=16)
    handle = serve.run(app)                                   # HTTP on :8000/ as well
    probs = handle.predict.remote({"x": image}).result()      # Python: numpy in, numpy out

Requests (single samples or small batches) wait up to ``batch_wait_timeout_s`` for others;
``@serve.batch`` hands the replica up to ``max_batch_size`` requests at once, which are
concatenated, run on the loadable's batch (``BatchRunner``) and split back. The run happens
on one worker thread, so the replica's event loop keeps accepting (and queueing) requests
while a batch computes. HTTP bodies follow ``pydla.ray.codec``'s schema.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
from ray import serve
from ray.serve import metrics
from starlette.requests import Request
from starlette.responses import JSONResponse

from pydla.errors import RequestError
from pydla.ray import codec
from pydla.ray.predictor import LoadableSource, PydlaPredictor

_LATENCY_MS = [0.5, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000]
_BATCH_ROWS = [1, 2, 4, 8, 16, 32, 64, 128, 256]


@dataclass
class _Pending:
    arrays: list[np.ndarray]
    single: bool


class PydlaServer:
    """The replica: a ``PydlaPredictor`` behind ``@serve.batch``."""

    def __init__(self, loadable: LoadableSource, device: str, max_batch_size: int,
                 batch_wait_timeout_s: float, num_threads: int | None) -> None:
        self._predictor = PydlaPredictor(loadable, device, num_threads=num_threads)
        self._runner = self._predictor.runner
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="pydla-serve")
        self._batched.set_max_batch_size(max_batch_size)
        self._batched.set_batch_wait_timeout_s(batch_wait_timeout_s)
        self._fault: BaseException | None = None
        self._queued = 0
        self._counts = {"requests": 0, "batches": 0, "rows": 0, "failed": 0,
                        "largest_batch_requests": 0}
        self._latency = metrics.Histogram(
            "pydla_request_latency_ms", "request latency inside the replica (queue + run)",
            boundaries=_LATENCY_MS)
        self._batch_rows = metrics.Histogram(
            "pydla_batch_rows", "rows per dynamically formed batch", boundaries=_BATCH_ROWS)
        self._batch_requests = metrics.Histogram(
            "pydla_batch_requests", "requests per dynamically formed batch",
            boundaries=_BATCH_ROWS)
        self._queue = metrics.Gauge("pydla_queue_length",
                                    "requests accepted and waiting for a batch")

    # -- the two ways in ---------------------------------------------------------------
    async def __call__(self, request: Request) -> JSONResponse:
        """HTTP: JSON in and out (``pydla.ray.codec``); 400 for a request that does not
        fit the module, 500 if the engine failed."""
        try:
            body = await request.json()
        except ValueError as e:
            return JSONResponse({"error": f"the body is not JSON: {e}"}, status_code=400)
        try:
            inputs, encoding = codec.decode_request(body)
            outputs = await self.predict(inputs)
        except RequestError as e:
            return JSONResponse({"error": str(e)}, status_code=400)
        except Exception as e:  # noqa: BLE001  (the engine's failure, reported to the client)
            return JSONResponse({"error": f"{type(e).__name__}: {e}"}, status_code=500)
        return JSONResponse(codec.encode_response(outputs, encoding))

    async def predict(self, inputs: Mapping[str, Any]) -> dict[str, np.ndarray]:
        """The Python handle API: ``{input: array}`` in, ``{output: array}`` out; an input
        is ``(n, *row)`` rows or one sample without the row dimension."""
        start = time.perf_counter()
        self._counts["requests"] += 1
        try:
            arrays, single = self._runner.check_request(inputs)
        except RequestError:
            self._counts["failed"] += 1
            raise
        self._queued += 1
        self._queue.set(self._queued)
        try:
            return await self._batched(_Pending(arrays, single))
        except BaseException:
            self._counts["failed"] += 1
            raise
        finally:
            self._latency.observe((time.perf_counter() - start) * 1e3)

    @serve.batch(max_batch_size=16, batch_wait_timeout_s=0.005)
    async def _batched(self, requests: list[_Pending]) -> list[dict[str, np.ndarray]]:
        self._queued -= len(requests)
        self._queue.set(self._queued)
        columns = [np.concatenate(parts) if len(parts) > 1 else parts[0]
                   for parts in zip(*(r.arrays for r in requests))]
        rows = len(columns[0]) if columns else 0
        self._counts["batches"] += 1
        self._counts["rows"] += rows
        self._counts["largest_batch_requests"] = max(self._counts["largest_batch_requests"],
                                                    len(requests))
        self._batch_rows.observe(rows)
        self._batch_requests.observe(len(requests))
        loop = asyncio.get_running_loop()
        try:
            outputs = await loop.run_in_executor(self._executor, self._runner.run_arrays,
                                                 columns)
        except Exception as e:  # not a cancellation: the engine failed on valid inputs
            self._fault = e
            raise
        results = []
        offset = 0
        for r in requests:
            n = len(r.arrays[0])
            part = {k: v[offset:offset + n] for k, v in outputs.items()}
            results.append({k: v[0] for k, v in part.items()} if r.single else part)
            offset += n
        return results

    # -- what Serve and operators ask -------------------------------------------------
    def check_health(self) -> None:
        """Serve restarts the replica when this raises: after the engine failed on inputs
        that had passed validation (a dead GPU context, a kernel fault), the module is
        suspect. It runs nothing itself: a probe inference every health period would
        queue behind real batches and cost a core."""
        if self._fault is not None:
            raise RuntimeError(f"the engine failed: {type(self._fault).__name__}: "
                               f"{self._fault}")

    def stats(self) -> dict[str, Any]:
        """Counters since the replica started, and the module's shape."""
        return {**self._counts, "queued": self._queued, "batch": self._runner.batch,
                "num_threads": self._predictor.num_threads,
                "inputs": self._runner.input_names, "outputs": self._runner.output_names}


def deployment(loadable: LoadableSource, *, device: str = "cpu", max_batch_size: int = 16,
               batch_wait_timeout_s: float = 0.005, num_replicas: int = 1,
               ray_actor_options: Mapping[str, Any] | None = None,
               max_ongoing_requests: int | None = None, num_threads: int | None = None,
               name: str = "pydla", **deployment_options: Any) -> serve.Application:
    """A Serve application for ``serve.run``. ``loadable``: bytes, a path readable on every
    node, or an ObjectRef (``put_loadable``). Each replica reserves ``ray_actor_options``
    (default one CPU; give ``{"num_gpus": 1}`` with ``device="cuda"``) and pins its CPU
    threads to its ``num_cpus``. ``max_ongoing_requests`` (default ``4 * max_batch_size``)
    bounds the requests a replica holds; more wait in Serve's router. Other keywords go
    to ``serve.deployment`` as they are (``autoscaling_config``, ``health_check_period_s``,
    ``logging_config={"enable_access_log": False}`` under load, …)."""
    if max_batch_size < 1:
        raise RequestError(f"max_batch_size must be at least 1, not {max_batch_size}")
    if batch_wait_timeout_s < 0:
        raise RequestError(f"batch_wait_timeout_s must be >= 0, not {batch_wait_timeout_s}")
    options = dict(ray_actor_options or {"num_cpus": 1})
    dep = serve.deployment(
        PydlaServer, name=name, num_replicas=num_replicas, ray_actor_options=options,
        max_ongoing_requests=max_ongoing_requests or 4 * max_batch_size, **deployment_options)
    return dep.bind(loadable, device, max_batch_size, batch_wait_timeout_s, num_threads)
