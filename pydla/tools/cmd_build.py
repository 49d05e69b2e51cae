"""``pydla build``: ONNX → loadable, with trtexec's flags."""

from __future__ import annotations

import argparse
import time

from pydla.tools.flags import parse_io_formats, parse_mem_pools, parse_shapes

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
    p.add_argument("--memPoolSize", help="pool:size,… (MiB unless suffixed); recorded in "
                   "the loadable")
    p.add_argument("--builderOptimizationLevel", type=int, default=3, choices=range(0, 6),
                   help="0 = no optimization (for bisecting), 3 = default")
    p.add_argument("--verbose", action="store_true", help="log every build step")
    for flag in HARMLESS:
        p.add_argument(flag, action="store_true", help="accepted; no effect in pydla")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pydla.builder import BuildOptions, build

    shapes, values = parse_shapes(args.shapes)
    options = BuildOptions(
        shapes=shapes, input_values=values,
        input_formats=parse_io_formats(args.inputIOFormats, "--inputIOFormats"),
        output_formats=parse_io_formats(args.outputIOFormats, "--outputIOFormats"),
        dla_core=args.useDLACore, mem_pools=parse_mem_pools(args.memPoolSize),
        opt_level=args.builderOptimizationLevel)
    start = time.perf_counter()
    data = build(args.onnx, options)
    with open(args.saveEngine, "wb") as f:
        f.write(data)
    print(f"[pydla] built {args.onnx} -> {args.saveEngine} ({len(data):,} bytes) in "
          f"{time.perf_counter() - start:.2f} s")
    return 0
