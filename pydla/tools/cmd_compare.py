"""``pydla compare``: pydla against onnxruntime on the same inputs, output by output
(Polygraphy's ``run --onnxrt`` comparison), and with ``--layerwise`` layer by layer to name the
first layer that diverges."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from pydla.dtypes import DType, to_compute
from pydla.loadable import LayerInfo, Program
from pydla.tools.buildflags import add_build_flags, engine_bytes
from pydla.tools.device_arg import add_device_flag, load_module, resolve_device
from pydla.tools.errorstats import (
    CHECK_STATS,
    DEFAULT_TOL,
    Comparison,
    PerName,
    Tolerance,
    compare_arrays,
    format_comparison,
    parse_per_name,
)
from pydla.tools.filearg import add_file_args
from pydla.tools.flags import FlagError, parse_shapes
from pydla.tools.logs import LOG

if TYPE_CHECKING:
    import onnx

    from pydla.engine import LoadedModule


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "compare", help="compare pydla with onnxruntime (outputs, or every layer)",
        description="Run the model with pydla and onnxruntime on the same inputs and compare "
        "every output (Polygraphy's statistics and pass rule). Exit code 0 when all pass, 1 "
        "otherwise. --layerwise also compares every layer output that survives in the engine "
        "and names the first layer that diverges, with the ONNX nodes fused into it. "
        "--device=cuda runs pydla's side on a GPU (built with --target=cuda unless "
        "--loadEngine is given).")
    add_file_args(p, ("onnx",), "the ONNX model (the reference)")
    add_device_flag(p)
    p.add_argument("--loadEngine", help="a loadable built from the model (else it is built "
                   "with the build flags)")
    p.add_argument("--loadInputs", help="inputs: .npz keyed by name, or name:file.bin,… "
                   "(default: seeded random)")
    p.add_argument("--load-inputs", dest="load_inputs", metavar="FILE.json",
                   help="inputs in Polygraphy's JSON (`polygraphy run --save-inputs`): each "
                   "iteration is run and compared")
    p.add_argument("--save-inputs", dest="save_inputs", metavar="FILE.json",
                   help="write the inputs used, in Polygraphy's JSON")
    p.add_argument("--save-outputs", dest="save_outputs", metavar="FILE.json",
                   help="write both runners' outputs as Polygraphy's RunResults "
                   "(`polygraphy run --load-outputs` compares against them)")
    p.add_argument("--seed", type=int, default=0, help="seed for random inputs")
    p.add_argument("--atol", help=f"absolute tolerance, and per tensor name:value "
                   f"(default {DEFAULT_TOL:g})")
    p.add_argument("--rtol", help=f"relative tolerance, and per tensor name:value "
                   f"(default {DEFAULT_TOL:g})")
    p.add_argument("--check-error-stat", dest="check_error_stat", default="elemwise",
                   help=f"{'|'.join(CHECK_STATS)}, and per tensor name:stat (default "
                   "elemwise: fail where both abs > atol and rel > rtol)")
    p.add_argument("--layerwise", action="store_true",
                   help="compare every layer output and name the first divergent layer")
    p.add_argument("--layerwise-atol", dest="layerwise_atol",
                   help="--layerwise's absolute tolerance, and per tensor name:value (default "
                   "by the layer's precision: " + _defaults_text() + ")")
    p.add_argument("--layerwise-rtol", dest="layerwise_rtol",
                   help="--layerwise's relative tolerance, and per tensor name:value (default "
                   "as --layerwise-atol)")
    add_build_flags(p)
    p.set_defaults(func=run)


# Layer outputs are compared with onnxruntime's float32 values of the whole model, so a
# reduced-precision layer carries the rounding of every layer before it: fp16 keeps ~3
# significant digits per op, bf16 ~2. The output-level --atol/--rtol (1e-5, Polygraphy's
# default) would mark every such layer FAILED.
LAYERWISE_TOL = {"fp32": 1e-4, "fp16": 2e-2, "bf16": 1e-1, "int8": 1e-1}


def _defaults_text() -> str:
    return ", ".join(f"{p} {t:g}" for p, t in LAYERWISE_TOL.items())


@dataclass(frozen=True)
class Tolerances:
    atol: PerName
    rtol: PerName
    check: PerName

    def of(self, name: str, precision: str | None = None) -> Tolerance:
        """``precision`` given (a layer's): an unset tolerance defaults by precision."""
        by_prec = str(LAYERWISE_TOL.get(precision or "", LAYERWISE_TOL["fp32"]))

        def pick(p: PerName) -> float:
            v = p.get(name)
            return float(by_prec if v == "" else v)

        return Tolerance(pick(self.atol), pick(self.rtol), self.check.get(name))


def run(args: argparse.Namespace) -> int:
    from pydla.builder import load_model
    from pydla.engine.inputs import check_input
    from pydla.tools.cmd_run import load_inputs
    from pydla.tools.layerwise import run_ort
    from pydla.tools.polyjson import ORT_RUNNER, RUNNER

    check = parse_per_name(args.check_error_stat, "--check-error-stat", "elemwise", False)
    tols = Tolerances(parse_per_name(args.atol, "--atol", str(DEFAULT_TOL), True),
                      parse_per_name(args.rtol, "--rtol", str(DEFAULT_TOL), True), check)
    # "" = not given: the layer's precision picks the default (LAYERWISE_TOL).
    layer_tols = Tolerances(parse_per_name(args.layerwise_atol, "--layerwise-atol", "", True),
                            parse_per_name(args.layerwise_rtol, "--layerwise-rtol", "", True),
                            check)
    if args.load_inputs and args.loadInputs:
        raise FlagError("give --loadInputs (.npz or raw files) or --load-inputs (Polygraphy's "
                        "JSON), not both")
    device = resolve_device(args)
    if args.layerwise and device.is_cuda:
        raise FlagError("--layerwise reads every layer's output from the CPU device's arena; "
                        "on a GPU the module runs as one CUDA graph: compare layer by layer "
                        "with --device=cpu")
    model = load_model(args.onnx)
    module = load_module(engine_bytes(args, args.onnx), device)
    prog = module.program
    tensors = [prog.tensors[io.tensor] for io in prog.inputs]
    shapes, dtypes = [t.shape for t in tensors], [t.dtype for t in tensors]
    if args.load_inputs:
        from pydla.tools.polyjson import load_feeds

        iterations = [[check_input(n, feed[n], shape, dt, FlagError) if n in feed else
                       load_inputs(None, [n], [shape], [dt], args.seed)[0]
                       for n, shape, dt in zip(module.input_names, shapes, dtypes)]
                      for feed in load_feeds(args.load_inputs, module.input_names)]
    else:
        iterations = [load_inputs(args.loadInputs, module.input_names, shapes, dtypes,
                                  args.seed)]
    source = args.load_inputs or args.loadInputs or "seeded random"
    on = f" on {device}" if device.is_cuda else ""
    _info(f"Comparing pydla{on} ({args.loadEngine or 'built from ' + args.onnx}) with onnxruntime"
          + (f", {len(iterations)} iterations" if len(iterations) > 1 else ""))
    failed = total = 0
    saved: dict[str, list[dict[str, np.ndarray]]] = {RUNNER: [], ORT_RUNNER: []}
    feeds_used = []
    for k, inputs in enumerate(iterations):
        feeds = _ort_feeds(model, dict(zip(module.input_names, inputs)), args.shapes)
        feeds_used.append(feeds)
        where = f" (iteration {k})" if len(iterations) > 1 else ""
        for name, x in feeds.items():
            _info(f"Input {name}{where} {x.shape} {x.dtype} ({source})")
        if args.layerwise and k == 0:
            from pydla.tools.layerwise import with_all_outputs

            reference = run_ort(with_all_outputs(model), feeds)
            first_reference = reference
        else:
            reference = run_ort(model, feeds)
        got = module.run(inputs)
        saved[RUNNER].append({n: to_compute(y, t.dtype) if t.dtype is DType.BFLOAT16 else y
                              for n, y, t in zip(module.output_names, got,
                                                 (prog.tensors[io.tensor]
                                                  for io in prog.outputs))})
        saved[ORT_RUNNER].append({o.name: reference[o.name] for o in model.graph.output
                                  if o.name in reference})
        for name, y in zip(module.output_names, got):
            if name not in reference:
                raise FlagError(f"the engine's output {name!r} is not an output of "
                                f"{args.onnx}")
            t = next(t for t in prog.tensors if t.name == name)
            c = compare_arrays(to_compute(y, t.dtype), reference[name], tols.of(name))
            for line in format_comparison(f"Output {name}{where}", c, t.dtype.name.lower()):
                _info(line)
            failed += not c.passed
            total += 1
    if args.save_inputs:
        from pydla.tools.polyjson import save_feeds

        save_feeds(args.save_inputs, feeds_used)
        _info(f"Saved inputs to {args.save_inputs} (Polygraphy JSON)")
    if args.save_outputs:
        from pydla.tools.polyjson import save_results

        save_results(args.save_outputs, saved)
        _info(f"Saved outputs of {RUNNER} and {ORT_RUNNER} to {args.save_outputs} "
              "(Polygraphy RunResults)")
    outputs = (f"{failed} of {total} outputs differ beyond tolerance" if failed
               else f"all {total} outputs match")
    if not args.layerwise:
        return _verdict(not failed, outputs)
    first, compared = _layerwise(module, model, iterations[0], first_reference, layer_tols)
    layers = (f"first divergent layer #{first.index} {first.name!r}" if first else
              f"all {compared} layer outputs within layerwise tolerance")
    return _verdict(not failed and first is None, f"{outputs}; {layers}")


def _verdict(passed: bool, text: str) -> int:
    """The one verdict line; the exit status says the same."""
    if passed:
        _info(f"PASSED | {text}")
        return 0
    _error(f"FAILED | {text}")
    return 1


def _ort_feeds(model: onnx.ModelProto, given: dict[str, np.ndarray], shapes: str | None
               ) -> dict[str, np.ndarray]:
    """The engine's inputs, plus shape-tensor inputs whose values --shapes fixed."""
    _, values = parse_shapes(shapes)
    inits = {t.name for t in model.graph.initializer}
    feeds = {}
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        if vi.name in given:
            feeds[vi.name] = given[vi.name]
        elif vi.name in values:
            from onnx import helper

            np_type = helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type)
            feeds[vi.name] = np.asarray(values[vi.name], np_type)
        else:
            raise FlagError(f"model input {vi.name!r} is not an input of the engine; give its "
                            f"value with --shapes={vi.name}:[v0,v1,…]")
    return feeds


def _layerwise(module: LoadedModule, model: onnx.ModelProto, inputs: list[np.ndarray],
               reference: dict[str, np.ndarray], tols: Tolerances
               ) -> tuple[LayerInfo | None, int]:
    """Print every compared layer output and the first layer beyond its tolerance (by its
    precision unless given); returns that layer (None) and how many outputs were compared."""
    from pydla.tools.layerwise import capture_layers, reference_names
    from pydla.tools.progress import Progress

    prog = module.program
    carried = _carried_precision(prog)
    captured = capture_layers(module, inputs)
    names = reference_names(prog, model)
    results: dict[int, Comparison] = {}
    first: LayerInfo | None = None
    rows = []
    with Progress("Comparing layers", len(prog.layers)) as bar:
        for lay in prog.layers:
            for t in lay.outputs:
                name = names.get(t)
                if name not in reference:
                    continue
                c = compare_arrays(captured[t], reference[name], tols.of(name, carried[t]))
                results[t] = c
                rows.append((lay, name, c))
                if not c.passed and first is None:
                    first = lay
            bar.advance()
    _info("")
    _info(f"=== Layerwise: {len(rows)} layer outputs of {len(prog.layers)} layers compared ===")
    width = max([len(lay.name) for lay, _, _ in rows] + [5])
    _info(f"{'#':>4}  {'layer':<{width}}  {'op':<18} {'prec':<5} {'max abs':>10} "
          f"{'max rel':>10} {'cosine':>10} {'atol/rtol':>11}  tensor")
    for lay, name, c in rows:
        mark = "" if c.passed else "  <- FAILED"
        tol = f"{c.tolerance.atol:g}/{c.tolerance.rtol:g}"
        _info(f"{lay.index:>4}  {lay.name:<{width}}  {lay.op:<18} {lay.precision:<5} "
              f"{c.abs.max:>10.3g} {c.rel.max:>10.3g} {c.cosine:>10.6f} {tol:>11}  "
              f"{name}{mark}")
    if first is not None:
        _report_first(prog, first, results)
    return first, len(rows)


def _carried_precision(prog: Program) -> dict[int, str]:
    """Each layer output's loosest precision on any path from the inputs: an fp32 layer fed
    by an fp16 one (the Cast back to fp32) carries fp16's rounding and its tolerance."""
    loosest: dict[int, str] = {}

    def looser(a: str, b: str) -> str:
        return a if LAYERWISE_TOL.get(a, 0.0) >= LAYERWISE_TOL.get(b, 0.0) else b

    for lay in prog.layers:
        prec = lay.precision
        for t in lay.inputs:
            if t in loosest:
                prec = looser(prec, loosest[t])
        for t in lay.outputs:
            loosest[t] = prec
    return loosest


def _report_first(prog: Program, lay: LayerInfo, results: dict[int, Comparison]) -> None:
    _error(f"First divergent layer: #{lay.index} {lay.name!r} ({lay.op}, {lay.precision}, "
           f"tactic {lay.tactic})")
    _error(f"    fused ONNX nodes: {', '.join(lay.fused_from)}")
    for t in lay.outputs:
        if t in results:
            for line in format_comparison(f"output {prog.tensors[t].name}", results[t],
                                          prog.tensors[t].dtype.name.lower()):
                _error("    " + line)
    # Network inputs are fed identically to both sides, so they match by construction.
    network = {io.tensor for io in prog.inputs}
    checked = [(prog.tensors[t].name, results[t].passed if t in results else True)
               for t in lay.inputs if t in results or t in network]
    if checked and all(ok for _, ok in checked):
        names = ", ".join(n for n, _ in checked)
        _error(f"    its inputs ({names}) match onnxruntime: the error starts in this layer")


def _info(line: str) -> None:
    LOG.info(line)


def _error(line: str) -> None:
    LOG.error(line)
