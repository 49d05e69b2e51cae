"""Every family gives the same outputs at optimization levels 0 and 3, and with each pass
switched off; the IR verifier runs after every pass.

Switching off a pass that changes nothing in a family's full pipeline runs exactly the
same pipeline (passes are deterministic), so that variant is skipped with the reason: the
suite builds each family once per pass that acts on it, not once per registered pass."""

from __future__ import annotations

import functools

import pytest

from pydla.builder import BuildOptions
from pydla.frontend.onnx import import_model
from pydla.passes import PASS_NAMES, PassContext, PassManager, default_passes
from tests.models.families import FAMILIES
from tests.oracle import model_tolerance_ok, run_ort, run_pydla

CASES = [(f, "level0") for f in sorted(FAMILIES)] + [(f, "level3") for f in sorted(FAMILIES)] + [
    (f, p) for f in sorted(FAMILIES) for p in PASS_NAMES]


@functools.cache
def acting_passes(family: str) -> frozenset[str]:
    """The passes that change the family's graph in the default pipeline (CPU target)."""
    model, _ = FAMILIES[family]()
    graph = import_model(model)
    graph.remove_dead()
    acted: set[str] = set()
    passes = default_passes()
    for p in passes:
        def run(g, ctx, _p=p, _run=p.run):  # noqa: ANN001, ANN202
            changed = _run(g, ctx)
            if changed:
                acted.add(_p.name)
            return changed

        p.run = run  # type: ignore[method-assign]
    PassManager(passes).run(graph, PassContext())
    return frozenset(acted)


def test_some_pass_acts_on_every_family():
    assert all(acting_passes(f) for f in FAMILIES)


@pytest.mark.parametrize("family,variant", CASES)
def test_equivalence(family, variant):
    model, feeds = FAMILIES[family]()
    if variant == "level0":
        opts = BuildOptions(opt_level=0, verify_passes=True)
    elif variant == "level3":
        opts = BuildOptions(opt_level=3, verify_passes=True)
    else:
        if variant not in acting_passes(family):
            pytest.skip(f"{variant} changes nothing in {family}: the same pipeline as level3")
        opts = BuildOptions(disabled_passes=[variant], verify_passes=True)
    want = run_ort(model, feeds)
    got = run_pydla(model, feeds, opts)
    model_tolerance_ok(got, want)
