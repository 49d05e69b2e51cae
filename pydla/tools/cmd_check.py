"""``pydla check --dla`` / ``--target=cuda``: which layers of a model a target can run.

``--dla``: every layer against Orin's DLA rules (``pydla.dla.rules``, TensorRT's "DLA
Supported Layers and Restrictions"); the summary gives the share of layers and FLOPs and
the number of DLA subgraphs a GPU-fallback build would need. ``--target=cuda``: every layer
against pydla's CUDA kernels and the tensor types they compute
(``pydla.backends.cuda.coverage``; no GPU needed). ``--json`` writes the report (schema in
docs/dla.md, the same for both). The exit status is 0 whatever the verdicts: the check
itself succeeded; ``--strict`` exits 1 when a layer cannot run on the target.
"""

from __future__ import annotations

import argparse
import json

from pydla.dla.checker import DlaReport, LayerReport
from pydla.tools.flags import parse_shapes
from pydla.tools.logs import LOG


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "check", help="check a model against a target's layer rules (the Jetson DLA, CUDA)",
        description="Check every layer of an ONNX model against the rules of a target: "
        "--dla (or --target=dla) checks NVIDIA Orin's DLA rules as TensorRT documents them; "
        "--target=cuda checks which layers pydla's CUDA backend has a kernel for (no GPU "
        "needed; the model's own tensor types, precision flags do not apply).")
    target = p.add_mutually_exclusive_group()
    target.add_argument("--dla", dest="target", action="store_const", const="dla",
                        help="check against the Jetson Orin DLA's rules")
    target.add_argument("--target", choices=["dla", "cuda"],
                        help="the target whose rules to check")
    add_dla_model_flags(p)
    p.add_argument("--json", metavar="OUT", help="write the report as JSON to OUT ('-': stdout)")
    p.add_argument("--verbose", action="store_true", help="list every layer, not only refusals")
    p.add_argument("--strict", action="store_true",
                   help="exit 1 when any layer cannot run on the target")
    p.add_argument("--as-built", action="store_true",
                   help="--target=cuda: check the layers a cuda build makes (pointwise chains "
                   "fused into programs and epilogues) instead of the ONNX nodes")
    p.set_defaults(func=run, target=None)


def add_dla_model_flags(p: argparse.ArgumentParser) -> None:
    """The model and how to check it (``check`` and ``partition`` share them)."""
    p.add_argument("model", nargs="?", help="the ONNX model (or --onnx=)")
    p.add_argument("--onnx", help="the ONNX model (trtexec's spelling)")
    precision = p.add_mutually_exclusive_group()
    precision.add_argument("--fp16", dest="precision", action="store_const", const="fp16",
                           help="layers in FP16 (the default)")
    precision.add_argument("--int8", dest="precision", action="store_const", const="int8",
                           help="layers in INT8")
    p.add_argument("--adjust", "--adjustForDLA", dest="adjust", action="store_true",
                   help="first rewrite layers the DLA refuses into ones it runs, with the "
                   "same results (HardSwish, HardSigmoid, ReduceMean over H and W; "
                   "docs/dla.md); --verbose lists each rewrite")
    p.add_argument("--shapes", help="input shapes, name:1x3x224x224[,name2:...] (needed for "
                   "symbolic dims: the DLA has no dynamic shapes)")
    p.set_defaults(precision="fp16")


def model_flags(args: argparse.Namespace) -> tuple[str, dict, dict]:
    """(model path, shapes, input values) from ``add_dla_model_flags``' flags."""
    from pydla.errors import BuildError

    path = args.onnx or args.model
    if path is None:
        raise BuildError("no model: pass MODEL or --onnx=MODEL")
    shapes, values = parse_shapes(args.shapes)
    return path, shapes, values


def run(args: argparse.Namespace) -> int:
    from pydla.errors import BuildError

    if args.target is None:
        raise BuildError("choose the rules to check: --dla (the Jetson Orin DLA) or "
                         "--target=cuda (pydla's CUDA backend)")
    path, shapes, values = model_flags(args)
    report: LayerReport
    if args.as_built and args.target != "cuda":
        raise BuildError("--as-built applies to --target=cuda; the DLA check takes the "
                         "layers before fusion, as TensorRT does")
    if args.target == "cuda":
        from pydla.backends.cuda.coverage import check_cuda_model

        if args.adjust or args.precision == "int8":
            raise BuildError("--adjust and --int8 are DLA check options; --target=cuda checks "
                             "the model's own layers and tensor types")
        report = check_cuda_model(path, shapes=shapes, input_values=values,
                                  built=args.as_built)
    else:
        from pydla.dla import check_model

        report = check_model(path, precision=args.precision, shapes=shapes,
                             input_values=values, adjust=args.adjust)
    if args.json:
        text = json.dumps(report.to_json(), indent=1)
        if args.json == "-":
            print(text)
        else:
            with open(args.json, "w") as f:
                f.write(text + "\n")
    if args.json != "-":
        for line in report_lines(report, path, args.verbose):
            LOG.info(line)
    return 1 if args.strict and report.supported_layers < len(report.layers) else 0


def report_lines(report: LayerReport, path: str, verbose: bool) -> list[str]:
    if isinstance(report, DlaReport):
        from pydla.dla.rules import RULE_SET

        lines = [f"DLA check of {path} against {RULE_SET}, {report.precision}"]
    else:
        lines = [f"CUDA check of {path} against pydla's CUDA kernels"]
    for v in report.layers:
        if v.supported and not verbose:
            continue
        kind = f"{v.op} -> {v.layer_type}" if v.layer_type else v.op
        where = f"DLA subgraph {v.segment}" if v.segment is not None else v.device
        why = f": {v.refusal.reason}" if v.refusal is not None else ""
        lines.append(f"Layer {v.name} ({kind}): {where}{why}")
    lines.extend(report.notes)
    lines.append(report.summary())
    return lines
