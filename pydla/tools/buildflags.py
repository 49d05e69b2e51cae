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
from pydla.tools.logs import LOG

if TYPE_CHECKING:  # the builder imports onnx, which the runtime-only commands never need
    from pydla.builder import BuildOptions
    from pydla.quantization import Int8Options


def add_build_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("build flags (as for pydla build)")
    g.add_argument("--shapes", help="fix dynamic inputs: name:1x3x224x224,…; a shape tensor's "
                   "value: name:[1,2,3]")
    for flag, which in (("--minShapes", "smallest"), ("--optShapes", "opt (profile 0, the "
                        "shapes cuDLA sees)"), ("--maxShapes", "largest")):
        g.add_argument(flag, help=f"optimization profile, the {which} shapes: "
                       "name:1x3x224x224,…; with the other two, one loadable runs every shape "
                       "in range (docs/builder.md, 'Optimization profiles')")
    g.add_argument("--maxProfilePlans", type=int, default=64, help="the most plans a profile "
                   "whose batch cannot be padded may take (one per shape; default 64)")
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
    g.add_argument("--best", action="store_true", help="enable every precision and let the "
                   "builder choose per layer: fp16 and bf16 as --fp16 --bf16; INT8 as --int8 "
                   "when calibration is given (--calibData, --data-loader-script, --calib), "
                   "else left out with a warning (trtexec's placeholder scales would give "
                   "wrong answers)")
    g.add_argument("--noTF32", action="store_true", help="float32 layers compute in strict "
                   "FP32 on a GPU (cuDNN without TF32 tensor cores; --target=cuda); recorded "
                   "in the loadable, no effect on the CPU, which has no TF32")
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
                  progress: Callable[..., object] | None = None) -> BuildOptions:
    """BuildOptions from the flags of ``add_build_flags``."""
    from pydla.builder import BuildOptions
    from pydla.plan.precision import load_calibration

    shapes, values = parse_shapes(args.shapes)
    profile = profile_shapes(args)
    int8, allowed = best_precisions(args)
    return BuildOptions(
        shapes=shapes, input_values=values,
        input_formats=parse_io_formats(args.inputIOFormats, "--inputIOFormats"),
        output_formats=parse_io_formats(args.outputIOFormats, "--outputIOFormats"),
        opt_level=args.builderOptimizationLevel, verbose=verbose, log=log,
        timing_cache=args.timingCacheFile, progress=progress,
        autocast=DType.from_name(args.autocast) if args.autocast else None,
        allow=allowed, strongly_typed=getattr(args, "stronglyTyped", False),
        layer_precisions=parse_layer_precisions(args.layerPrecisions),
        calibration=load_calibration(args.calibrationInputs) if args.calibrationInputs else (),
        target=getattr(args, "target", "cpu"), int8=int8,
        no_tf32=getattr(args, "noTF32", False),
        memory_limit=(parse_size(args.buildMemoryLimit, "--buildMemoryLimit")
                      if args.buildMemoryLimit else None),
        min_shapes=profile["minShapes"], opt_shapes=profile["optShapes"],
        max_shapes=profile["maxShapes"],
        max_profile_plans=getattr(args, "maxProfilePlans", 64))


def profile_shapes(args: argparse.Namespace) -> dict[str, dict[str, tuple[int, ...]]]:
    """--minShapes/--optShapes/--maxShapes in trtexec's syntax (as --shapes, shapes only)."""
    out = {}
    for key in ("minShapes", "optShapes", "maxShapes"):
        try:
            shapes, values = parse_shapes(getattr(args, key, None))
        except FlagError as e:
            raise FlagError(str(e).replace("--shapes", f"--{key}", 1)) from None
        if values:
            raise FlagError(f"--{key} takes shapes (name:1x3x224x224), not a shape "
                            f"tensor's values ({sorted(values)})")
        out[key] = shapes
    return out


def best_precisions(args: argparse.Namespace
                    ) -> tuple[Int8Options | None, tuple[DType, ...]]:
    """(INT8 options, allowed reduced types) from --int8/--fp16/--bf16 and --best.

    --best is trtexec's "all precisions": with calibration it is --int8 (the INT8 policy
    picks int8 or float32 per layer: pydla's builder does not mix INT8 with fp16/bf16 weak
    typing, so the layers INT8 does not take stay float32); without calibration trtexec uses
    placeholder scales, whose int8 results are wrong, so pydla leaves INT8 out, says so, and
    builds as --fp16 --bf16 (each region timed in fp32, fp16 and bf16)."""
    fp16, bf16 = getattr(args, "fp16", False), getattr(args, "bf16", False)
    best = getattr(args, "best", False)
    if best and getattr(args, "stronglyTyped", False):
        raise FlagError("--best lets the builder choose each layer's precision; "
                        "--stronglyTyped keeps the network's own types: give one of them")
    if best and getattr(args, "autocast", None):
        raise FlagError("--best lets the builder choose each layer's precision; --autocast "
                        "converts the network: give one of them")
    calibrated = any(getattr(args, key, None) for key in ("calibData", "data_loader_script",
                                                         "calib"))
    if best and calibrated:
        LOG.info("--best: INT8 from the calibration given; layers INT8 does not take stay "
                 "fp32 (pydla does not mix INT8 with fp16/bf16)")
        return int8_options(args, force=True), ()
    if best and not getattr(args, "int8", False):
        LOG.warning("--best: no calibration data (--calibData, --data-loader-script or "
                    "--calib), so INT8 is left out rather than run with placeholder scales; "
                    "layers may run fp16 or bf16 where timed faster than fp32")
        fp16 = bf16 = True
    allowed = tuple(t for t, on in ((DType.FLOAT16, fp16), (DType.BFLOAT16, bf16)) if on)
    return int8_options(args), allowed


def int8_options(args: argparse.Namespace, force: bool = False) -> Int8Options | None:
    """Int8Options from the INT8 flags; None without --int8 (where they are refused) unless
    ``force`` (--best with calibration)."""
    from pydla.quantization import Int8Options

    if not (force or getattr(args, "int8", False)):
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
