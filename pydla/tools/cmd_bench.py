"""``pydla bench``: trtexec's timing run — throughput, latency percentiles, per-layer profile."""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from typing import Any

from pydla.tools.buildflags import add_build_flags, engine_bytes
from pydla.tools.device_arg import add_device_flag, load_module, resolve_device
from pydla.tools.filearg import add_file_args
from pydla.tools.flags import FlagError
from pydla.tools.logs import LOG
from pydla.tools.perfstats import median
from pydla.tools.profiling import InferenceTrace
from pydla.tools.trex import add_layer_info_flags, write_layer_info


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "bench", help="time a loadable (trtexec's performance summary and profile)",
        description="Run a loadable repeatedly on the CPU device or a GPU (--device) and "
        "print trtexec's performance summary. Give --loadEngine, or --onnx with build flags "
        "to build first (with --device=cuda the build targets cuda). On a GPU every phase is "
        "timed with CUDA events, and --dumpProfile/--exportProfile take per-layer GPU times "
        "from a separate profiling run.")
    add_file_args(p, ("engine", "onnx"), "a loadable, or an ONNX model to build first "
                  "(with the build flags)")
    p.add_argument("--saveEngine", help="with --onnx: also write the built loadable here")
    add_device_flag(p)
    p.add_argument("--iterations", type=int, default=10,
                   help="run at least this many timed queries (default 10)")
    p.add_argument("--warmUp", type=float, default=200.0,
                   help="warm up for this many ms before timing (default 200)")
    p.add_argument("--duration", type=float, default=3.0,
                   help="time for at least this many seconds (default 3)")
    p.add_argument("--avgRuns", type=int, default=None,
                   help="print averages over this many consecutive runs (trace details; "
                   "default 10 with --verbose)")
    p.add_argument("--percentile", default="90,95,99",
                   help="percentiles to report, comma-separated (default 90,95,99)")
    p.add_argument("--infStreams", type=int, default=1,
                   help="run this many streams at once, each on its own bound copy")
    p.add_argument("--loadInputs", help="inputs: .npz keyed by name, or name:file.bin,…")
    p.add_argument("--seed", type=int, default=0, help="seed for random inputs")
    p.add_argument("--dumpProfile", action="store_true", help="print the per-layer profile")
    p.add_argument("--exportProfile", help="write the per-layer profile (JSON) to this file")
    add_layer_info_flags(p)
    p.add_argument("--exportTimes", help="write every timed query's times (JSON) to this file")
    p.add_argument("--exportOutput", help="write the last outputs to this file: .npz keyed "
                   "by tensor name, or .json in trtexec's layout (name, dimensions, values)")
    p.add_argument("--verbose", action="store_true",
                   help="also print trace details and what each metric means")
    add_build_flags(p)
    p.set_defaults(func=run)


def _percentiles(text: str) -> list[float]:
    try:
        values = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise FlagError(f"--percentile={text!r}: expected numbers like 90,95,99") from None
    if not values or any(not 0 <= v <= 100 for v in values):
        raise FlagError(f"--percentile={text!r}: each value must be in [0, 100]")
    return values


def _check(args: argparse.Namespace) -> None:
    if bool(args.loadEngine) == bool(args.onnx):
        raise FlagError("give exactly one of --loadEngine and --onnx")
    for flag, value in (("--iterations", args.iterations), ("--infStreams", args.infStreams)):
        if value < 1:
            raise FlagError(f"{flag}={value}: must be at least 1")
    for flag, value in (("--warmUp", args.warmUp), ("--duration", args.duration)):
        if value < 0:
            raise FlagError(f"{flag}={value}: must not be negative")
    if args.avgRuns is not None and args.avgRuns < 1:
        raise FlagError(f"--avgRuns={args.avgRuns}: must be at least 1")


def run(args: argparse.Namespace) -> int:
    from pydla.tools import benchreport as rep
    from pydla.tools.benchloop import BenchSettings, run_bench
    from pydla.tools.cmd_run import check_export_path, export_outputs, load_inputs
    from pydla.tools.profiling import StagedRunner
    from pydla.tools.progress import Progress

    _check(args)
    check_export_path(args.exportOutput)
    percentiles = _percentiles(args.percentile)
    device = resolve_device(args)
    data = engine_bytes(args, args.onnx)
    profiling = bool(args.dumpProfile or args.exportProfile)
    runners: list[Any]
    if device.is_cuda:
        from pydla.tools.gpu_runner import GpuRunner

        runners = [GpuRunner(load_module(data, device, instrument=profiling), stream=i)
                   for i in range(args.infStreams)]
    else:
        runners = [StagedRunner(load_module(data, device), stream=i)
                   for i in range(args.infStreams)]
    module = runners[0].module
    prog = module.program
    tensors = [prog.tensors[io.tensor] for io in prog.inputs]
    inputs = load_inputs(args.loadInputs, module.input_names, [t.shape for t in tensors],
                         [t.dtype for t in tensors], args.seed)
    for r in runners:
        r.set_inputs(inputs)

    def info(line: str = "") -> None:
        LOG.info(line)

    # the CUDA backend plans its own arena (NHWC copies of rank-4 I/O, its own lifetimes)
    arena = module.bound.arena_bytes if device.is_cuda else prog.arena_bytes
    info(f"Engine: {args.loadEngine or args.onnx} ({len(prog.layers)} layers, activation arena "
         f"{arena:,} bytes), {args.infStreams} stream(s), device {device}")
    if device.is_cuda:
        _note_io_formats(prog)
    settings = BenchSettings(args.iterations, args.warmUp, args.duration)
    origin = time.perf_counter_ns()
    result = run_bench(runners, settings, lambda: Progress("Timing", args.iterations))
    info(f"Warmup completed {len(result.warmup)} queries over {args.warmUp:g} ms")
    info(f"Timing trace has {len(result.timed)} queries over {result.walltime_ns * 1e-9:g} s")
    if args.verbose or args.avgRuns:
        info()
        for line in rep.trace_lines(result.timed, args.avgRuns or 10):
            info(line)
    info()
    used = _threads_used(runners)
    if used:
        info(f"CPU threads: {used}")
    lines, warnings, _ = rep.summary_lines(result, percentiles, used, gpu=device.is_cuda)
    for line in lines[:-1]:
        info(line)
    for line in warnings:
        LOG.warning(line)
    info(lines[-1])
    if args.verbose:
        info()
        info("=== Explanations of the performance metrics ===")
        for line in rep.GPU_EXPLANATIONS if device.is_cuda else rep.EXPLANATIONS:
            info(line)
    profiled = result.timed
    if device.is_cuda and profiling:
        profiled = _gpu_profile_run(runners[0], result.timed)
    profile = rep.layer_profile(profiled, [lay.name for lay in prog.layers])
    if args.dumpProfile:
        info()
        for line in rep.profile_lines(profile, profiled):
            info(line)
    _write_json(args.exportProfile, profile)
    _write_json(args.exportTimes, rep.times_json(result, origin))
    if args.exportLayerInfo:  # with --exportProfile: the two files TREx loads
        write_layer_info(args.exportLayerInfo, prog, args.profilingVerbosity)
        LOG.info(f"wrote {args.exportLayerInfo}")
    if args.exportOutput:
        dtypes = [prog.tensors[io.tensor].dtype for io in prog.outputs]
        size = export_outputs(args.exportOutput, module.output_names, runners[0].outputs(),
                              dtypes)
        info(f"wrote {args.exportOutput} ({size:,} bytes)")
    return 0


# The GPU profiling run replays the profiled graph as many times as the timed run ran
# queries, up to this many (each query decodes its statistics on the host).
PROFILE_QUERIES_MAX = 1000


def _gpu_profile_run(runner: Any, timed: Sequence[InferenceTrace]) -> list[InferenceTrace]:
    """Per-layer GPU times from the module's profiled graph, in a run of its own: its stamp
    kernels (two per layer) would slow the timed queries."""
    queries = max(1, min(len(timed), PROFILE_QUERIES_MAX))
    traces: list[InferenceTrace] = runner.profile(queries)

    def median_ms(values: list[int]) -> float:
        return median(sorted(values)) * 1e-6

    LOG.info(f"Profiling run: {queries} queries of the profiled graph, GPU Compute Time median "
             f"{median_ms([t.compute_ns for t in traces]):g} ms "
             f"({median_ms([t.compute_ns for t in timed]):g} ms unprofiled), inside the "
             f"layers {median_ms([int(t.layer_ns.sum()) for t in traces]):g} ms")
    return traces


def _note_io_formats(prog: Any) -> None:
    """The CUDA backend moves every I/O tensor linear in its own type; say so where the
    loadable's I/O formats (for CPU and DLA buffers) differ."""
    for io in (*prog.inputs, *prog.outputs):
        t = prog.tensors[io.tensor]
        if io.format != "chw" or io.dtype is not t.dtype:
            LOG.info(f"Note: {t.name!r} is {io.dtype.name.lower()}:{io.format} in the "
                     f"loadable; on the GPU it moves as {t.dtype.name.lower()}:chw")


def _threads_used(runners: list[Any]) -> str | None:
    """How many threads the CPU runs used (the first stream's; None off the CPU)."""
    gov = getattr(runners[0].module.bound, "governor", None)
    return gov.describe() if gov is not None else None


def _write_json(path: str | None, value: object) -> None:
    if path:
        with open(path, "w") as f:
            json.dump(value, f, indent=1)
        LOG.info(f"wrote {path}")
