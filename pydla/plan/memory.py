"""Activation memory planning as a pure function of sizes and lifetimes."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Lifetime:
    size: int
    first: int  # index of the step that writes it (-1: alive before the first step)
    last: int  # index of the last step that reads it


def plan_memory(lifetimes: Sequence[Lifetime], alignment: int = 64) -> tuple[list[int], int]:
    """Assign arena offsets so that tensors alive at the same time never share bytes.

    Greedy by size (largest first), each tensor placed at the lowest aligned offset that does
    not collide with an already placed tensor whose lifetime overlaps. Returns
    (offsets, arena_bytes).
    """
    order = sorted(range(len(lifetimes)), key=lambda i: (-lifetimes[i].size, lifetimes[i].first))
    placed: list[tuple[int, int, int]] = []  # (offset, end, index)
    offsets = [0] * len(lifetimes)
    arena = 0
    for i in order:
        lt = lifetimes[i]
        size = -(-lt.size // alignment) * alignment
        busy = sorted((o, e) for o, e, j in placed
                      if not (lifetimes[j].last < lt.first or lt.last < lifetimes[j].first))
        offset = 0
        for o, e in busy:
            if offset + size <= o:
                break
            offset = max(offset, -(-e // alignment) * alignment)
        offsets[i] = offset
        placed.append((offset, offset + size, i))
        arena = max(arena, offset + size)
    return offsets, arena
