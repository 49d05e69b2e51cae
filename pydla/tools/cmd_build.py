"""``pydla build``: ONNX → loadable, with trtexec's flags."""

from __future__ import annotations

import argparse
import dataclasses
import time

from pydla.tools.buildflags import add_build_flags, build_options
from pydla.tools.filearg import add_file_args
from pydla.tools.flags import parse_mem_pools
from pydla.tools.logs import LOG
from pydla.tools.trex import add_layer_info_flags, write_layer_info

HARMLESS = ("--skipInference", "--noDataTransfers")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "build", help="compile an ONNX model into a loadable",
        description="Compile an ONNX model into a standalone loadable file. Flags follow "
        "trtexec. Accepted and harmless for pydla (the loadable is always standalone and "
        "always runs on the chosen pydla device): " + ", ".join(HARMLESS) + ".")
    add_file_args(p, ("onnx",), "the ONNX model")
    p.add_argument("--saveEngine", required=True, help="where to write the loadable")
    add_build_flags(p)
    p.add_argument("--useDLACore", type=int, default=None,
                   help="DLA core the loadable is meant for (0 or 1 on Orin; selects the "
                   "virtual device); every layer must then run on the DLA (pydla check --dla)")
    p.add_argument("--buildDLAStandalone", action="store_true",
                   help="a standalone DLA loadable: every layer on the DLA, DLA I/O formats "
                   "(dla_linear, hwc4, chw16, chw32); needs --useDLACore")
    p.add_argument("--adjustForDLA", "--adjust", dest="adjust_for_dla", action="store_true",
                   help="rewrite layers the DLA refuses into equivalent ones first (HardSwish, "
                   "HardSigmoid, ReduceMean over H and W; --verbose lists them)")
    p.add_argument("--allowGPUFallback", action="store_true",
                   help="layers the DLA cannot run go to the GPU (recorded per layer); not "
                   "with --buildDLAStandalone")
    p.add_argument("--memPoolSize", help="pool:size,… (MiB unless suffixed). workspace caps "
                   "the scratch memory of fused layers (the build fails, naming the size it "
                   "needs, if it is too small); the DLA pools (dlaSRAM, dlaLocalDRAM, "
                   "dlaGlobalDRAM) are recorded in the loadable and mean nothing on the CPU")
    p.add_argument("--verbose", action="store_true",
                   help="log every build decision (each fusion with the ONNX nodes it consumed)")
    add_layer_info_flags(p)
    p.add_argument("--dumpLayerInfo", action="store_true", help="print layer information")
    for flag in HARMLESS:
        p.add_argument(flag, action="store_true", help="accepted; no effect in pydla")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pydla.builder import build
    from pydla.loadable import read_loadable
    from pydla.tools.layerinfo import layer_info
    from pydla.tools.progress import Progress

    start = time.perf_counter()
    with Progress("Autotuning") as bar:
        options = dataclasses.replace(
            build_options(args, log=LOG.debug,
                          verbose=args.verbose, progress=bar.report),
            dla_core=args.useDLACore, dla_standalone=args.buildDLAStandalone,
            gpu_fallback=args.allowGPUFallback, adjust_for_dla=args.adjust_for_dla,
            mem_pools=parse_mem_pools(args.memPoolSize))
        data = build(args.onnx, options)
    with open(args.saveEngine, "wb") as f:
        f.write(data)
    LOG.info(f"built {args.onnx} -> {args.saveEngine} ({len(data):,} bytes) in "
          f"{time.perf_counter() - start:.2f} s")
    if args.exportLayerInfo:
        write_layer_info(args.exportLayerInfo, read_loadable(data), args.profilingVerbosity)
    if args.dumpLayerInfo:
        LOG.info(format_layer_info(layer_info(read_loadable(data))))
    return 0


def format_scales(quant: dict) -> str:
    """``x 0.0392@128, w 0.0012..0.0071 (64 channels), y 0.05@10`` (scale@zero point)."""
    parts = []
    for role, q in quant.items():
        if not isinstance(q, dict):
            parts.append(f"{role} {q}")
            continue
        scale = (f"{q['scale']:.6g}" if "scale" in q else
                 f"{q['scale_min']:.4g}..{q['scale_max']:.4g} ({q['channels']} channels)")
        zp = f"@{q['zero_point']}" if q.get("zero_point") not in (None, 0) else ""
        parts.append(f"{role} {scale}{zp}")
    return ", ".join(parts)


def format_layer_info(info: dict) -> str:
    """One line per layer, as trtexec's --dumpLayerInfo prints it."""
    lines = []
    for lay in info["layers"]:
        ins = ", ".join(f"{t['name']}{t['shape']}:{t['dtype']}" for t in lay["inputs"]
                        if t and t["format"] != "weight")
        outs = ", ".join(f"{t['name']}{t['shape']}:{t['dtype']}" for t in lay["outputs"])
        extra = f" + {'+'.join(lay['epilogue'])}" if "epilogue" in lay else ""
        layout = f", {' -> '.join(lay['layouts'])}" if "layouts" in lay else ""
        device = f", {lay['device']}" if "device" in lay else ""
        lines.append(f"Layer {lay['name']} ({lay['type']}{extra}, {lay['precision']}, "
                     f"tactic {lay['tactic']}{layout}{device}): {ins} -> {outs}  "
                     f"[from {', '.join(lay['fused_from'])}]"
                     + (f"  {info.get('precision_flag', '--int8')} {lay['precision_reason']}"
                        if "precision_reason" in lay else "")
                     + (f"  scales {format_scales(lay['quantization'])}" if "quantization" in lay
                        else ""))
    if "dla" in info:
        d = info["dla"]
        lines.append(f"DLA core {d['core']} ({d['mode']}, {d['precision']}): "
                     f"{d['supported_layers']} of {d['checked_layers']} checked layers on the "
                     f"DLA in {d['subgraphs']} subgraph(s) [{d['rule_set']}]")
    m = info["memory"]
    lines.append(f"Memory: activations {m['activation_bytes']:,} bytes (naive "
                 f"{m['naive_activation_bytes']:,}), weights {m['weight_bytes']:,}, workspace "
                 f"{m['workspace_bytes']:,}")
    return "\n".join(lines)
