"""The one way every subcommand names the file it works on: a positional FILE, or trtexec's
``--loadEngine=`` (a loadable) and ``--onnx=`` (a model) — both forms everywhere, so
``pydla report engine.bin`` and ``pydla report --loadEngine=engine.bin`` mean the same."""

from __future__ import annotations

import argparse
import errno
import os

from pydla.loadable.format import MAGIC
from pydla.tools.flags import FlagError

_FLAG = {"engine": "--loadEngine", "onnx": "--onnx"}
_DEST = {"engine": "loadEngine", "onnx": "onnx"}


def add_file_args(p: argparse.ArgumentParser, kinds: tuple[str, ...], what: str,
                  required: bool = True) -> None:
    """A positional FILE plus ``--loadEngine`` and/or ``--onnx`` (``kinds``)."""
    p.add_argument("file", nargs="?", metavar="FILE",
                   help=f"{what} (or give it with {_flags(kinds)})")
    if "engine" in kinds:
        p.add_argument("--loadEngine", help="the loadable file (or give it as FILE)")
    if "onnx" in kinds:
        p.add_argument("--onnx", help="the ONNX model (or give it as FILE)")
    p.set_defaults(_file_kinds=kinds, _file_required=required)


def resolve_file_args(args: argparse.Namespace) -> None:
    """Move the positional FILE into ``args.loadEngine`` or ``args.onnx`` (by the file's first
    bytes where both are allowed); refuse two files or none."""
    kinds: tuple[str, ...] = args._file_kinds
    given = [(_FLAG[k], getattr(args, _DEST[k])) for k in kinds if getattr(args, _DEST[k])]
    if args.file is not None:
        if given:
            flag, path = given[0]
            raise FlagError(f"FILE {args.file} and {flag}={path}: give the file once")
        kind = kinds[0] if len(kinds) == 1 else ("engine" if is_loadable_file(args.file)
                                                 else "onnx")
        setattr(args, "loadEngine" if kind == "engine" else "onnx", args.file)
    elif not given and args._file_required:
        raise FlagError(f"give the file: FILE or {_flags(kinds)}")
    elif len(given) > 1:
        raise FlagError("give exactly one of --loadEngine and --onnx")
    for flag in ("loadEngine", "onnx"):
        if getattr(args, flag, None):
            check_readable(getattr(args, flag))
    if getattr(args, "loadEngine", None) and not is_loadable_file(args.loadEngine):
        raise FlagError(f"{args.loadEngine} is not a loadable (make one with pydla build "
                        "--onnx=MODEL --saveEngine=FILE)")


def check_readable(path: str) -> None:
    """Refuse, before anything reads it, a path that is missing, a directory or empty."""
    if os.path.isdir(path):
        raise IsADirectoryError(errno.EISDIR, "Is a directory", path)
    if os.path.getsize(path) == 0:  # FileNotFoundError when missing
        raise FlagError(f"{path}: empty file (0 bytes)")


def is_loadable_file(path: str) -> bool:
    """Whether ``path`` starts as a loadable does (its magic); OSError if it cannot be read."""
    with open(path, "rb") as f:
        return f.read(len(MAGIC)) == MAGIC


def _flags(kinds: tuple[str, ...]) -> str:
    return " or ".join(_FLAG[k] for k in kinds)
