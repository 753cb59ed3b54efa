"""The noise model: hourly series noise and per-window summaries of heavy-tailed launch durations.

Per-launch durations follow a two-component lognormal mixture: a body ``LN(mu, sigma)`` and, with
probability ``p_tail``, a tail ``LN(mu + ln(TAIL_RATIO), TAIL_SIGMA)`` (preemption, clock dips,
contention spikes), which gives the long right tail seen in CUPTI traces. A window's launches are
not drawn one by one: the histogram of the contract (bucket = floor(16 log2 ns)) is drawn directly,
each bucket count Poisson with mean ``lambda * P(bucket)`` (so the window's launch count, their sum,
is Poisson(lambda); counts with a mean above 64 use the normal approximation), and total, min, max
and sum of squares are computed from the bucket counts (durations are placed at the bucket's
geometric centre, min and max inside their buckets), so ``min <= mean <= max``,
``sumsq >= total^2 / launches`` and histogram counts sum to ``launches``. Bucket probabilities are
tabulated per duration class (``WindowSampler``).

Hourly means move by an AR(1) process per series plus a slow random-walk drift, and a few percent
of series-hours are outliers (a multiplicative spike); see ``hourly_log_noise``.
"""

from __future__ import annotations

import math

import numpy as np

from cudawatch.shards import HIST_BUCKETS_PER_OCTAVE

TAIL_RATIO = 2.5
TAIL_SIGMA = 0.5
_LN2_PER_BUCKET = math.log(2.0) / HIST_BUCKETS_PER_OCTAVE


def norm_cdf(x: np.ndarray) -> np.ndarray:
    """Standard normal CDF via the erf approximation of Abramowitz & Stegun 7.1.26 (|error| < 1.5e-7)."""
    z = np.abs(x) / math.sqrt(2.0)
    t = 1.0 / (1.0 + 0.3275911 * z)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    erf = 1.0 - poly * np.exp(-z * z)
    return 0.5 * (1.0 + np.sign(x) * erf)


def mixture_mean_factor(sigma: np.ndarray, p_tail: np.ndarray) -> np.ndarray:
    """E[duration] / body median of the mixture, so a target mean converts to the body median."""
    return (1 - p_tail) * np.exp(sigma**2 / 2) + p_tail * TAIL_RATIO * math.exp(TAIL_SIGMA**2 / 2)


def hourly_log_noise(rng: np.random.Generator, n_series: int, hours: int, sigma: np.ndarray, *, phi: float = 0.35,
                     drift_sigma: float = 0.0015, outlier_p: float = 0.02) -> np.ndarray:
    """Log-multipliers (n_series x hours) of a series' hourly mean.

    AR(1) with coefficient ``phi`` and stationary standard deviation ``sigma`` (per series), plus a
    random walk with step ``drift_sigma`` (slow drift), plus outlier hours: with probability
    ``outlier_p`` a series-hour is multiplied by a spike of +8 % to +45 %.
    """
    sigma = np.broadcast_to(np.asarray(sigma, float), (n_series,))
    eps = rng.normal(0.0, 1.0, (n_series, hours)) * (sigma * math.sqrt(1 - phi**2))[:, None]
    ar = np.empty((n_series, hours))
    ar[:, 0] = rng.normal(0.0, 1.0, n_series) * sigma
    for h in range(1, hours):
        ar[:, h] = phi * ar[:, h - 1] + eps[:, h]
    drift = np.cumsum(rng.normal(0.0, drift_sigma, (n_series, hours)), axis=1)
    spikes = (rng.random((n_series, hours)) < outlier_p) * rng.uniform(0.08, 0.45, (n_series, hours))
    return ar + drift + np.log1p(spikes)


#: Above this mean a Poisson count is drawn from its normal approximation (relative error of the
#: standard deviation < 1 %, and numpy's exact sampler is ~10x slower there).
POISSON_NORMAL_ABOVE = 64.0


def _poisson(rng: np.random.Generator, mean: np.ndarray) -> np.ndarray:
    """Poisson counts with the given means; large means via N(m, sqrt(m)), rounded, clipped at 0."""
    big = mean > POISSON_NORMAL_ABOVE
    out = np.empty(mean.shape, np.int64)
    out[~big] = rng.poisson(mean[~big])
    m = mean[big]
    out[big] = np.maximum(0, np.rint(m + np.sqrt(m) * rng.standard_normal(m.size)))
    return out


#: Fractional bucket offsets tabulated per class; the pmf of a row interpolates between two.
_OFFSETS = 32


class WindowSampler:
    """Draws window summaries for rows of a few duration classes (each with its sigma and p_tail).

    The bucket probabilities of the mixture depend on the class and on where the median falls
    inside its bucket, so they are tabulated once per class at ``_OFFSETS`` sub-bucket offsets and
    interpolated linearly, instead of evaluating the normal CDF for every row and bucket.
    """

    def __init__(self, sigma: np.ndarray, p_tail: np.ndarray):
        sigma = np.asarray(sigma, float)
        p_tail = np.asarray(p_tail, float)
        self.below = np.ceil(4.0 * sigma / _LN2_PER_BUCKET)  # buckets kept below the median, per class
        above = math.log(TAIL_RATIO) + 3.0 * TAIL_SIGMA
        self.k = int((self.below + 1 + np.ceil(above / _LN2_PER_BUCKET)).max()) + 1
        edges = np.arange(self.k + 1)[None, None, :] * _LN2_PER_BUCKET
        frac = np.arange(_OFFSETS + 1)[None, :, None] / _OFFSETS
        mu = (self.below[:, None, None] + frac) * _LN2_PER_BUCKET
        s, p = sigma[:, None, None], p_tail[:, None, None]
        cdf = (1 - p) * norm_cdf((edges - mu) / s) + p * norm_cdf((edges - mu - math.log(TAIL_RATIO)) / TAIL_SIGMA)
        pmf = np.diff(cdf, axis=2)
        self.table = pmf / pmf.sum(axis=2, keepdims=True)  # (classes, offsets + 1, k)
        self.spread = np.exp(np.arange(self.k) * _LN2_PER_BUCKET)  # bucket centre / first bucket centre

    def draw(self, rng: np.random.Generator, lam: np.ndarray, median_ns: np.ndarray, cls: np.ndarray, *, chunk: int = 16384):
        """Each row's window summary: launch count, total/min/max ns, sum of squares, histogram.

        lam: expected launches per row; median_ns: body median; cls: class index per row. Returns
        (launches, total_ns, min_ns, max_ns, sumsq, hist_offsets, hist_bucket, hist_count), the
        histogram flattened (offsets of length rows + 1; buckets ascending within a row).
        """
        n, k = lam.shape[0], self.k
        u = np.log(median_ns) / _LN2_PER_BUCKET
        lo_b = np.floor(u - self.below[cls]).astype(np.int64)
        pos = (u - self.below[cls] - lo_b) * _OFFSETS
        q = np.minimum(pos.astype(np.int64), _OFFSETS - 1)
        t = (pos - q)[:, None]
        launches = np.zeros(n, np.int64)
        total = np.zeros(n)
        sumsq = np.zeros(n)
        min_ns = np.zeros(n)
        max_ns = np.zeros(n)
        nnz = np.zeros(n, np.int64)
        buckets_parts, counts_parts = [], []
        cols = np.arange(k)
        for a in range(0, n, chunk):
            b = min(n, a + chunk)
            c, qq = cls[a:b], q[a:b]
            pmf = self.table[c, qq] * (1 - t[a:b]) + self.table[c, qq + 1] * t[a:b]
            counts = _poisson(rng, lam[a:b, None] * pmf)
            c0 = np.exp((lo_b[a:b] + 0.5) * _LN2_PER_BUCKET)  # centre of each row's first bucket
            weighted = counts @ self.spread
            launches[a:b] = counts.sum(axis=1)
            total[a:b] = c0 * weighted
            # Within-bucket spread (uniform in log over a 4.4 % wide bucket) adds ~0.016 % of centre^2.
            sumsq[a:b] = c0**2 * (counts @ self.spread**2) * (1 + 1.6e-4)
            nz = counts > 0
            nnz[a:b] = nz.sum(axis=1)
            first = np.argmax(nz, axis=1)
            last = k - 1 - np.argmax(nz[:, ::-1], axis=1)
            half = math.exp(_LN2_PER_BUCKET / 2)
            lo_centre = c0 * self.spread[first]
            hi_centre = c0 * self.spread[last]
            v = rng.random((2, b - a))
            min_ns[a:b] = lo_centre / half + (lo_centre - lo_centre / half) * v[0]
            max_ns[a:b] = hi_centre + (hi_centre * half - hi_centre) * v[1] * 0.999
            buckets_parts.append((lo_b[a:b, None] + cols[None, :])[nz])
            counts_parts.append(counts[nz])
        offsets = np.zeros(n + 1, np.int64)
        np.cumsum(nnz, out=offsets[1:])
        hb = np.concatenate(buckets_parts) if buckets_parts else np.zeros(0, np.int64)
        hc = np.concatenate(counts_parts) if counts_parts else np.zeros(0, np.int64)
        return launches, total, min_ns, max_ns, sumsq, offsets, hb, hc
