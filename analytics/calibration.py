"""Thresholds per window length from a target false-alarm rate, set on the fleet's clean history.

Pure numpy. The sequential detector (analytics.sequential) compares the GLR of every window length
m with its own threshold h[m-1]. ``calibrate_thresholds`` takes the statistics an hourly replay
produced on regression-free history — ``stats`` (series, runs, max_window) and the onsets each run
would report — and returns the thresholds for which the replay raises ``target_per_1000_days``
alerts per 1,000 series-days, counted as the event lifecycle counts them (``count_alerts``: alarms
of one series within ``hold_hours`` of an alert's onset are that alert).

The thresholds share one tail probability p, weighted per window length: h[m-1] is the
(1 - p w_m) quantile of the statistic of window length m over all clean series-hours
(``tail_quantile``), and p is found by bisection on the alert count. Equal weights spread the
false-alarm budget evenly over window lengths (short windows, fast detection of large steps; long
windows, small steps); ``weights`` move it between them (the product's choice:
``analytics.fleet_calibration.WINDOW_WEIGHTS``), without per-series tuning.
"""

from __future__ import annotations

import numpy as np


def count_alerts(alarm: np.ndarray, onset: np.ndarray, hold_hours: int, run_hours: np.ndarray | None = None) -> np.ndarray:
    """Alerts per series of an hourly replay: alarm, onset (series, runs); a new alert needs no
    alert with an onset in the last ``hold_hours`` before this run. Returns (series,) counts."""
    n, R = alarm.shape
    runs = np.arange(R) if run_hours is None else np.asarray(run_hours)
    last = np.full(n, -10**9)
    count = np.zeros(n, dtype=int)
    for r in range(R):
        new = alarm[:, r] & (runs[r] - last > hold_hours)
        count += new
        last = np.where(new, onset[:, r], last)
    return count


def first_alerts(alarm: np.ndarray, onset: np.ndarray, hold_hours: int, run_hours: np.ndarray) -> list[list[tuple[int, int]]]:
    """The alerts of an hourly replay per series as (onset, run) pairs, same rule as count_alerts."""
    n, R = alarm.shape
    last = np.full(n, -10**9)
    out: list[list[tuple[int, int]]] = [[] for _ in range(n)]
    for r in range(R):
        new = alarm[:, r] & (run_hours[r] - last > hold_hours)
        for i in np.flatnonzero(new):
            out[i].append((int(onset[i, r]), int(run_hours[r])))
        last = np.where(new, onset[:, r], last)
    return out


def _empirical(s: np.ndarray, p: float) -> float:
    k = min(s.size - 1, max(0, int(np.ceil((1.0 - p) * s.size)) - 1))
    return float(s[k])


def tail_quantile(sorted_stats: np.ndarray, p: float, anchor: float = 1e-3) -> float:
    """The (1 - p) quantile of a statistic from its sorted clean sample; below ``anchor`` it is
    extrapolated with an exponential tail (peaks over threshold with shape 0; Pickands 1975,
    doi:10.1214/aos/1176343003) whose rate comes from the anchor and ten times the anchor, so a
    threshold for a rare false alarm rests on thousands of points, not on the few largest."""
    s = sorted_stats
    if s.size == 0:
        return float("inf")
    if p >= anchor or s.size * anchor < 20:
        return _empirical(s, p)
    q1, q2 = _empirical(s, 10 * anchor), _empirical(s, anchor)
    rate = np.log(10.0) / max(q2 - q1, 1e-9)
    return q2 + float(np.log(anchor / p)) / rate


def window_weights(weights, max_window: int) -> np.ndarray:
    """(max_window,) tail-probability weights of window lengths m = 1..max_window from ``weights``
    (one per window length from m = 1, the last repeated; None: all 1)."""
    w = np.ones(1) if weights is None or len(weights) == 0 else np.asarray(weights, float)
    if not (np.isfinite(w).all() and (w > 0).all()):
        raise ValueError(f"window weights must be positive and finite: {tuple(w.tolist())}")
    return np.r_[w, np.full(max(0, max_window - w.size), w[-1])][:max_window]


def _quantiles(sorted_stats: list[np.ndarray], p: float, w: np.ndarray) -> np.ndarray:
    return np.array([tail_quantile(s, min(0.5, p * wm)) for s, wm in zip(sorted_stats, w)])


def calibrate_thresholds(stats: np.ndarray, usable: np.ndarray, onset_of, *, series_days: float, target_per_1000_days: float,
                         hold_hours: int, min_len: int, run_hours: np.ndarray | None = None, eligible: np.ndarray | None = None,
                         iterations: int = 40, weights=None) -> tuple[np.ndarray, float, float]:
    """Thresholds (max_window,) for ``target_per_1000_days`` alerts on the clean replay.

    stats: (series, runs, M) GLR per window length; usable: same shape, True where the window may
    alarm (m >= min_len and enough valid hours). onset_of(alarm_window_mask) -> not used for the
    count beyond the window: the onset is taken as the argmax window, as analytics.sequential does;
    pass ``onset_of`` = (series, runs) onset hours of each run's argmax window. eligible: (series,
    runs), False where the alarm rule holds a run back whatever the thresholds.
    series_days: regression-free series-days the replay covers. weights: relative tail probability
    of each window length (``window_weights``; None: one p for all). Returns (thresholds, p, rate):
    the rate (alerts per 1,000 series-days) the replay raises at those thresholds (p: the weight-1 tail).
    """
    n, R, M = stats.shape
    w = window_weights(weights, M)
    flat = [np.sort(stats[:, :, m][usable[:, :, m]]) if m + 1 >= min_len else np.zeros(0) for m in range(M)]

    def rate(p):
        h = _quantiles(flat, p, w)
        alarm = (np.where(usable, stats, -np.inf) > h[None, None, :]).any(axis=2)
        if eligible is not None:
            alarm &= eligible
        return 1000.0 * count_alerts(alarm, onset_of, hold_hours, run_hours).sum() / series_days, h

    lo, hi = -12.0, -1.0  # log10 p
    for _ in range(iterations):
        mid = 0.5 * (lo + hi)
        r, _ = rate(10**mid)
        if r > target_per_1000_days:
            hi = mid
        else:
            lo = mid
    r, h = rate(10**lo)
    h = h.copy()
    h[: max(0, min_len - 1)] = np.inf
    return h, 10**lo, r
