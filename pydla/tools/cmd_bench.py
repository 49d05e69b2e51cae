"""``pydla bench``: trtexec's timing run — throughput, latency percentiles, per-layer profile."""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from pydla.tools.buildflags import add_build_flags, engine_bytes
from pydla.tools.filearg import add_file_args
from pydla.tools.flags import FlagError
from pydla.tools.logs import LOG
from pydla.tools.trex import add_layer_info_flags, write_layer_info


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "bench", help="time a loadable (trtexec's performance summary and profile)",
        description="Run a loadable repeatedly on the CPU device and print trtexec's "
        "performance summary. Give --loadEngine, or --onnx with build flags to build first.")
    add_file_args(p, ("engine", "onnx"), "a loadable, or an ONNX model to build first "
                  "(with the build flags)")
    p.add_argument("--saveEngine", help="with --onnx: also write the built loadable here")
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
    from pydla.engine import LoadedModule
    from pydla.tools import benchreport as rep
    from pydla.tools.benchloop import BenchSettings, run_bench
    from pydla.tools.cmd_run import check_export_path, export_outputs, load_inputs
    from pydla.tools.profiling import StagedRunner
    from pydla.tools.progress import Progress

    _check(args)
    check_export_path(args.exportOutput)
    percentiles = _percentiles(args.percentile)
    data = engine_bytes(args, args.onnx)
    runners = [StagedRunner(LoadedModule(data), stream=i) for i in range(args.infStreams)]
    module = runners[0].module
    prog = module.program
    tensors = [prog.tensors[io.tensor] for io in prog.inputs]
    inputs = load_inputs(args.loadInputs, module.input_names, [t.shape for t in tensors],
                         [t.dtype for t in tensors], args.seed)
    for r in runners:
        r.set_inputs(inputs)

    def info(line: str = "") -> None:
        LOG.info(line)

    info(f"Engine: {args.loadEngine or args.onnx} ({len(prog.layers)} layers, activation arena "
         f"{prog.arena_bytes:,} bytes), {args.infStreams} stream(s), device cpu")
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
    lines, warnings, _ = rep.summary_lines(result, percentiles, used)
    for line in lines[:-1]:
        info(line)
    for line in warnings:
        LOG.warning(line)
    info(lines[-1])
    if args.verbose:
        info()
        info("=== Explanations of the performance metrics ===")
        for line in rep.EXPLANATIONS:
            info(line)
    profile = rep.layer_profile(result.timed, [lay.name for lay in prog.layers])
    if args.dumpProfile:
        info()
        for line in rep.profile_lines(profile, result.timed):
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


def _threads_used(runners: list[Any]) -> str | None:
    """How many threads the CPU runs used (the first stream's; None off the CPU)."""
    gov = getattr(runners[0].module.bound, "governor", None)
    return gov.describe() if gov is not None else None


def _write_json(path: str | None, value: object) -> None:
    if path:
        with open(path, "w") as f:
            json.dump(value, f, indent=1)
        LOG.info(f"wrote {path}")
