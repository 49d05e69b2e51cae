"""A short soak (scripts/soak.py): thousands of tasks over 8 threads x 8 streams on two
small models through pydla.cudla give the same bytes as serial runs. The long run (100,000
tasks, resident-memory growth after warm-up) is the script's default."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "soak.py"


def _soak_module():  # noqa: ANN202
    spec = importlib.util.spec_from_file_location("pydla_soak", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_short_soak_matches_serial() -> None:
    soak = _soak_module()
    result = soak.soak(tasks=2_000, threads=8, streams=8)
    assert result.errors == []
    assert result.mismatches == 0
    assert result.tasks == 2_000
