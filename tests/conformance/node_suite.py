"""Run ONNX's own node test cases through pydla.onnx_backend (build → loadable → run).

As a script it prints a report: ``python -m tests.conformance.node_suite [-k PATTERN] [-v]``.
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import sys
import traceback
import warnings

import numpy as np
import onnx
from onnx import numpy_helper

from pydla import onnx_backend


def all_cases() -> list:
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return sorted(collect_testcases(None), key=lambda c: c.name)


def _compare(ref: np.ndarray, out: np.ndarray, rtol: float, atol: float) -> None:
    """The same checks as onnx.backend.test.runner.Runner.assert_similar_outputs."""
    np.testing.assert_array_equal(out.shape, ref.shape, err_msg="incorrect shape")
    if ref.dtype == object:
        np.testing.assert_array_equal(out, ref)
        return
    np.testing.assert_equal(out.dtype, ref.dtype)
    if out.dtype.name == "bfloat16":
        rtol = max(rtol, 2**-6)
        out, ref = out.astype(np.float32), ref.astype(np.float32)
    np.testing.assert_allclose(out, ref, rtol=rtol, atol=atol)


def run_case(case) -> None:  # noqa: ANN001
    """Raise on failure (AssertionError for wrong numbers, PydlaError for refusals)."""
    rep = onnx_backend.prepare(case.model, "CPU")
    for inputs, ref_outputs in case.data_sets:
        # Some cases (Cast's) carry TensorProtos: convert them as onnx's own runner does.
        inputs = [numpy_helper.to_array(x) if isinstance(x, onnx.TensorProto) else x
                  for x in inputs]
        with np.errstate(all="ignore"):
            outputs = rep.run(inputs)
        if len(outputs) != len(ref_outputs):
            raise AssertionError(f"{len(outputs)} outputs, expected {len(ref_outputs)}")
        for ref, out in zip(ref_outputs, outputs):
            if isinstance(ref, onnx.TensorProto):  # some cases store int16 results as protos
                ref = numpy_helper.to_array(ref)
            _compare(np.asarray(ref), np.asarray(out), case.rtol, case.atol)


def _classify(exc: BaseException) -> str:
    msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return f"{type(exc).__name__}: {msg}"[:300]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("-k", default=None, help="regex on case names")
    ap.add_argument("-v", action="store_true", help="print each failure")
    ap.add_argument("--tb", action="store_true", help="print tracebacks")
    ap.add_argument("--json", default=None, help="write {case: error or null} here")
    ap.add_argument("--exclusions", action="store_true", help="skip excluded cases")
    args = ap.parse_args()
    from tests.conformance.exclusions import excluded_reason

    cases = all_cases()
    if args.k:
        cases = [c for c in cases if re.search(args.k, c.name)]
    results: dict[str, str | None] = {}
    by_reason: collections.Counter[str] = collections.Counter()
    skipped = 0
    for c in cases:
        if args.exclusions and excluded_reason(c.name):
            skipped += 1
            continue
        try:
            run_case(c)
            results[c.name] = None
        except Exception as e:  # noqa: BLE001
            results[c.name] = _classify(e)
            by_reason[re.sub(r"'[^']*'|\d+", "_", results[c.name])[:120]] += 1
            if args.v:
                print(f"FAIL {c.name}: {results[c.name]}")
                if args.tb:
                    traceback.print_exc()
    passed = sum(v is None for v in results.values())
    print(f"{passed} passed, {len(results) - passed} failed, {skipped} skipped "
          f"of {len(cases)} cases")
    for reason, n in by_reason.most_common(40):
        print(f"  {n:4d}  {reason}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1, sort_keys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
