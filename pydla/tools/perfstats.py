"""trtexec's statistics of a list of timings: min, max, mean, median, percentiles.

The median and percentile rules are trtexec's own (samples/common/sampleReporting.cpp), so
numbers printed by ``pydla bench`` mean what trtexec users expect: the p-th percentile of n
sorted timings is the element at ``max(n - 1 - int((1 - p / 100) * n), 0)`` — an observed
value, never an interpolation.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


def percentile(sorted_values: Sequence[float], p: float) -> float:
    """trtexec's ``findPercentile`` on ascending values."""
    if not 0.0 <= p <= 100.0:
        raise ValueError(f"percentile {p} is not in [0, 100]")
    n = len(sorted_values)
    if n == 0:
        return math.inf
    exclude = int((1 - p / 100) * n)
    return float(sorted_values[max(n - 1 - exclude, 0)])


def median(sorted_values: Sequence[float]) -> float:
    """trtexec's ``findMedian``: the middle element, or the mean of the middle two."""
    n = len(sorted_values)
    if n == 0:
        return math.inf
    m = n // 2
    if n % 2:
        return float(sorted_values[m])
    return (float(sorted_values[m - 1]) + float(sorted_values[m])) / 2


@dataclass(frozen=True)
class Summary:
    min: float
    max: float
    mean: float
    median: float
    percentiles: tuple[tuple[float, float], ...]  # (p, value)
    # Coefficient of variation in percent (population standard deviation / mean).
    cv: float

    def format(self, unit: str = "ms") -> str:
        """``min = 1 ms, max = 2 ms, mean = …, median = …, percentile(90%) = … ms`` (trtexec)."""
        parts = [f"min = {self.min:g} {unit}", f"max = {self.max:g} {unit}",
                 f"mean = {self.mean:g} {unit}", f"median = {self.median:g} {unit}"]
        parts += [f"percentile({p:g}%) = {v:g} {unit}" for p, v in self.percentiles]
        return ", ".join(parts)


def summarize(values: Sequence[float], percentiles: Sequence[float]) -> Summary:
    s = sorted(values)
    if not s:
        nan = math.nan
        return Summary(nan, nan, nan, nan, tuple((p, nan) for p in percentiles), nan)
    mean = sum(s) / len(s)
    var = sum((v - mean) ** 2 for v in s) / len(s)
    cv = math.sqrt(var) / mean * 100 if mean > 0 else 0.0
    return Summary(s[0], s[-1], mean, median(s), tuple((p, percentile(s, p))
                                                      for p in percentiles), cv)
