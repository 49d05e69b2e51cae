"""``pydla report``: one self-contained HTML page about an engine — layer graph with its
fusions, per-layer times, activation-memory timeline, precisions and I/O formats."""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

from pydla.loadable import Program
from pydla.tools.filearg import add_file_args
from pydla.tools.flags import FlagError
from pydla.tools.logs import LOG


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "report", help="write an HTML report of a loadable",
        description="Write one self-contained HTML page (no network access needed) showing "
        "the engine's layers and fusions, per-layer times (from a profile written by "
        "pydla bench --exportProfile), activation memory over time, and precisions.")
    add_file_args(p, ("engine",), "the loadable")
    p.add_argument("--profile", help="per-layer profile JSON (pydla bench --exportProfile, "
                   "on the CPU or with --device=cuda)")
    p.add_argument("-o", "--output", default="report.html", help="where to write the page")
    p.set_defaults(func=run)


def lifetimes(program: Program) -> list[dict[str, Any]]:
    """Each arena tensor's span: from the layer that writes it (-1: a network input) to the
    last layer that reads it (network outputs live to the end)."""
    n = len(program.layers)
    first: dict[int, int] = {io.tensor: -1 for io in program.inputs}
    last: dict[int, int] = {io.tensor: n - 1 for io in program.outputs}
    for lay in program.layers:
        for t in lay.outputs:
            first.setdefault(t, lay.index)
            last[t] = max(last.get(t, lay.index), lay.index)
        for t in lay.inputs:
            if t >= 0:
                last[t] = max(last.get(t, lay.index), lay.index)
    spans = []
    for t in program.tensors:
        if t.kind == "weight" or t.index not in first:
            continue
        parent = program.tensors[t.alias[0]].name if t.alias else None
        spans.append({"name": t.name, "kind": t.kind, "offset": t.offset, "nbytes": t.nbytes,
                      "first": first[t.index], "last": last.get(t.index, first[t.index]),
                      "alias": parent})
    return spans


def report_data(program: Program, profile: list[dict[str, Any]] | None) -> dict[str, Any]:
    dla = program.build.get("dla")
    devices = dla.get("devices", {}) if isinstance(dla, dict) else None
    producer = {t: lay.index for lay in program.layers for t in lay.outputs}
    edges = sorted({(producer[t], lay.index) for lay in program.layers for t in lay.inputs
                    if t in producer})
    layers = [{"index": lay.index, "name": lay.name, "op": lay.op, "precision": lay.precision,
               "tactic": lay.tactic, "fused_from": list(lay.fused_from),
               "epilogue": [s["op"] for s in lay.attrs.get("epilogue", {}).get("program", [])],
               # where a Jetson runs the layer (a --useDLACore build): DLA or GPU
               "device": devices.get(lay.name, "GPU") if devices is not None else None}
              for lay in program.layers]
    io = [{"kind": kind, "name": program.tensors[e.tensor].name,
           "shape": list(program.tensors[e.tensor].shape),
           "dtype": program.tensors[e.tensor].dtype.name.lower(), "format": e.format,
           "buffer_dtype": e.dtype.name.lower(), "size": e.descriptor.size}
          for kind, entries in (("input", program.inputs), ("output", program.outputs))
          for e in entries]
    return {
        "engine": {"version": ".".join(map(str, program.version)),
                   "target": program.target.get("backend", "?"),
                   "arena_bytes": program.arena_bytes,
                   "weight_bytes": sum(t.nbytes for t in program.tensors if t.kind == "weight")},
        "layers": layers, "edges": edges, "io": io, "lifetimes": lifetimes(program),
        "profile": profile,
    }


def load_profile(path: str, program: Program) -> list[dict[str, Any]]:
    """trtexec-style profile entries (the ``{"count": n}`` header dropped), checked against
    the engine's layers so a profile of another engine is refused."""
    with open(path) as f:
        entries = json.load(f)
    rows = [e for e in entries if isinstance(e, dict) and "name" in e]
    names = {lay.name for lay in program.layers}
    unknown = [e["name"] for e in rows if e["name"] not in names]
    if not rows or unknown:
        raise FlagError(f"--profile {path}: layers {unknown[:5]} are not in this engine"
                        if unknown else f"--profile {path}: no layer entries")
    for e in rows:
        for key in ("averageMs", "percentage"):
            if not isinstance(e.get(key), (int, float)):
                raise FlagError(f"--profile {path}: entry {e['name']!r} lacks {key}")
    return rows


def run(args: argparse.Namespace) -> int:
    from pydla.loadable import read_loadable
    from pydla.tools.report_page import render_html

    with open(args.loadEngine, "rb") as f:
        program = read_loadable(f.read())
    profile = load_profile(args.profile, program) if args.profile else None
    page = render_html(report_data(program, profile), os.path.basename(args.loadEngine))
    data = page.encode("utf-8")  # the page has non-ASCII text: count bytes, not characters
    with open(args.output, "wb") as f:
        f.write(data)
    LOG.info(f"wrote {args.output} ({len(data):,} bytes; {len(program.layers)} layers"
          f"{', with profile' if profile else ''})")
    return 0
