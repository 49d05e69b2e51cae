"""Polygraphy's comparison of two arrays: error statistics, tolerances and the pass rule.

``got`` is pydla's value and ``want`` the reference's (onnxruntime). The relative error is
``|got - want| / |want|``, as Polygraphy divides by the reference. With
``--check-error-stat=elemwise`` an element fails where both its absolute error exceeds atol
*and* its relative error exceeds rtol; with max/mean/median the array fails when that
statistic of the absolute error exceeds atol and the same statistic of the relative error
exceeds rtol.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from pydla.tools.flags import FlagError

CHECK_STATS = ("elemwise", "max", "mean", "median")
DEFAULT_TOL = 1e-5


@dataclass(frozen=True)
class PerName:
    """A flag value that may differ per tensor: ``1e-3,out0:1e-2`` (Polygraphy's form)."""

    default: str
    by_name: Mapping[str, str]

    def get(self, name: str) -> str:
        return self.by_name.get(name, self.default)


def parse_per_name(text: str | None, flag: str, default: str, numeric: bool) -> PerName:
    by_name: dict[str, str] = {}
    value = default
    for item in (text or "").split(","):
        item = item.strip()
        if not item:
            continue
        name, sep, v = item.rpartition(":")
        if numeric:
            try:
                float(v)
            except ValueError:
                raise FlagError(f"{flag} entry {item!r}: expected a number or name:number"
                                ) from None
        elif v not in CHECK_STATS:
            raise FlagError(f"{flag} entry {item!r}: choose among {', '.join(CHECK_STATS)}")
        if sep:
            by_name[name] = v
        else:
            value = v
    return PerName(value, by_name)


@dataclass(frozen=True)
class Tolerance:
    atol: float
    rtol: float
    check: str  # one of CHECK_STATS


@dataclass(frozen=True)
class Stats:
    """max, the flat index of the max, mean, median, p90, p95, p99 of one error array."""

    max: float
    argmax: int
    mean: float
    median: float
    p90: float
    p95: float
    p99: float

    @classmethod
    def of(cls, err: np.ndarray) -> Stats:
        if err.size == 0:
            return cls(0.0, 0, 0.0, 0.0, 0.0, 0.0, 0.0)
        with np.errstate(invalid="ignore"):  # inf - inf while interpolating between infs
            ps = np.percentile(err, [90, 95, 99])
        if np.isnan(ps).any():
            ps = np.where(np.isnan(ps), np.percentile(err, [90, 95, 99], method="nearest"), ps)
        p90, p95, p99 = ps
        return cls(float(err.max()), int(err.argmax()), float(err.mean()),
                   float(np.median(err)), float(p90), float(p95), float(p99))

    def stat(self, which: str) -> float:
        return {"max": self.max, "mean": self.mean, "median": self.median}[which]


@dataclass(frozen=True)
class Comparison:
    shape: tuple[int, ...]
    abs: Stats
    rel: Stats
    cosine: float
    tolerance: Tolerance
    passed: bool
    mismatches: int  # elements failing the elemwise rule (reported for every check)
    # Smallest atol that passes with the given rtol, and smallest rtol with the given atol.
    min_atol: float
    min_rtol: float
    reason: str = ""  # why nothing could be compared (shape mismatch)


def _errors(got: np.ndarray, want: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    g = np.asarray(got, np.float64).ravel()
    w = np.asarray(want, np.float64).ravel()
    both_nan = np.isnan(g) & np.isnan(w)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        absd = np.abs(g - w)
        absd[both_nan | (g == w)] = 0.0  # equal infinities and NaN pairs agree
        absd[np.isnan(absd)] = np.inf
        rel = absd / np.abs(w)
    rel[absd == 0] = 0.0
    rel[np.isnan(rel)] = np.inf
    return absd, rel


def cosine_similarity(got: np.ndarray, want: np.ndarray) -> float:
    g = np.nan_to_num(np.asarray(got, np.float64).ravel())
    w = np.nan_to_num(np.asarray(want, np.float64).ravel())
    ng, nw = float(np.linalg.norm(g)), float(np.linalg.norm(w))
    if ng == 0.0 or nw == 0.0:
        return 1.0 if ng == nw else 0.0
    return float(np.dot(g, w) / (ng * nw))


def compare_arrays(got: np.ndarray, want: np.ndarray, tol: Tolerance) -> Comparison:
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape:
        zero = Stats.of(np.zeros(0))
        return Comparison(tuple(got.shape), zero, zero, 0.0, tol, False, got.size, np.inf,
                          np.inf, f"shape {tuple(got.shape)} != reference {tuple(want.shape)}")
    absd, rel = _errors(got, want)
    a, r = Stats.of(absd), Stats.of(rel)
    fail = (absd > tol.atol) & (rel > tol.rtol)
    mismatches = int(fail.sum())
    if tol.check == "elemwise":
        passed = mismatches == 0
        min_atol = float(absd[rel > tol.rtol].max(initial=0.0))
        min_rtol = float(rel[absd > tol.atol].max(initial=0.0))
    else:
        sa, sr = a.stat(tol.check), r.stat(tol.check)
        passed = not (sa > tol.atol and sr > tol.rtol)
        min_atol = sa if sr > tol.rtol else 0.0
        min_rtol = sr if sa > tol.atol else 0.0
    return Comparison(tuple(got.shape), a, r, cosine_similarity(got, want), tol, passed,
                      mismatches, min_atol, min_rtol)


def format_comparison(name: str, c: Comparison, dtype: str) -> list[str]:
    """Polygraphy-style lines for one tensor."""
    head = f"{name} {c.shape} {dtype}"
    if c.reason:
        return [f"{head}: FAILED | {c.reason}"]

    def row(label: str, s: Stats) -> str:
        where = np.unravel_index(s.argmax, c.shape) if c.shape else ()
        return (f"    {label} | max={s.max:.4g} at {tuple(int(i) for i in where)}, "
                f"mean={s.mean:.4g}, median={s.median:.4g}, p90={s.p90:.4g}, "
                f"p95={s.p95:.4g}, p99={s.p99:.4g}")

    t = c.tolerance
    check = "elemwise error" if t.check == "elemwise" else f"{t.check} error"
    alone_abs = c.abs.max if t.check == "elemwise" else c.abs.stat(t.check)
    alone_rel = c.rel.max if t.check == "elemwise" else c.rel.stat(t.check)
    verdict = "PASSED" if c.passed else "FAILED"
    return [
        head,
        row("Absolute Difference", c.abs),
        row("Relative Difference", c.rel),
        f"    Cosine Similarity | {c.cosine:.8f}",
        f"    Minimum Required Tolerance: {check} | [abs={alone_abs:.4g}] OR "
        f"[rel={alone_rel:.4g}]; with --rtol={t.rtol:g}: --atol={c.min_atol:.4g}, "
        f"with --atol={t.atol:g}: --rtol={c.min_rtol:.4g}",
        f"    {verdict} | atol={t.atol:g} rtol={t.rtol:g} check-error-stat={t.check}"
        + (f", {c.mismatches} of {int(np.prod(c.shape))} elements exceed both"
           if c.mismatches else ""),
    ]
