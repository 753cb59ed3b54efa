"""The noise model: hourly series noise and per-window summaries of heavy-tailed launch durations.

Per-launch durations follow a two-component lognormal mixture: a body ``LN(mu, sigma)`` and, with
probability ``p_tail``, a tail ``LN(mu + ln(TAIL_RATIO), TAIL_SIGMA)`` (preemption, clock dips,
contention spikes), which gives the long right tail seen in CUPTI traces. A window's launches are
not drawn one by one: the histogram of the contract (bucket = floor(16 log2 ns)) is drawn directly,
each bucket count Poisson with mean ``lambda * P(bucket)`` (so the window's launch count, their sum,
is Poisson(lambda)), and total, min, max and sum of squares are computed from the bucket counts
(durations are placed at the bucket's geometric centre, min and max inside their buckets), so
``min <= mean <= max``, ``sumsq >= total^2 / launches`` and histogram counts sum to ``launches``.

Hourly means move by an AR(1) process per series plus a slow random-walk drift, and a few percent
of series-hours are outliers (a multiplicative spike); see ``hourly_log_noise``.
"""

from __future__ import annotations

import math

import numpy as np

from cudawatch.shards import HIST_BUCKETS_PER_OCTAVE

TAIL_RATIO = 3.0
TAIL_SIGMA = 0.6
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


def window_summaries(rng: np.random.Generator, lam: np.ndarray, median_ns: np.ndarray, sigma: np.ndarray,
                     p_tail: np.ndarray, *, chunk: int = 8192):
    """Draw each row's window summary: launch count, total/min/max ns, sum of squares, histogram.

    lam: expected launches per row; median_ns: body median; sigma, p_tail: body spread and tail
    probability. Returns (launches, total_ns, min_ns, max_ns, sumsq, hist_offsets, hist_bucket,
    hist_count) with the histogram as a flattened list column (offsets of length rows + 1).
    """
    n = lam.shape[0]
    mu = np.log(median_ns)
    lo_b = np.floor((mu - 4.0 * sigma) / _LN2_PER_BUCKET).astype(np.int64)
    hi_b = np.ceil((mu + math.log(TAIL_RATIO) + 3.0 * TAIL_SIGMA) / _LN2_PER_BUCKET).astype(np.int64)
    k = int((hi_b - lo_b).max()) + 1 if n else 1
    launches = np.zeros(n, np.int64)
    total = np.zeros(n, np.float64)
    sumsq = np.zeros(n, np.float64)
    min_ns = np.zeros(n, np.float64)
    max_ns = np.zeros(n, np.float64)
    nnz = np.zeros(n, np.int64)
    buckets_parts, counts_parts = [], []
    steps = np.arange(k + 1)
    for a in range(0, n, chunk):
        b = min(n, a + chunk)
        edges_b = lo_b[a:b, None] + steps[None, :]
        ln_edges = edges_b * _LN2_PER_BUCKET
        m, s, p = mu[a:b, None], sigma[a:b, None], p_tail[a:b, None]
        cdf = (1 - p) * norm_cdf((ln_edges - m) / s) + p * norm_cdf((ln_edges - m - math.log(TAIL_RATIO)) / TAIL_SIGMA)
        pmf = np.diff(cdf, axis=1)
        pmf /= np.maximum(pmf.sum(axis=1, keepdims=True), 1e-300)
        counts = rng.poisson(lam[a:b, None] * pmf)
        bucket = edges_b[:, :-1]
        centre = np.exp((bucket + 0.5) * _LN2_PER_BUCKET)
        launches[a:b] = counts.sum(axis=1)
        total[a:b] = (counts * centre).sum(axis=1)
        # Within-bucket spread (uniform in log over a 4.4 % wide bucket) adds ~0.016 % of centre^2.
        sumsq[a:b] = (counts * centre**2).sum(axis=1) * (1 + 1.6e-4)
        nz = counts > 0
        nnz[a:b] = nz.sum(axis=1)
        first = np.argmax(nz, axis=1)
        last = k - 1 - np.argmax(nz[:, ::-1], axis=1)
        rows = np.arange(b - a)
        lo_edge = np.exp(bucket[rows, first] * _LN2_PER_BUCKET)
        hi_edge = np.exp((bucket[rows, last] + 1) * _LN2_PER_BUCKET)
        u = rng.random((2, b - a))
        min_ns[a:b] = lo_edge + (centre[rows, first] - lo_edge) * u[0]
        max_ns[a:b] = centre[rows, last] + (hi_edge - centre[rows, last]) * u[1] * 0.999
        buckets_parts.append(bucket[nz])
        counts_parts.append(counts[nz])
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum(nnz, out=offsets[1:])
    hb = np.concatenate(buckets_parts) if buckets_parts else np.zeros(0, np.int64)
    hc = np.concatenate(counts_parts) if counts_parts else np.zeros(0, np.int64)
    return launches, total, min_ns, max_ns, sumsq, offsets, hb, hc
