"""``pydla partition --dla``: the DLA-capable subgraphs and the rest as separate ONNX files.

Tensor names are kept; ``manifest.json`` lists the parts in execution order with their
device and I/O, so each DLA part builds on a Jetson with ``trtexec --useDLACore=N
--buildDLAStandalone`` and the application runs the parts in order (docs/dla.md).
"""

from __future__ import annotations

import argparse

from pydla.tools.flags import parse_shapes


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "partition", help="split a model into DLA-capable parts and the rest",
        description="Write the DLA-capable subgraphs of an ONNX model and the rest as "
        "separate ONNX files (tensor names kept) and manifest.json, in execution order.")
    p.add_argument("model", nargs="?", help="the ONNX model (or --onnx=)")
    p.add_argument("--onnx", help="the ONNX model (trtexec's spelling)")
    p.add_argument("--dla", action="store_true", required=True,
                   help="partition for the Jetson Orin DLA (its rules: pydla check --dla)")
    precision = p.add_mutually_exclusive_group()
    precision.add_argument("--fp16", dest="precision", action="store_const", const="fp16",
                           help="layers in FP16 (the default)")
    precision.add_argument("--int8", dest="precision", action="store_const", const="int8",
                           help="layers in INT8")
    p.add_argument("--adjust", "--adjustForDLA", dest="adjust", action="store_true",
                   help="first rewrite layers the DLA refuses into ones it runs, with the "
                   "same results (HardSwish, HardSigmoid, ReduceMean over H and W; "
                   "docs/dla.md); --verbose lists each rewrite")
    p.add_argument("--shapes", help="input shapes, name:1x3x224x224[,name2:...]")
    p.add_argument("--output-dir", "--outputDir", dest="output_dir", required=True,
                   help="the folder for the parts and manifest.json")
    p.set_defaults(func=run, precision="fp16")


def run(args: argparse.Namespace) -> int:
    from pydla.dla.partition import partition_model
    from pydla.errors import BuildError

    path = args.onnx or args.model
    if path is None:
        raise BuildError("no model: pass MODEL or --onnx=MODEL")
    shapes, values = parse_shapes(args.shapes)
    manifest, report = partition_model(path, args.output_dir, args.precision, shapes, values,
                                       adjust=args.adjust)
    for part in manifest["parts"]:
        print(f"[pydla] {part['file']}: {part['device']}, inputs {', '.join(part['inputs'])}; "
              f"outputs {', '.join(part['outputs'])}")
    for note in report.notes:
        print(f"[pydla] {note}")
    print(f"[pydla] {report.summary()}")
    print(f"[pydla] wrote {len(manifest['parts'])} parts and manifest.json to {args.output_dir}")
    return 0
