"""ONNX's node test cases (onnx.backend.test.case.node) through pydla.onnx_backend: build →
loadable bytes → load → run, compared as onnx's own backend test runner compares."""

import pytest

from tests.conformance.exclusions import excluded_reason
from tests.conformance.node_suite import all_cases, run_case

CASES = all_cases()


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_node_case(case):
    reason = excluded_reason(case.name)
    if reason is not None:
        pytest.skip(reason)
    run_case(case)


def test_pass_count_meets_the_bar():
    """At least 1,100 of the 1,884 cases run (the rest are excluded with reasons)."""
    runnable = [c for c in CASES if excluded_reason(c.name) is None]
    assert len(CASES) >= 1884
    assert len(runnable) >= 1100
