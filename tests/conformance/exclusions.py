"""ONNX node test cases pydla does not run, each with its reason (regex on the case name)."""

from __future__ import annotations

import re

EXCLUSIONS: list[tuple[str, str]] = [
]


def excluded_reason(name: str) -> str | None:
    for pattern, reason in EXCLUSIONS:
        if re.fullmatch(pattern, name):
            return reason
    return None
