"""The ``ray_slow`` marker: Ray tests that start Ray Data's reading and preprocessing
workers as well as actors (tens of seconds on a 2-core machine). They run with
``-m ray_slow`` and are skipped otherwise, so the default run stays short."""

from __future__ import annotations

import pytest

MARKER = "ray_slow"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", f"{MARKER}: slow Ray tests; run with -m {MARKER}")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if MARKER in (config.option.markexpr or ""):
        return
    skip = pytest.mark.skip(reason=f"slow Ray test: run with -m {MARKER}")
    for item in items:
        if MARKER in item.keywords:
            item.add_marker(skip)
