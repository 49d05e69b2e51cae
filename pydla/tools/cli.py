"""``pydla`` command line: trtexec's flag names, one subcommand per job."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from pydla.errors import PydlaError
from pydla.tools.filearg import resolve_file_args
from pydla.tools.flags import FlagError
from pydla.tools.logs import cli_logging

# What a command may import beyond the runtime, and the pip command that installs it.
_EXTRAS = {
    "onnx": "pip install 'pydla[build]'",
    "onnxruntime": "pip install 'pydla[compare]'",
    "polygraphy": "pip install polygraphy",
    "cupy": "pip install 'pydla[cuda]'",
    "cuda": "pip install 'pydla[cuda]'",
    "cudnn": "pip install 'pydla[cuda]'",
    "ml_dtypes": "pip install ml_dtypes",
}


def main(argv: Sequence[str] | None = None) -> int:
    from pydla.tools import (
        cmd_bench,
        cmd_build,
        cmd_check,
        cmd_compare,
        cmd_demo,
        cmd_inspect,
        cmd_partition,
        cmd_report,
        cmd_run,
    )

    parser = argparse.ArgumentParser(
        prog="pydla", description="Compile ONNX models into loadables and run them.")
    from pydla import __version__

    parser.add_argument("--version", action="version", version=f"pydla {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    for module in (cmd_build, cmd_run, cmd_bench, cmd_compare, cmd_inspect, cmd_report,
                   cmd_check, cmd_partition, cmd_demo):
        module.register(sub)
    args, extra = parser.parse_known_args(argv)
    if extra:  # the subcommand's usage, not the top level's, names what it takes
        sub.choices[args.command].error(f"unrecognized arguments: {' '.join(extra)}")
    try:
        if hasattr(args, "_file_kinds"):
            resolve_file_args(args)
        with cli_logging(verbose=bool(getattr(args, "verbose", False))):
            return int(args.func(args) or 0)
    except BrokenPipeError:  # stdout closed early (| head): quiet, as a user's pipe intends
        try:  # and no second BrokenPipeError when Python flushes stdout at exit
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError):
            pass
        return 1
    except (PydlaError, FlagError) as e:
        print(f"pydla {args.command}: error: {e}", file=sys.stderr)
        return 1
    except ModuleNotFoundError as e:  # an optional dependency: the pip command that brings it
        root = (e.name or "").split(".")[0]
        if root not in _EXTRAS:
            raise
        print(f"pydla {args.command}: error: {root} is not installed; {_EXTRAS[root]}",
              file=sys.stderr)
        return 1
    except OSError as e:  # a missing, unreadable or unwritable path: one line, no traceback
        where = f"{e.filename}: " if e.filename else ""
        print(f"pydla {args.command}: error: {where}{e.strerror or e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
