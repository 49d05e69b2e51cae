"""What ``pydla bench`` prints and exports, in trtexec's words and JSON layouts."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from pydla.tools.benchloop import BenchResult
from pydla.tools.perfstats import Summary, median, summarize
from pydla.tools.profiling import InferenceTrace

# trtexec's threshold: enqueue median above 0.8 x compute median means the host cannot keep
# the device busy.
ENQUEUE_BOUND = 0.8
# trtexec warns above 1 % on a GPU with locked clocks; CPU timings on a shared machine are
# noisier, so pydla warns above 10 %.
UNSTABLE_CV_PERCENT = 10.0

EXPLANATIONS = (
    "Total Host Walltime: the host walltime from when the first query (after warmups) starts "
    "to when the last query is completed.",
    "Compute Time: the time to run the layers of a query, from its inputs in the activation "
    "arena to its outputs there.",
    "Total Compute Time: the summation of the Compute Time of all the queries.",
    "Throughput: the number of queries divided by the Total Host Walltime.",
    "Enqueue Time: the host time spent dispatching layers rather than running them (the "
    "Compute Time minus the time inside the layers' kernels).",
    "H2D Latency: the time to convert the input buffers (in their I/O formats) into the "
    "engine's activation arena.",
    "D2H Latency: the time to convert the arena's outputs into the output buffers.",
    "Latency: the summation of H2D Latency, Compute Time and D2H Latency.",
)
# On the GPU (--device=cuda) every phase is timed by CUDA events on the query's stream.
GPU_EXPLANATIONS = (
    EXPLANATIONS[0],
    "GPU Compute Time: the GPU time of a query's task: its inputs copied into the module's "
    "arena, the module's CUDA graph, its outputs copied out.",
    "Total GPU Compute Time: the summation of the GPU Compute Time of all the queries.",
    EXPLANATIONS[3],
    "Enqueue Time: the host time spent queueing a query's copies and task on its stream.",
    "H2D Latency: the GPU time of the input copies from pinned host memory.",
    "D2H Latency: the GPU time of the output copies to pinned host memory.",
    "Latency: the summation of H2D Latency, GPU Compute Time and D2H Latency.",
)

_MS = 1e-6


def compute_name(gpu: bool) -> str:
    """trtexec's name of the compute metric: "GPU Compute Time" on a GPU."""
    return "GPU Compute Time" if gpu else "Compute Time"


def metric_ms(traces: Sequence[InferenceTrace], gpu: bool = False) -> dict[str, list[float]]:
    return {
        "Latency": [t.latency_ns * _MS for t in traces],
        "Enqueue Time": [t.enqueue_ns * _MS for t in traces],
        "H2D Latency": [t.h2d_ns * _MS for t in traces],
        compute_name(gpu): [t.compute_ns * _MS for t in traces],
        "D2H Latency": [t.d2h_ns * _MS for t in traces],
    }


def summary_lines(result: BenchResult, percentiles: Sequence[float], threads: str | None = None,
                  gpu: bool = False) -> tuple[list[str], list[str], dict[str, Summary]]:
    """(info lines, warning lines, summaries by metric) of the performance summary;
    ``threads`` says how many CPU threads the runs used (named in the instability warning);
    ``gpu``: the traces were timed on a GPU (trtexec's GPU names and advice)."""
    timed = result.timed
    wall_s = result.walltime_ns * 1e-9
    stats = {name: summarize(v, percentiles) for name, v in metric_ms(timed, gpu).items()}
    info = ["=== Performance summary ===",
            f"Throughput: {len(timed) / wall_s if wall_s else 0.0:g} qps"]
    info += [f"{name}: {s.format()}" for name, s in stats.items()]
    total_compute = sum(t.compute_ns for t in timed) * 1e-9
    info += [f"Total Host Walltime: {wall_s:g} s",
             f"Total {compute_name(gpu)}: {total_compute:g} s"]
    warn: list[str] = []
    compute = stats[compute_name(gpu)]
    if gpu and stats["Enqueue Time"].median > ENQUEUE_BOUND * compute.median:
        warn += ["* Throughput may be bound by Enqueue Time rather than GPU Compute: the host "
                 "takes about as long to queue a query as the GPU to run it.",
                 "  A larger batch (--shapes) gives the GPU more work per query."]
    elif stats["Enqueue Time"].median > ENQUEUE_BOUND * compute.median:
        warn += ["* Throughput may be bound by Enqueue Time rather than Compute: the host "
                 "spends about as long dispatching layers as running them.",
                 "  Many tiny layers cause this; a larger batch (--shapes) amortizes it."]
    for name, what in (("H2D Latency", "host-to-device transfers for the inputs"),
                       ("D2H Latency", "device-to-host transfers for the outputs")):
        if stats[name].median >= compute.median:
            warn += [f"* Throughput may be bound by {what} rather than Compute.",
                     "  I/O formats that match the engine's (--inputIOFormats/"
                     "--outputIOFormats at build time) make the conversion a plain copy."]
    if compute.cv > UNSTABLE_CV_PERCENT:
        warn += [f"* {'GPU Compute Time' if gpu else 'Compute time'} is unstable, with "
                 f"coefficient of variance = {compute.cv:g}%.",
                 "  Locking the GPU clocks (nvidia-smi -lgc) or a longer --duration may improve "
                 "the stability." if gpu else "  Pinning the process to idle cores (taskset) "
                 "or a longer --duration may improve the stability."]
        if threads:
            warn += [f"  The runs used {threads}; PYDLA_NUM_THREADS=N (or "
                     "pydla.set_num_threads(N)) caps the count, PYDLA_THREAD_POLICY=fixed "
                     "stops it adapting to busy cores."]
    info.append("Explanations of the performance metrics are printed in the verbose logs.")
    return info, warn, stats


def trace_lines(timed: Sequence[InferenceTrace], runs_per_avg: int) -> list[str]:
    """trtexec's trace details: averages over consecutive groups of ``runs_per_avg``."""
    lines = ["=== Trace details ===", f"Trace averages of {runs_per_avg} runs:"]
    for i in range(0, len(timed) - runs_per_avg + 1, runs_per_avg):
        group = timed[i:i + runs_per_avg]
        lines.append(
            f"Average on {runs_per_avg} runs - Compute latency: "
            f"{sum(t.compute_ns for t in group) * _MS / runs_per_avg:g} ms - Host latency: "
            f"{sum(t.latency_ns for t in group) * _MS / runs_per_avg:g} ms (enqueue "
            f"{sum(t.enqueue_ns for t in group) * _MS / runs_per_avg:g} ms)")
    return lines


def layer_profile(timed: Sequence[InferenceTrace], names: Sequence[str]) -> list[dict[str, Any]]:
    """trtexec's --exportProfile entries: ``[{"count": n}, {name, timeMs, averageMs,
    medianMs, percentage}, …]`` in execution order."""
    if not timed:
        return [{"count": 0}]
    ms = np.stack([t.layer_ns for t in timed]).astype(np.float64) * _MS  # [queries, layers]
    totals = ms.sum(axis=0)
    grand = float(totals.sum()) or 1.0
    out: list[dict[str, Any]] = [{"count": len(timed)}]
    for i, name in enumerate(names):
        out.append({"name": name, "timeMs": float(totals[i]),
                    "averageMs": float(totals[i]) / len(timed),
                    "medianMs": median(sorted(ms[:, i].tolist())),
                    "percentage": float(totals[i]) / grand * 100})
    return out


def profile_lines(profile: Sequence[dict[str, Any]], timed: Sequence[InferenceTrace]
                  ) -> list[str]:
    """trtexec's --dumpProfile table."""
    count = profile[0]["count"]
    lines = [f"=== Profile ({count} iterations ) ===",
             f"{'Time(ms)':>11}{'Avg.(ms)':>13}{'Median(ms)':>13}{'Time(%)':>10}   Layer"]
    for e in profile[1:]:
        lines.append(f"{e['timeMs']:11.2f}{e['averageMs']:13.4f}{e['medianMs']:13.4f}"
                     f"{e['percentage']:10.1f}   {e['name']}")
    total = sum(e["timeMs"] for e in profile[1:])
    per_query = sorted(float(t.layer_ns.sum()) * _MS for t in timed)
    lines.append(f"{total:11.2f}{total / max(count, 1):13.4f}{median(per_query):13.4f}"
                 f"{100.0:10.1f}   Total")
    return lines


def times_json(result: BenchResult, origin_ns: int) -> list[dict[str, Any]]:
    """trtexec's --exportTimes records of the timed queries, ms since the run started."""

    def ms(ns: int) -> float:
        return (ns - origin_ns) * _MS

    return [{"stream": t.stream, "startMs": ms(t.start_ns), "endMs": ms(t.end_ns),
             "startH2dMs": ms(t.start_ns), "endH2dMs": ms(t.h2d_end_ns),
             "startComputeMs": ms(t.h2d_end_ns), "endComputeMs": ms(t.compute_end_ns),
             "startD2hMs": ms(t.compute_end_ns), "endD2hMs": ms(t.end_ns),
             "h2dMs": t.h2d_ns * _MS, "computeMs": t.compute_ns * _MS, "d2hMs": t.d2h_ns * _MS,
             "enqueueMs": t.enqueue_ns * _MS, "latencyMs": t.latency_ns * _MS}
            for t in result.timed]
