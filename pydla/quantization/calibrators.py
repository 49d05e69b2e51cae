"""TensorRT's calibrators: the dynamic range (amax) of a tensor from its values.

- ``minmax`` (``MinMaxCalibration``): the largest |x| seen.
- ``entropy`` (``EntropyCalibration2``, the default): a histogram of |x| in 2048 bins over
  [0, max|x|]; for every candidate threshold of i bins, i = 128..2048, the reference
  distribution P is the first i bins with every count above the threshold added to bin i-1,
  and the candidate Q is those i bins merged into 128 levels and expanded back (each level's
  count spread evenly over its non-empty bins, empty bins stay empty). The threshold is the
  upper edge of bin i-1 for the i with the smallest KL(P||Q) (the last one on ties). As in
  NVIDIA's reproduction of TensorRT's algorithm (pytorch-quantization's
  ``_compute_amax_entropy``), bin 0 takes bin 1's count first, so the spike of exact zeros a
  ReLU leaves does not pull the threshold, and KL is infinite where P has mass that Q lacks.
- ``percentile`` (``LegacyCalibration``, TensorRT's quantile calibrator): the upper edge of
  the histogram bin where the cumulative count reaches the percentile of all |x|.

Histograms are accumulated sample by sample (pydla.quantization.runner), never by keeping
activations: a first pass finds each tensor's max|x|, a second bins |x| over [0, max].
"""

from __future__ import annotations

import math

import numba
import numpy as np

BINS = 2048
# 8-bit symmetric: 127 positive levels plus zero, i.e. 128 levels of |x|.
LEVELS = 128
ALGORITHMS = {"entropy": "EntropyCalibration2", "minmax": "MinMaxCalibration",
              "percentile": "LegacyCalibration"}


@numba.njit(cache=True, nogil=True)
def _bin_abs(flat: np.ndarray, per_bin: float, counts: np.ndarray) -> None:
    last = counts.shape[0] - 1
    for x in flat:
        a = abs(x)
        if a != a:  # NaN: no bin (the range pass already refused non-finite tensors)
            continue
        b = int(a * per_bin)
        counts[min(b, last)] += 1


def accumulate_histogram(values: np.ndarray, amax: float, counts: np.ndarray) -> None:
    """Add |values| to ``counts`` (BINS bins over [0, amax]; larger values count in the
    last bin: a loader script may yield other data on the histogram pass)."""
    flat = np.ascontiguousarray(values, dtype=np.float32).reshape(-1)
    _bin_abs(flat, counts.shape[0] / amax, counts)


@numba.njit(cache=True, nogil=True)
def kl_divergences(hist: np.ndarray, start: int, levels: int) -> np.ndarray:
    """KL(P||Q) for every candidate of i = start..len(hist) bins (index i - start).

    Bin j of i falls in level j * levels // i; a level's bins are found from its bounds
    rather than by a division per bin. P sums to every count, Q to the counts below i.
    """
    n = hist.shape[0]
    bins = hist.astype(np.float64)
    bins[0] = bins[1]
    above = np.zeros(n + 1)
    for j in range(n - 1, -1, -1):
        above[j] = above[j + 1] + bins[j]
    total = above[0]
    out = np.empty(n - start + 1)
    for i in range(start, n + 1):
        p_total = total
        q_total = total - above[i]
        kl = 0.0
        for k in range(levels):
            lo = (k * i + levels - 1) // levels
            hi = ((k + 1) * i + levels - 1) // levels
            level_sum = 0.0
            used = 0
            for j in range(lo, hi):
                if bins[j] != 0.0:
                    level_sum += bins[j]
                    used += 1
            q_bin = level_sum / used / q_total if used else 0.0
            for j in range(lo, hi):
                p = bins[j] + (above[i] if j == i - 1 else 0.0)
                if p > 0.0:
                    if bins[j] == 0.0:  # mass only outliers give, which Q cannot have
                        kl = np.inf
                        break
                    p /= p_total
                    kl += p * math.log(p / q_bin)
            if kl == np.inf:
                break
        out[i - start] = kl
    return out


def entropy_amax(hist: np.ndarray, amax: float) -> float:
    """EntropyCalibration2's threshold for a BINS-bin histogram of |x| over [0, amax]."""
    n = hist.shape[0]
    if hist[1:].sum() == 0:  # every value in the first bin: nothing to choose between
        return amax
    div = kl_divergences(np.asarray(hist, dtype=np.int64), LEVELS, LEVELS)
    finite = np.isfinite(div)
    if not finite.any():
        return amax
    div = np.where(finite, div, np.inf)
    best = len(div) - 1 - int(np.argmin(div[::-1]))  # the last minimum, as NVIDIA's code
    return amax * (best + LEVELS) / n


def percentile_amax(hist: np.ndarray, amax: float, percentile: float) -> float:
    """The upper edge of the bin where the cumulative count reaches ``percentile`` %."""
    cdf = np.cumsum(hist, dtype=np.float64)
    if cdf[-1] == 0:
        return amax
    idx = int(np.searchsorted(cdf, cdf[-1] * percentile / 100.0))
    return amax * min(idx + 1, len(hist)) / len(hist)
