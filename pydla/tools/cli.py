"""``pydla`` command line: trtexec's flag names, one subcommand per job."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from pydla.errors import PydlaError
from pydla.tools.flags import FlagError


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
    sub = parser.add_subparsers(dest="command", required=True)
    for module in (cmd_build, cmd_run, cmd_bench, cmd_compare, cmd_inspect, cmd_report,
                   cmd_check, cmd_partition, cmd_demo):
        module.register(sub)
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except (PydlaError, FlagError, FileNotFoundError) as e:
        print(f"pydla {args.command}: error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
