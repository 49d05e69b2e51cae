"""``pydla build``: ONNX → loadable, with trtexec's flags."""

from __future__ import annotations

import argparse
import json
import time

from pydla.dtypes import DType
from pydla.tools.flags import (
    parse_io_formats,
    parse_layer_precisions,
    parse_mem_pools,
    parse_shapes,
)

HARMLESS = ("--buildDLAStandalone", "--allowGPUFallback", "--skipInference", "--noDataTransfers")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "build", help="compile an ONNX model into a loadable",
        description="Compile an ONNX model into a standalone loadable file. Flags follow "
        "trtexec. Accepted and harmless for pydla (the loadable is always standalone and "
        "always runs on the chosen pydla device): " + ", ".join(HARMLESS) + ".")
    p.add_argument("--onnx", required=True, help="ONNX model file")
    p.add_argument("--saveEngine", required=True, help="where to write the loadable")
    p.add_argument("--shapes", help="fix dynamic inputs: name:1x3x224x224,…; a shape "
                   "tensor's value: name:[1,2,3]")
    p.add_argument("--inputIOFormats", help="type:format per input, in order "
                   "(e.g. fp16:chw16); a bare format keeps the model's type")
    p.add_argument("--outputIOFormats", help="type:format per output, in order")
    p.add_argument("--useDLACore", type=int, default=None,
                   help="DLA core the loadable is meant for (selects the virtual device)")
    p.add_argument("--memPoolSize", help="pool:size,… (MiB unless suffixed). workspace caps "
                   "the scratch memory of fused layers (the build fails, naming the size it "
                   "needs, if it is too small); the DLA pools (dlaSRAM, dlaLocalDRAM, "
                   "dlaGlobalDRAM) are recorded in the loadable and mean nothing on the CPU")
    p.add_argument("--builderOptimizationLevel", type=int, default=3, choices=range(0, 6),
                   help="0 = no passes and reference kernels (for bisecting); 1-2 = every "
                   "pass, kernels chosen by heuristics; 3 (default) and up = every pass, "
                   "kernels chosen by timing them on this machine")
    p.add_argument("--timingCacheFile", help="read and update kernel timings here, so "
                   "rebuilds are fast and pick the same tactics")
    p.add_argument("--autocast", choices=("fp16", "bf16"),
                   help="run float32 layers in fp16/bf16 where numerically safe "
                   "(sensitive layers stay fp32; see docs/builder.md)")
    p.add_argument("--layerPrecisions", help="per-layer override for --autocast: "
                   "name:fp32,name:fp16,…")
    p.add_argument("--calibrationInputs", help=".npz of inputs (keyed by name); with "
                   "--autocast, layers whose values overflow the target type stay fp32")
    p.add_argument("--verbose", action="store_true",
                   help="log every build decision (each fusion with the ONNX nodes it consumed)")
    p.add_argument("--exportLayerInfo", help="write layer information (JSON) to this file")
    p.add_argument("--dumpLayerInfo", action="store_true", help="print layer information")
    for flag in HARMLESS:
        p.add_argument(flag, action="store_true", help="accepted; no effect in pydla")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pydla.builder import BuildOptions, build
    from pydla.loadable import read_loadable
    from pydla.plan.precision import load_calibration
    from pydla.tools.layerinfo import layer_info

    shapes, values = parse_shapes(args.shapes)
    options = BuildOptions(
        shapes=shapes, input_values=values,
        input_formats=parse_io_formats(args.inputIOFormats, "--inputIOFormats"),
        output_formats=parse_io_formats(args.outputIOFormats, "--outputIOFormats"),
        dla_core=args.useDLACore, mem_pools=parse_mem_pools(args.memPoolSize),
        opt_level=args.builderOptimizationLevel, verbose=args.verbose,
        timing_cache=args.timingCacheFile,
        autocast=DType.from_name(args.autocast) if args.autocast else None,
        layer_precisions=parse_layer_precisions(args.layerPrecisions),
        calibration=load_calibration(args.calibrationInputs) if args.calibrationInputs else (),
        log=lambda message: print(f"[pydla] [V] {message}"))
    start = time.perf_counter()
    data = build(args.onnx, options)
    with open(args.saveEngine, "wb") as f:
        f.write(data)
    print(f"[pydla] built {args.onnx} -> {args.saveEngine} ({len(data):,} bytes) in "
          f"{time.perf_counter() - start:.2f} s")
    if args.exportLayerInfo or args.dumpLayerInfo:
        info = layer_info(read_loadable(data))
        if args.exportLayerInfo:
            with open(args.exportLayerInfo, "w") as f:
                json.dump(info, f, indent=1)
        if args.dumpLayerInfo:
            print(format_layer_info(info))
    return 0


def format_layer_info(info: dict) -> str:
    """One line per layer, as trtexec's --dumpLayerInfo prints it."""
    lines = []
    for lay in info["layers"]:
        ins = ", ".join(f"{t['name']}{t['shape']}:{t['dtype']}" for t in lay["inputs"]
                        if t and t["format"] != "weight")
        outs = ", ".join(f"{t['name']}{t['shape']}:{t['dtype']}" for t in lay["outputs"])
        extra = f" + {'+'.join(lay['epilogue'])}" if "epilogue" in lay else ""
        lines.append(f"[pydla] Layer {lay['name']} ({lay['type']}{extra}, {lay['precision']}, "
                     f"tactic {lay['tactic']}): {ins} -> {outs}  "
                     f"[from {', '.join(lay['fused_from'])}]")
    m = info["memory"]
    lines.append(f"[pydla] Memory: activations {m['activation_bytes']:,} bytes (naive "
                 f"{m['naive_activation_bytes']:,}), weights {m['weight_bytes']:,}, workspace "
                 f"{m['workspace_bytes']:,}")
    return "\n".join(lines)
