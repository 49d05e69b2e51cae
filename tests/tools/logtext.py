"""The CLI's log text without trtexec's time stamps, for tests that compare whole lines."""

import re

STAMP = re.compile(r"^\[\d\d/\d\d/\d{4}-\d\d:\d\d:\d\d\] (?=\[[VIWEF]\] )", re.MULTILINE)


def unstamped(text: str) -> str:
    """``[12/03/2026-13:45:00] [I] x`` -> ``[I] x``; fails the test on a line without one."""
    lines = [line for line in text.splitlines() if line]
    bare = [line for line in lines if not STAMP.match(line)]
    assert not bare, f"log lines without trtexec's prefix: {bare[:3]}"
    return STAMP.sub("", text)
