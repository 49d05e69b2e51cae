"""Every family gives the same outputs at optimization levels 0 and 3, and with each pass
switched off; the IR verifier runs after every pass."""

import pytest

from pydla.builder import BuildOptions
from pydla.passes import PASS_NAMES
from tests.models.families import FAMILIES
from tests.oracle import model_tolerance_ok, run_ort, run_pydla

CASES = [(f, "level0") for f in sorted(FAMILIES)] + [(f, "level3") for f in sorted(FAMILIES)] + [
    (f, p) for f in sorted(FAMILIES) for p in PASS_NAMES]


@pytest.mark.parametrize("family,variant", CASES)
def test_equivalence(family, variant):
    model, feeds = FAMILIES[family]()
    if variant == "level0":
        opts = BuildOptions(opt_level=0, verify_passes=True)
    elif variant == "level3":
        opts = BuildOptions(opt_level=3, verify_passes=True)
    else:
        opts = BuildOptions(disabled_passes=[variant], verify_passes=True)
    want = run_ort(model, feeds)
    got = run_pydla(model, feeds, opts)
    model_tolerance_ok(got, want)
