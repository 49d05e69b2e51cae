"""Long fuzz run of the loadable reader, the binder and the ONNX importer.

    python scripts/fuzz.py --cases 200000 --jobs 2 --out fuzz-summary.json

Cases cycle over the modes (structure-aware loadable mutations, byte-level mutations,
mutated ONNX models; ``--modes`` picks) and the seed files in tests/fuzz/seeds. Each runs in
a subprocess worker: a crash (signal), a hang (``--timeout``) and an untyped exception are
failures, listed in the JSON summary with their case name; ``--replay CASE`` runs one case
in this process with its traceback. A failure found once is kept in tests/fuzz/regressions.
Exit status: 0 when no case failed, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import sys
import traceback
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.fuzz.harness import (  # noqa: E402
    Summary,
    case_bytes,
    run_input,
    run_pool,
    seed_names,
)
from tests.fuzz.seed_models import SEED_MODELS  # noqa: E402

# How many cases of each mode per round: ONNX cases build a model (tens of ms), the others
# only load one (a few ms), so they get most of the budget.
WEIGHTS = {"structure": 6, "bytes": 3, "onnx": 1}


def cases(total: int, modes: list[str], first: int) -> Iterator[str]:
    seeds = {"structure": seed_names(), "bytes": seed_names(), "onnx": sorted(SEED_MODELS)}
    plan = [m for m in modes for _ in range(WEIGHTS[m])]
    for i in range(first, first + total):
        mode = plan[i % len(plan)]
        names = seeds[mode]
        yield f"{mode}:{names[(i // len(plan)) % len(names)]}:{i}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    p.add_argument("--cases", type=int, default=10000)
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--first", type=int, default=0, help="number of the first case")
    p.add_argument("--modes", default="structure,bytes,onnx")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds before a hang")
    p.add_argument("--seconds", type=float, help="start no case after this many seconds")
    p.add_argument("--out", default="fuzz-summary.json")
    p.add_argument("--replay", help="run one case (mode:seed:number) here, with traceback")
    args = p.parse_args(argv)
    if args.replay:
        mode = args.replay.split(":")[0]
        data = case_bytes(args.replay)
        try:
            print(run_input(mode, data))
        except Exception:  # noqa: BLE001
            traceback.print_exc()
            return 1
        return 0
    modes = [m for m in args.modes.split(",") if m]
    unknown = set(modes) - set(WEIGHTS)
    if unknown:
        p.error(f"unknown modes {sorted(unknown)}")
    command = " ".join(["python", "scripts/fuzz.py"] + (argv or sys.argv[1:]))

    def write(summary: Summary, done: bool = False) -> dict[str, object]:
        result = {**summary.to_json(), "command": command, "finished": done}
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
        return result

    summary = run_pool(cases(args.cases, modes, args.first), args.jobs, args.timeout,
                       progress=True, seconds=args.seconds, checkpoint=write)
    result = write(summary, done=True)
    print(json.dumps({k: result[k] for k in ("cases", "seconds", "crashes", "hangs",
                                             "untyped")}))
    for f in summary.failures[:20]:
        print(f["case"], f["outcome"])
    return 1 if summary.failures else 0


if __name__ == "__main__":
    sys.exit(main())
