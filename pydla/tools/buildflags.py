"""Build flags shared by the commands that build a model before using it (bench, compare,
inspect): the same names and meanings as ``pydla build``."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TYPE_CHECKING

from pydla.dtypes import DType
from pydla.tools.flags import (
    FlagError,
    parse_io_formats,
    parse_layer_precisions,
    parse_shapes,
    parse_size,
)

if TYPE_CHECKING:  # the builder imports onnx, which the runtime-only commands never need
    from pydla.builder import BuildOptions
    from pydla.quantization import Int8Options


def add_build_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("build flags (as for pydla build)")
    g.add_argument("--shapes", help="fix dynamic inputs: name:1x3x224x224,…; a shape tensor's "
                   "value: name:[1,2,3]")
    g.add_argument("--inputIOFormats", help="type:format per input, in order")
    g.add_argument("--outputIOFormats", help="type:format per output, in order")
    g.add_argument("--builderOptimizationLevel", type=int, default=3, choices=range(0, 6),
                   help="0 = no passes, reference kernels (for bisecting); 3 (default) = "
                   "every pass, kernels chosen by timing them")
    g.add_argument("--timingCacheFile", help="read and update kernel timings here")
    g.add_argument("--fp16", action="store_true", help="allow fp16 layers: each region the "
                   "precision policy allows runs in fp16 only where timed faster than fp32 "
                   "(TensorRT's weak typing; docs/builder.md)")
    g.add_argument("--bf16", action="store_true", help="allow bf16 layers, as --fp16")
    g.add_argument("--stronglyTyped", action="store_true", help="every layer in the "
                   "network's own types (excludes --fp16/--bf16/--autocast)")
    g.add_argument("--autocast", choices=("fp16", "bf16"),
                   help="convert float32 layers to fp16/bf16 wherever numerically safe, "
                   "faster or not (for accelerators: DLA, cuda)")
    g.add_argument("--layerPrecisions", help="per-layer override for --fp16/--bf16/"
                   "--autocast: name:fp32,…")
    g.add_argument("--calibrationInputs", help=".npz of inputs for --autocast's range check")
    q = p.add_argument_group("INT8 calibration (docs/int8.md)")
    q.add_argument("--int8", action="store_true",
                   help="run convolutions and matrix products int8, with ranges from "
                   "calibration (--calibData, --data-loader-script) or a cache (--calib)")
    q.add_argument("--calibData", help="an .npz of samples named by network input (first "
                   "axis: samples of the build shape), or a folder of them")
    q.add_argument("--data-loader-script", dest="data_loader_script",
                   help="file.py[:func]: func() (default load_data) returns an iterable of "
                   "feed dicts, as in Polygraphy")
    q.add_argument("--calibAlgo", choices=("entropy", "minmax", "percentile"),
                   default="entropy", help="TensorRT's calibrator: entropy "
                   "(EntropyCalibration2, default), minmax (MinMaxCalibration), percentile "
                   "(LegacyCalibration)")
    q.add_argument("--calibPercentile", type=float, default=99.99,
                   help="the percentile of |x| for --calibAlgo=percentile (default 99.99)")
    q.add_argument("--calib", help="TensorRT calibration cache: read if it exists (no "
                   "calibration), written after calibrating")
    g.add_argument("--target", choices=("cpu", "cuda"), default="cpu",
                   help="the backend the engine is tuned for (default cpu); cuda records the "
                   "GPU architecture and, on a GPU machine, the kernels timed there "
                   "(docs/cuda.md)")
    g.add_argument("--buildMemoryLimit", help="the most memory the build may use (e.g. 64GiB; "
                   "MiB if no unit); default: half of this machine's memory, or "
                   "--memPoolSize=workspace if larger. A model needing more is refused, naming "
                   "the tensor")


def build_options(args: argparse.Namespace, log: Callable[[str], None] | None = None,
                  verbose: bool = False,
                  progress: Callable[[int, int], object] | None = None) -> BuildOptions:
    """BuildOptions from the flags of ``add_build_flags``."""
    from pydla.builder import BuildOptions
    from pydla.plan.precision import load_calibration

    shapes, values = parse_shapes(args.shapes)
    return BuildOptions(
        shapes=shapes, input_values=values,
        input_formats=parse_io_formats(args.inputIOFormats, "--inputIOFormats"),
        output_formats=parse_io_formats(args.outputIOFormats, "--outputIOFormats"),
        opt_level=args.builderOptimizationLevel, verbose=verbose, log=log,
        timing_cache=args.timingCacheFile, progress=progress,
        autocast=DType.from_name(args.autocast) if args.autocast else None,
        allow=tuple(t for t, on in ((DType.FLOAT16, getattr(args, "fp16", False)),
                                    (DType.BFLOAT16, getattr(args, "bf16", False))) if on),
        strongly_typed=getattr(args, "stronglyTyped", False),
        layer_precisions=parse_layer_precisions(args.layerPrecisions),
        calibration=load_calibration(args.calibrationInputs) if args.calibrationInputs else (),
        target=getattr(args, "target", "cpu"), int8=int8_options(args),
        memory_limit=(parse_size(args.buildMemoryLimit, "--buildMemoryLimit")
                      if args.buildMemoryLimit else None))


def int8_options(args: argparse.Namespace) -> Int8Options | None:
    """Int8Options from the INT8 flags; None without --int8 (where they are refused)."""
    from pydla.quantization import Int8Options

    if not getattr(args, "int8", False):
        given = [f for f, key in (("--calibData", "calibData"), ("--calib", "calib"),
                                  ("--data-loader-script", "data_loader_script"))
                 if getattr(args, key, None)]
        if given:
            raise FlagError(f"{given[0]} calibrates for INT8: add --int8")
        return None
    return Int8Options(calib_data=args.calibData, data_loader_script=args.data_loader_script,
                       algorithm=args.calibAlgo, percentile=args.calibPercentile,
                       cache=args.calib)


def engine_bytes(args: argparse.Namespace, onnx_path: str | None) -> bytes:
    """The loadable named by ``--loadEngine``, or ``onnx_path`` built with the build flags
    (and written to ``--saveEngine`` when the command has that flag)."""
    if getattr(args, "loadEngine", None):
        with open(args.loadEngine, "rb") as f:
            return f.read()
    if not onnx_path:
        raise FlagError("give --loadEngine=engine.bin or --onnx=model.onnx")
    from pydla.builder import build
    from pydla.tools.progress import Progress

    with Progress("Autotuning") as bar:
        data = build(onnx_path, build_options(args, progress=bar.report))
    if getattr(args, "saveEngine", None):
        with open(args.saveEngine, "wb") as f:
            f.write(data)
    return data
