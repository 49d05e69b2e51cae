"""``pydla inspect``: what is in an ONNX model (and what the builder would do with it) or in a
loadable (I/O, layers, fusions, precisions, tactics, memory) — text, or ``--json``."""

from __future__ import annotations

import argparse
import json
from typing import Any

from pydla.tools.buildflags import add_build_flags, build_options
from pydla.tools.filearg import add_file_args
from pydla.tools.logs import LOG


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "inspect", help="describe an ONNX model or a loadable",
        description="For an ONNX model: inputs, outputs, op histogram, what the builder folds "
        "and fuses (it builds in memory), and what it cannot import and why. For a loadable: "
        "I/O descriptors, layers with their fused ONNX nodes, precisions, tactics, memory.")
    add_file_args(p, ("engine", "onnx"), "an .onnx model or a loadable")
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    p.add_argument("--verbose", action="store_true",
                   help="for a model: print every build decision, not only the counts")
    add_build_flags(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pydla.tools.inspect_model import inspect_loadable, inspect_onnx, is_loadable

    with open(args.loadEngine or args.onnx, "rb") as f:
        data = f.read()
    if is_loadable(data):
        from pydla.loadable import read_loadable

        program = read_loadable(data)
        info = inspect_loadable(program)
        if program.profiles is not None:
            info["profiles"] = profiles_info(program)
        lines = loadable_text(info)
    else:
        from pydla.builder import load_model

        info = inspect_onnx(load_model(data), build_options(args))
        lines = onnx_text(info, args.verbose)
    if args.json:
        print(json.dumps(info, indent=1))
    else:
        LOG.info("\n".join(lines))
    return 0 if info.get("build", {}).get("ok", True) else 1


def _shape(dims: list[Any] | None) -> str:
    return "(?)" if dims is None else "(" + ", ".join(str(d) for d in dims) + ")"


def onnx_text(info: dict[str, Any], verbose: bool) -> list[str]:
    lines = [f"ONNX model: opset {info['opset']}, IR version {info['ir_version']}, producer "
             f"{info['producer'] or '?'}; {info['nodes']} nodes, {info['initializers']['count']} "
             f"initializers ({info['initializers']['bytes']:,} bytes)"]
    for kind in ("inputs", "outputs"):
        for v in info[kind]:
            lines.append(f"{kind[:-1].capitalize():<6} {v['name']}: {_shape(v['shape'])} "
                         f"{v['dtype']}")
    lines.append("Ops: " + ", ".join(f"{op} x{n}" for op, n in info["ops"].items()))
    for u in info["unsupported"]:
        nodes = ", ".join(u["nodes"][:5]) + (" …" if len(u["nodes"]) > 5 else "")
        lines.append(f"Unsupported: {u['op'] or 'model'} ({u['reason']})"
                     + (f" at {nodes}" if nodes else ""))
    b = info["build"]
    for name, dims in b.get("fixed_dynamic_inputs", {}).items():
        lines.append(f"Note: input {name} is dynamic; inspected with shape {_shape(dims)} "
                     f"(fix it with --shapes={name}:{'x'.join(map(str, dims))})")
    if not b["ok"]:
        lines.append(f"Build fails: {b['error']}")
        return lines
    lines.append(f"Build: {info['nodes']} ONNX nodes -> {b['layers']} layers")
    for name, count in b["passes"].items():
        lines.append(f"  {name}: {count}")
    if verbose:
        lines += [f"  [V] {line}" for line in b["log"]]
    folded = b["folded_nodes"]
    if folded:
        total = sum(len(v) for v in folded.values())
        lines.append(f"Folded away (evaluated at build time, identity or dead): {total} nodes: "
                     + ", ".join(f"{op} x{len(v)}" for op, v in folded.items()))
    return lines


def loadable_text(info: dict[str, Any]) -> list[str]:
    from pydla.tools.cmd_build import format_layer_info

    t = info["target"]
    lines = [f"Loadable: format {info['version']}, producer {info['producer'].get('name')} "
             f"{info['producer'].get('version')}, target {t.get('backend')} (DLA core "
             f"{t.get('dla_core')}), built at opt level {info['build'].get('opt_level')}"]
    for kind in ("inputs", "outputs"):
        for v in info[kind]:
            d = v["descriptor"]
            lines.append(f"{kind[:-1].capitalize():<6} {v['name']}: {_shape(v['shape'])} "
                         f"{v['dtype']}; buffer {v['buffer_dtype']}:{v['format']}, "
                         f"{d['size']:,} bytes, nchw=({d['n']}, {d['c']}, {d['h']}, {d['w']}), "
                         f"stride={tuple(d['stride'][:4])}")
    lines.append(f"Layers: {len(info['layers'])}; precisions "
                 + ", ".join(f"{k} x{n}" for k, n in info["precisions"].items())
                 + "; tactics " + ", ".join(f"{k} x{n}" for k, n in info["tactics"].items()))
    lines += format_layer_info(info).splitlines()
    prof = info.get("profiles")
    if prof:
        lines.append(f"Optimization profile: {len(prof['plans'])} plans, "
                     + ("batch padding" if prof["pad_batch"] else "exact shapes only")
                     + "; ranges " + ", ".join(f"{r['name']} {r['min']}..{r['max']} "
                                               f"(opt {r['opt']})" for r in prof["ranges"]))
        for k, plan in enumerate(prof["plans"]):
            lines.append(f"  profile {k}: {plan['shapes']}, {plan['layers']} layers, arena "
                         f"{plan['arena_bytes']:,} bytes" + (" (what cuDLA sees)" if k == 0
                                                            else ""))
    return lines


def profiles_info(program: Any) -> dict[str, Any]:
    """The optimization profile's ranges and plans (pydla.loadable.ProfileSet)."""
    ps = program.profiles
    plans = [program.profile_program(k) for k in range(len(ps.profiles))]
    return {"pad_batch": ps.pad_batch,
            "ranges": [{"name": r.name, "min": list(r.min), "opt": list(r.opt),
                        "max": list(r.max)} for r in ps.ranges],
            "plans": [{"shapes": {r.name: list(s) for r, s in zip(ps.ranges, prof.shapes)},
                       "layers": len(p.layers), "arena_bytes": p.arena_bytes}
                      for prof, p in zip(ps.profiles, plans)]}
