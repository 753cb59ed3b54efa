"""Change points in one hourly series: robust, local, significance-tested binary segmentation.

``detect_change_points(values, **options)`` is a pure function on a 1-D sequence (numpy/scipy only,
no I/O, no clock). The method follows the two-step design of Apache Otava (Daly et al., "Change
Point Detection in Software Performance Testing", ICPE 2020, doi:10.1145/3358960.3375791; Fleming
et al., "Hunter", ICPE 2023, doi:10.1145/3578244.3583719), which itself builds on the
E-divisive family of Matteson & James ("A Nonparametric Approach for Multiple Change Point
Analysis of Multivariate Data", JASA 109(505), 2014, doi:10.1080/01621459.2013.849605):

1. *Split*: binary segmentation (Vostrikova 1981). In each segment the candidate split is the
   index with the largest *local* two-sample Student t statistic, comparing at most ``window``
   points on each side (a moving-sum scan, Eichinger & Kirch, Bernoulli 2018,
   doi:10.3150/17-BEJ1006). The local window keeps slow drift from looking like a step and
   lets a short fresh segment at the end of the series (``min_size`` points) be tested
   against the recent past, which is what incremental hourly detection needs.
2. *Merge*: as in Otava/Hunter, the weakest change point (largest p-value, else smallest
   magnitude) is removed while it fails ``max_pvalue`` or ``min_magnitude_pct``, and its
   neighbours are re-tested on the merged segments.

Robustness: values are first cleaned with a Hampel filter (Pearson, "Outliers in process
modeling and identification", IEEE TCST 2002, doi:10.1109/87.974338), replacing single outlier
hours by the local median; the noise scale is the MAD of first differences, which a step does
not inflate. With ``period`` (e.g. 24 for hourly data with a daily cycle) a robust seasonal
profile (per-phase median of the residual from a centred rolling median) is removed first.
Values are rescaled before any arithmetic, so huge values do not overflow.

The p-value is the two-sided Student t test of the two local segments at the chosen split, as
in Otava; like Otava's, it is not corrected for the choice of the split, so the default
``max_pvalue`` is set stricter than a single test would need (calibrated in
benchmarks/detection.py, see docs/detection.md).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Sequence

import numpy as np
from scipy import special as _special

#: Defaults that work without per-series tuning (see docs/detection.md for how they were chosen).
DEFAULTS = dict(min_size=3, window=48, max_pvalue=1e-6, min_magnitude_pct=2.0, period=None, hampel_k=4.0, drift=0.0)


class ChangePointError(ValueError):
    """Input that has no sensible change-point answer (not 1-D, not numeric, infinite values)."""


@dataclass(frozen=True)
class ChangePoint:
    """A change of level at ``index``: the first index of the new segment (in the caller's indexing).

    mean_before / mean_after: means of the (outlier-cleaned) local segments either side.
    magnitude_pct: signed relative change, 100 * (after - before) / |before| (±inf when before is 0).
    p_value: two-sided Student t test of the two local segments.
    """

    index: int
    mean_before: float
    mean_after: float
    magnitude_pct: float
    p_value: float


def detect_change_points(
    values: Sequence[float],
    *,
    min_size: int = DEFAULTS["min_size"],
    window: int = DEFAULTS["window"],
    max_pvalue: float = DEFAULTS["max_pvalue"],
    min_magnitude_pct: float = DEFAULTS["min_magnitude_pct"],
    period: int | None = DEFAULTS["period"],
    hampel_k: float | None = DEFAULTS["hampel_k"],
    drift: float = DEFAULTS["drift"],
) -> list[ChangePoint]:
    """Find significant level shifts in ``values``, sorted by index.

    values: 1-D numbers; NaN/None mark missing points (skipped; indices refer to the input).
    min_size: fewest points in any segment (the last segment too, so a step is reported once
        ``min_size`` points of the new level exist).
    window: at most this many points each side enter the local test.
    max_pvalue: significance needed to keep a change point.
    min_magnitude_pct: smallest |relative change| of the means to keep a change point.
    period: remove a daily-like seasonal profile of this length (applied when at least three
        periods of data exist); None for no adjustment.
    hampel_k: replace points further than this many robust sigmas from the local median by the
        median (single outlier hours); None disables the filter.
    drift: standard deviation per hour of a slow random-walk drift of the level, as a fraction of
        the level (e.g. 0.0015); it widens the test so that wandering is not taken for a step
        (var of a difference of window means gains drift^2 * level^2 * (n1 + n2) / 3). One series
        is too short to estimate it; analytics.detect estimates it across the fleet.

    Returns [] for series too short to hold two segments and for constant series. Raises
    ChangePointError for input that is not 1-D numeric or holds infinities, and ValueError for
    bad options.
    """
    if min_size < 1 or window < min_size or not (0 < max_pvalue <= 1) or min_magnitude_pct < 0 or not drift >= 0:
        raise ValueError(f"bad options: min_size={min_size}, window={window}, max_pvalue={max_pvalue}, min_magnitude_pct={min_magnitude_pct}")
    if period is not None and period < 2:
        raise ValueError(f"period must be >= 2 or None, got {period}")
    raw = _as_array(values)
    positions = np.flatnonzero(~np.isnan(raw))
    x = raw[positions]
    n = x.size
    if n < 2 * min_size:
        return []
    # Rescale first, by powers of two (exact): huge values cannot overflow and the result does not
    # depend on the unit. y = x / s0 lies in (-2, 2); z = (y - offset) / s1 in (-2, 2).
    peak = float(np.max(np.abs(x)))
    if peak == 0:
        return []
    s0 = math.ldexp(1.0, math.frexp(peak)[1] - 1)
    y = x / s0
    offset = float(np.median(y))
    span = float(np.max(np.abs(y - offset)))
    if span == 0:
        return []
    s1 = math.ldexp(1.0, math.frexp(span)[1] - 1)
    z = (y - offset) / s1
    if period is not None and n >= 3 * period:
        z = z - seasonal_profile(z, period)
    sigma = robust_sigma(z)
    if hampel_k is not None and sigma > 0:
        z = hampel(z, sigma, hampel_k)
    level = offset / s1  # a segment mean m of z is (m + level) * s1 * s0 in the caller's units
    # white-noise variance of the cleaned series (from differences) and drift variance per hour
    noise = (robust_sigma(z) ** 2, (drift * abs(offset) / s1) ** 2)
    cps = _split(z, min_size, window, max_pvalue, noise)
    cps = _merge(z, sorted(cps), min_size, window, max_pvalue, min_magnitude_pct, level, noise)
    out = []
    for tau, before, after, p in cps:
        b, a = (before + level) * s1 * s0, (after + level) * s1 * s0
        out.append(ChangePoint(int(positions[tau]), float(b), float(a), _pct(b, a), float(p)))
    return out


def _as_array(values) -> np.ndarray:
    try:
        arr = np.asarray(values, dtype=float)
    except (TypeError, ValueError) as exc:
        raise ChangePointError(f"values must be a 1-D sequence of numbers: {exc}") from exc
    if arr.ndim != 1:
        raise ChangePointError(f"values must be 1-D, got shape {arr.shape}")
    if np.isinf(arr).any():
        raise ChangePointError(f"values hold {int(np.isinf(arr).sum())} infinite values; use NaN for missing points")
    return arr


def _pct(before: float, after: float) -> float:
    if before == 0:
        return 0.0 if after == 0 else math.copysign(math.inf, after)
    return 100.0 * (after - before) / abs(before)


def robust_sigma(z: np.ndarray) -> float:
    """Noise scale from the MAD of first differences (a step moves one difference only)."""
    if z.size < 3:
        return float(np.std(z))
    d = np.diff(z)
    mad = float(np.median(np.abs(d - np.median(d))))
    sigma = 1.4826 * mad / math.sqrt(2.0)
    if sigma == 0:  # mostly-constant series: fall back to the mean absolute difference
        sigma = float(np.mean(np.abs(d))) / math.sqrt(2.0)
    return sigma


def hampel(z: np.ndarray, sigma: float, k: float, half: int = 3) -> np.ndarray:
    """Hampel filter: points > k*sigma from the median of their (2*half+1)-window take that median.

    Windows are truncated at the ends, so the last point is compared with the points before it.
    """
    n = z.size
    width = 2 * half + 1
    med = np.empty(n)
    if n >= width:
        med[half : n - half] = np.median(np.lib.stride_tricks.sliding_window_view(z, width), axis=1)
    zl = z.tolist()
    for i in [*range(min(half, n)), *range(max(n - half, min(half, n)), n)]:
        med[i] = statistics.median(zl[max(0, i - half) : i + half + 1])
    out = z.copy()
    bad = np.abs(z - med) > k * sigma
    out[bad] = med[bad]
    return out


def seasonal_profile(z: np.ndarray, period: int, exclude_tail: int = 6) -> np.ndarray:
    """Robust seasonal component of ``z`` (same length, zero median over a period).

    Classical decomposition with a robust last step: the level is the centred moving average
    over one period (which cancels any periodic component exactly; held constant where the window
    would run off the ends), and the profile at each phase is the median over cycles of the
    residual. The last ``exclude_tail`` points are left out of the profile estimate when enough
    data remains, so a fresh step is not absorbed into it.
    """
    n = z.size
    c = np.concatenate([[0.0], np.cumsum(z)])
    full = (c[period:] - c[:-period]) / period  # mean of z[i:i+period], i = 0..n-period
    # centre: the window z[i:i+period] is centred at i + (period - 1) / 2
    centres = np.arange(full.size) + (period - 1) / 2.0
    level = np.interp(np.arange(n), centres, full)
    resid = z - level
    use = n - exclude_tail if n - exclude_tail >= 2 * period else n
    cycles = math.ceil(use / period)
    grid = np.full(cycles * period, np.nan)
    grid[:use] = resid[:use]
    prof = np.nanmedian(grid.reshape(cycles, period), axis=0)
    prof -= np.median(prof)
    return prof[np.arange(n) % period]


def _inflation(var, noise):
    """Variance factor (1 + rho) / (1 - rho) for serially correlated noise (AR(1) and slow drift).

    rho = 1 - noise / var, from the within-segment variance ``var`` and the white-noise variance
    ``noise`` estimated from first differences (for AR(1) noise, var(diff) = 2 var (1 - rho));
    clipped to [0, 0.5] (a factor of at most 3). Without the correction hourly noise that wanders (as real GPU series do)
    makes the t test overconfident (Lund et al., "Changepoint detection in periodic and
    autocorrelated time series", J. Climate 2007, doi:10.1175/JCLI4291.1).
    """
    with np.errstate(divide="ignore", invalid="ignore"):
        rho = np.clip(1.0 - noise / var, 0.0, 0.5)
    rho = np.where(np.isfinite(rho), rho, 0.0)
    return (1.0 + rho) / (1.0 - rho)


def _local_t(z: np.ndarray, lo: int, hi: int, min_size: int, window: int, noise=(0.0, 0.0)):
    """Local t statistic for every split tau in [lo+min_size, hi-min_size].

    The scale is the series' white-noise sigma (from first differences) plus the drift term, not
    the pooled within-window variance: another step inside the window would inflate the latter
    and hide both steps (the split pass only proposes candidates; the merge pass tests them on
    their own segments with the pooled variance)."""
    seg = z[lo:hi]
    c1 = np.concatenate([[0.0], np.cumsum(seg)])
    c2 = np.concatenate([[0.0], np.cumsum(seg * seg)])
    taus = np.arange(min_size, seg.size - min_size + 1)
    a = np.maximum(taus - window, 0)
    b = np.minimum(taus + window, seg.size)
    n1, n2 = taus - a, b - taus
    s1, s2 = c1[taus] - c1[a], c1[b] - c1[taus]
    q1, q2 = c2[taus] - c2[a], c2[b] - c2[taus]
    m1, m2 = s1 / n1, s2 / n2
    ss = np.maximum(q1 - s1 * m1, 0) + np.maximum(q2 - s2 * m2, 0)
    df = n1 + n2 - 2
    pooled = np.where(df > 0, ss / np.maximum(df, 1), 0.0)
    # Float noise floor: a noise sigma below the rounding level of the data is taken as that
    # level, so t stays finite and comparable between splits (an infinite t at every split would
    # make the scan pick the first split, not the step).
    floor = (1e-12 * float(np.max(np.abs(seg)))) ** 2
    var = np.maximum(np.where(noise[0] > 0, noise[0], pooled), floor)
    se = np.sqrt(var * (1.0 / n1 + 1.0 / n2) + noise[1] * (n1 + n2) / 3.0)
    diff = m2 - m1
    # Differences at the rounding level of the data are no change.
    tiny = 1e-12 * (np.abs(m1) + np.abs(m2) + 1e-300)
    with np.errstate(divide="ignore", invalid="ignore"):
        t = np.where(np.abs(diff) <= tiny, 0.0, diff / np.maximum(se, 1e-300))
    return taus + lo, t, df, m1, m2


def _p_value(t: float, df: int) -> float:
    if math.isinf(t):
        return 0.0
    if df <= 0:
        return 1.0
    return float(2.0 * _special.stdtr(df, -abs(t)))


def _split(z, min_size, window, max_pvalue, noise) -> list[int]:
    """Binary segmentation on the local t scan; a first pass at 10x max_pvalue, as Otava's split."""
    first_pass = min(1.0, 10 * max_pvalue)
    found, todo = [], [(0, z.size)]
    while todo:
        lo, hi = todo.pop()
        if hi - lo < 2 * min_size:
            continue
        taus, t, df, _, _ = _local_t(z, lo, hi, min_size, window, noise)
        i = int(np.argmax(np.abs(t)))
        if _p_value(float(t[i]), int(df[i])) > first_pass:
            continue
        tau = int(taus[i])
        found.append(tau)
        todo += [(lo, tau), (tau, hi)]
    return found


def _test(z, lo, tau, hi, window, noise):
    """Local t test of z[max(lo, tau-window):tau] against z[tau:min(hi, tau+window)]."""
    left, right = z[max(lo, tau - window) : tau], z[tau : min(hi, tau + window)]
    m1, m2 = float(left.mean()), float(right.mean())
    df = left.size + right.size - 2
    ss = float(((left - m1) ** 2).sum() + ((right - m2) ** 2).sum())
    var = ss / df if df > 0 else 0.0
    se = math.sqrt(var * float(_inflation(np.array(var), noise[0])) * (1 / left.size + 1 / right.size)
                   + noise[1] * (left.size + right.size) / 3.0) if df > 0 else 0.0
    diff = m2 - m1
    tiny = 1e-12 * (abs(m1) + abs(m2) + 1e-300)
    if abs(diff) <= tiny:
        p = 1.0
    elif se <= tiny:
        p = 0.0
    else:
        p = _p_value(diff / se, df)
    return m1, m2, p


def _merge(z, taus, min_size, window, max_pvalue, min_magnitude_pct, level, noise):
    """Otava/Hunter merge: drop the weakest change point until all pass both thresholds."""
    taus = list(taus)
    while taus:
        bounds = [0] + taus + [z.size]
        tested = [(tau, *_test(z, bounds[i], tau, bounds[i + 2], window, noise)) for i, tau in enumerate(taus)]
        mags = [abs(_pct(m1 + level, m2 + level)) for _, m1, m2, _ in tested]
        worst = max(range(len(tested)), key=lambda i: tested[i][3])
        if tested[worst][3] <= max_pvalue:
            worst = min(range(len(tested)), key=lambda i: mags[i])
            if mags[worst] >= min_magnitude_pct:
                return tested
        del taus[worst]
    return []
