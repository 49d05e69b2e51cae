"""``pydla run``: load a loadable and run it once on given or random inputs."""

from __future__ import annotations

import argparse
import json
import mmap
import os
import zipfile

import numpy as np

from pydla.dtypes import DType, to_compute
from pydla.engine.inputs import check_input
from pydla.tools.device_arg import add_device_flag, load_module, resolve_device
from pydla.tools.filearg import add_file_args, check_readable
from pydla.tools.flags import FlagError, parse_shapes
from pydla.tools.logs import LOG


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run", help="run a loadable once",
                       description="Load a loadable and run it once on the CPU device or a "
                       "GPU (--device).")
    add_file_args(p, ("engine",), "the loadable")
    add_device_flag(p)
    p.add_argument("--loadInputs", help="inputs: an .npz keyed by tensor name, or "
                   "name:file.bin,… raw little-endian files (trtexec's form)")
    p.add_argument("--exportOutput", help="write the outputs to this file: .npz keyed by "
                   "tensor name, or .json in trtexec's layout (name, dimensions, values)")
    p.add_argument("--seed", type=int, default=0, help="seed for random inputs")
    p.add_argument("--shapes", help="input shapes to run, name:4x3x224x224,… (trtexec's run-time "
                   "--shapes): any shape in the loadable's optimization profile; default its "
                   "opt shapes")
    p.set_defaults(func=run)


def load_inputs(spec: str | None, names: list[str], shapes: list[tuple[int, ...]],
                dtypes: list[DType], seed: int) -> list[np.ndarray]:
    """Inputs from ``--loadInputs``; random (seeded) for any input not given."""
    given: dict[str, np.ndarray] = {}
    if spec and spec.endswith(".npz"):
        given = _npz(spec)
    elif spec:
        for item in spec.split(","):
            name, sep, path = item.rpartition(":")
            if not sep or name not in names:
                raise FlagError(f"--loadInputs entry {item!r}: expected name:file with a name "
                                f"among {names}")
            i = names.index(name)
            given[name] = _raw_file(name, path, shapes[i], dtypes[i])
    unknown = sorted(set(given) - set(names))
    if unknown:
        raise FlagError(f"--loadInputs names {unknown}; the engine's inputs are {names}")
    rng = np.random.default_rng(seed)
    out = []
    for name, shape, dt in zip(names, shapes, dtypes):
        if name in given:
            out.append(check_input(name, given[name], shape, dt, FlagError))
        elif dt.is_float:
            x = rng.standard_normal(shape).astype(np.float32)
            out.append(x.astype(dt.np) if dt is not DType.BFLOAT16 else
                       (x.view(np.uint32) >> 16).astype(np.uint16))
        elif dt is DType.BOOL:
            out.append(rng.integers(0, 2, shape).astype(np.bool_))
        else:
            out.append(rng.integers(0, 8, shape).astype(dt.np))
    return out


def _npz(path: str) -> dict[str, np.ndarray]:
    check_readable(path)
    try:
        with np.load(path, allow_pickle=False) as z:
            return {k: z[k] for k in z.files}
    except (ValueError, zipfile.BadZipFile, EOFError):  # numpy's reasons mislead here
        raise FlagError(f"--loadInputs {path}: not an .npz archive of arrays (numpy.savez "
                        "writes one)") from None


def _raw_file(name: str, path: str, shape: tuple[int, ...], dt: DType) -> np.ndarray:
    """A raw little-endian file (trtexec's form) carries no shape: it must hold exactly the
    tensor's bytes, which are then read in the tensor's own shape and type."""
    want = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
    got = os.path.getsize(path)
    if got != want:
        raise FlagError(f"--loadInputs {name}:{path}: {got:,} bytes, input {name!r} "
                        f"{shape} {dt.name.lower()} takes {want:,}")
    return np.fromfile(path, dtype=dt.np).reshape(shape)


def check_export_path(path: str | None) -> None:
    """Refuse an --exportOutput path whose extension names no format, before running."""
    if path and os.path.splitext(path)[1].lower() not in EXPORT_FORMATS:
        raise FlagError(f"--exportOutput {path}: the extension names the format; give a "
                        f"{' or '.join(EXPORT_FORMATS)} path")


EXPORT_FORMATS = (".npz", ".json")


def export_outputs(path: str, names: list[str], outputs: list[np.ndarray],
                   dtypes: list[DType]) -> int:
    """Write exactly ``path`` (np.savez given a name would append ``.npz``): .npz keyed by
    name in the tensors' storage types, or .json as trtexec writes it (values widened).
    Returns the bytes written."""
    check_export_path(path)
    if path.lower().endswith(".json"):
        entries = [{"name": name, "dimensions": "x".join(map(str, y.shape)),
                    "values": to_compute(y, dt).ravel().tolist()}
                   for name, y, dt in zip(names, outputs, dtypes)]
        with open(path, "w") as f:
            json.dump(entries, f, indent=1)
    else:
        with open(path, "wb") as f:
            np.savez(f, **dict(zip(names, outputs)))
    return os.path.getsize(path)


def run(args: argparse.Namespace) -> int:
    check_export_path(args.exportOutput)
    device = resolve_device(args)
    with open(args.loadEngine, "rb") as f:
        data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    module = load_module(data, device)
    prog = module.program
    tensors = [prog.tensors[io.tensor] for io in prog.inputs]
    shapes, _ = parse_shapes(args.shapes)
    unknown = sorted(set(shapes) - set(module.input_names))
    if unknown:
        raise FlagError(f"--shapes names {unknown}; the engine's inputs are "
                        f"{module.input_names}")
    inputs = load_inputs(args.loadInputs, module.input_names,
                         [shapes.get(t.name, t.shape) for t in tensors],
                         [t.dtype for t in tensors], args.seed)
    outputs = module.run(inputs)
    for io, y in zip(prog.outputs, outputs):
        t = prog.tensors[io.tensor]
        v = to_compute(y, t.dtype).astype(np.float64) if y.size else np.zeros(1)
        LOG.info(f"output {t.name}: shape={y.shape} dtype={t.dtype.short} "
              f"min={v.min():.6g} max={v.max():.6g} mean={v.mean():.6g}")
    if args.exportOutput:
        size = export_outputs(args.exportOutput, module.output_names, outputs,
                              [prog.tensors[io.tensor].dtype for io in prog.outputs])
        LOG.info(f"wrote {args.exportOutput} ({size:,} bytes)")
    return 0
