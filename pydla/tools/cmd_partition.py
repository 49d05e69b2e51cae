"""``pydla partition --dla``: the DLA-capable subgraphs and the rest as separate ONNX files.

Tensor names are kept; ``manifest.json`` lists the parts in execution order with their
device and I/O, so each DLA part builds on a Jetson with ``trtexec --useDLACore=N
--buildDLAStandalone`` and the application runs the parts in order (docs/dla.md).
"""

from __future__ import annotations

import argparse

from pydla.tools.cmd_check import add_dla_model_flags, model_flags
from pydla.tools.logs import LOG


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "partition", help="split a model into DLA-capable parts and the rest",
        description="Write the DLA-capable subgraphs of an ONNX model and the rest as "
        "separate ONNX files (tensor names kept) and manifest.json, in execution order.")
    p.add_argument("--dla", action="store_true", required=True,
                   help="partition for the Jetson Orin DLA (its rules: pydla check --dla)")
    add_dla_model_flags(p)
    p.add_argument("--output-dir", "--outputDir", dest="output_dir", required=True,
                   help="the folder for the parts and manifest.json")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pydla.dla.partition import partition_model

    path, shapes, values = model_flags(args)
    manifest, report = partition_model(path, args.output_dir, args.precision, shapes, values,
                                       adjust=args.adjust)
    for part in manifest["parts"]:
        LOG.info(f"{part['file']}: {part['device']}, inputs {', '.join(part['inputs'])}; "
              f"outputs {', '.join(part['outputs'])}")
    for note in report.notes:
        LOG.info(f"{note}")
    LOG.info(f"{report.summary()}")
    LOG.info(f"wrote {len(manifest['parts'])} parts and manifest.json to {args.output_dir}")
    return 0
