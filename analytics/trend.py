"""Trend statistics on hourly series, pure numpy (no I/O): the EWMA and the design article's
deviation rule, the fleet drift estimate, the vectorised tail screen and the severity scale.
"""

from __future__ import annotations

import math

import numpy as np


def ewma_deviation_check(value: float, baseline: float, *, medium: float = 0.2, high: float = 0.5) -> str | None:
    """The design article's rule: |value - baseline| / baseline above 20 % is medium, above 50 % high.

    Returns "medium", "high" or None. One hour against the EWMA, both directions, no noise model:
    fast but blind to steps below 20 % and loud on noisy series (docs/detection.md).
    """
    if baseline is None or not math.isfinite(baseline) or baseline == 0 or value is None or not math.isfinite(value):
        return None
    deviation = abs(value - baseline) / abs(baseline)
    if deviation > high:
        return "high"
    if deviation > medium:
        return "medium"
    return None


def ewma(values: np.ndarray, alpha: float) -> np.ndarray:
    """EWMA along the last axis, skipping NaNs (the previous level carries over a missing hour)."""
    values = np.asarray(values, dtype=float)
    out = np.full(values.shape, np.nan)
    level = np.full(values.shape[:-1], np.nan)
    for h in range(values.shape[-1]):
        x = values[..., h]
        fresh = np.isnan(level)
        level = np.where(np.isnan(x), level, np.where(fresh, x, alpha * x + (1 - alpha) * level))
        out[..., h] = level
    return out


def estimate_drift(values: np.ndarray, *, short: int = 6, long: int = 24, min_series: int = 10) -> float | None:
    """Fleet-wide relative random-walk drift per hour, pooled over the rows of ``values``.

    Each row is divided by its median; for a random walk of step variance q plus short-memory
    noise, E (x[t+L] - x[t])^2 = const + L q once L exceeds the noise memory, so
    q_i = (V_long - V_short) / (long - short), with robust scales (1.4826 x median |lag difference|,
    not centred: a drift's trend is what we measure). The 20 %-trimmed mean of q_i over rows is
    returned as a standard deviation (None when fewer than ``min_series`` rows qualify).
    """
    from scipy.stats import trim_mean

    values = np.asarray(values, dtype=float)
    if values.ndim != 2 or values.shape[1] < long + 12:
        return None
    with np.errstate(all="ignore"), quiet_warnings():
        med = np.nanmedian(values, axis=1, keepdims=True)
        r = values / np.where(med != 0, med, np.nan)

        def robust_var(lag):
            return (1.4826 * np.nanmedian(np.abs(r[:, lag:] - r[:, :-lag]), axis=1)) ** 2

        q = (robust_var(long) - robust_var(short)) / (long - short)
    q = q[np.isfinite(q)]
    if q.size < min_series:
        return None
    return float(math.sqrt(max(float(trim_mean(q, 0.2)), 0.0)))


def screen_tail(values: np.ndarray, bad: int, z: float, tails=(3, 6, 12), window: int = 48) -> np.ndarray:
    """Rows of ``values`` whose last 3, 6 or 12 hours (their median) sit more than ``z`` noise units the bad way
    from the median of the ``window`` hours before them (noise: MAD of first differences, the
    white-noise scale). Looser than the change-point test it gates (which needs about 5 such units
    at the default p-value, more with serial correlation or drift): it only decides which series
    that test looks at."""
    n, hours = values.shape
    if n == 0:
        return np.zeros(0, dtype=bool)
    end = max(hours - max(tails), 1)
    ref = values[:, max(0, end - window) : end]  # the recent past, as the change-point test sees it
    med = np.median if not np.isnan(values).any() else np.nanmedian  # nanmedian is ~10x slower
    with np.errstate(all="ignore"), quiet_warnings():
        level = med(ref, axis=1)
        d = np.diff(values, axis=1)
        sigma = 1.4826 * med(np.abs(d - med(d, axis=1, keepdims=True)), axis=1) / math.sqrt(2)
        sigma = np.where(sigma > 0, sigma, np.nanmean(np.abs(d), axis=1) / math.sqrt(2))
        hit = np.zeros(n, dtype=bool)
        for m in tails:
            tail = values[:, -m:]
            k = np.count_nonzero(~np.isnan(tail), axis=1)
            shift = bad * (med(tail, axis=1) - level)  # median: an outlier hour does not pass
            zt = shift / (sigma / np.sqrt(np.maximum(k, 1)))
            hit |= (k > 0) & ((zt > z) | ((sigma == 0) & (shift > 0)))
    return hit | np.isnan(sigma)


class quiet_warnings:
    def __enter__(self):
        import warnings

        self._w = warnings.catch_warnings()
        self._w.__enter__()
        warnings.simplefilter("ignore", RuntimeWarning)

    def __exit__(self, *exc):
        return self._w.__exit__(*exc)


def severity_of(magnitude_pct: float, share: float) -> str:
    """Severity from the extra GPU time the change costs: |magnitude| x share of the job's GPU time."""
    impact = min(abs(magnitude_pct), 1000.0) / 100.0 * share
    if impact >= 0.10:
        return "critical"
    if impact >= 0.03:
        return "high"
    if impact >= 0.005:
        return "medium"
    return "low"
