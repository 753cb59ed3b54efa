"""Baselines per watched series: the design article's 24 h EWMA and robust trailing-window statistics.

``update_baselines(con, as_of)`` writes one row per series and hour into the ``baselines`` table
(key: series_key, as_of), which analysts query directly:

- ``ewma``: exponentially weighted moving average of the hourly values up to ``as_of``, with
  ``alpha`` per hour (default 2/(24+1), the EWMA whose centre of mass is 12 h, i.e. a "24 h"
  span; Roberts, "Control chart tests based on geometric moving averages", Technometrics 1959).
  Incremental: the row of ``as_of - 1 h`` is folded with the new hour; without it the EWMA is
  recomputed over the trailing window.
- ``ewma_prev``, ``deviation`` and ``ewma_severity``: the article's check of this hour against the
  previous EWMA (> 20 % medium, > 50 % high; analytics.detect.ewma_deviation_check).
- ``median``, ``mad`` (unscaled median absolute deviation), ``p10``/``p50``/``p90`` and ``n`` over
  the trailing ``window_hours`` (robust to outlier hours; Hampel 1974, doi:10.1080/01621459.1974.10482962).

Idempotent: rerunning an hour replaces that hour's rows with the same values.
"""

from __future__ import annotations

import datetime as dt

import numpy as np
import pyarrow as pa

from analytics.store import baselines as store_baselines
from analytics.store import series as sr
from analytics.trend import ewma, ewma_deviation_check, quiet_warnings
from cudawatch.shards import hour_floor

DEFAULT_ALPHA = 2.0 / (24 + 1)


def update_baselines(con, as_of: dt.datetime, *, alpha: float = DEFAULT_ALPHA, window_hours: int = 168,
                     series: tuple[str, ...] | None = None) -> None:
    """Compute and store the baselines of every watched series for the hour ``as_of``.

    alpha: EWMA weight of the newest hour (0 < alpha <= 1). window_hours: trailing window of the
    robust statistics. series: names from analytics.store.series.SPECS (default: all).
    """
    if not 0 < alpha <= 1:
        raise ValueError(f"alpha must be in (0, 1], got {alpha}")
    if window_hours < 1:
        raise ValueError(f"window_hours must be >= 1, got {window_hours}")
    as_of = hour_floor(as_of)
    store_baselines.ensure_table(con)
    prev_hour = as_of - sr.HOUR
    for name in series or tuple(s.name for s in sr.SPECS):
        mat = sr.load_matrix(con, sr.SPEC_BY_NAME[name], as_of, window_hours)
        if not mat.keys:
            continue
        prev = store_baselines.previous_ewma(con, name, prev_hour, alpha)
        store_baselines.replace_hour(con, name, as_of, compute_baselines(mat, prev, as_of, alpha=alpha, window_hours=window_hours))


def compute_baselines(mat: sr.SeriesMatrix, prev_ewma: dict[str, float], as_of: dt.datetime, *,
                      alpha: float = DEFAULT_ALPHA, window_hours: int = 168) -> pa.Table:
    """The ``baselines`` rows of one series family for the hour ``as_of`` (pure: no I/O).

    mat: the family's trailing ``window_hours`` ending at ``as_of``; prev_ewma: the EWMA of each
    series key at ``as_of - 1 h`` (missing keys are recomputed over the window).
    """
    name = mat.spec.name
    keys = [sr.series_key(name, k) for k in mat.keys]
    v = mat.values
    last = v[:, -1]
    full = ewma(v, alpha)
    ew_prev = np.array([prev_ewma.get(k, np.nan) for k in keys], dtype=float)
    ew_prev = np.where(np.isnan(ew_prev), full[:, -2] if v.shape[1] > 1 else np.nan, ew_prev)
    ew = np.where(np.isnan(last), ew_prev, np.where(np.isnan(ew_prev), last, alpha * last + (1 - alpha) * ew_prev))
    ew = np.where(np.isnan(ew), full[:, -1], ew)
    with quiet_warnings():
        med = np.nanmedian(v, axis=1)
        mad = np.nanmedian(np.abs(v - med[:, None]), axis=1)
        p10, p50, p90 = np.nanpercentile(v, [10, 50, 90], axis=1)
        dev = np.where((ew_prev != 0) & ~np.isnan(last), np.abs(last - ew_prev) / np.abs(ew_prev), np.nan)
    n = np.count_nonzero(~np.isnan(v), axis=1)
    sev = [ewma_deviation_check(float(x), float(b)) for x, b in zip(last, ew_prev)]
    cols = list(zip(*mat.keys))
    return pa.table({
        "series": [name] * len(keys), "series_key": keys,
        "job": list(cols[0]), "kernel": list(cols[1]), "kernel_id": list(cols[2]), "gpu_uuid": list(cols[3]),
        "signature": list(cols[4]), "as_of": pa.array([as_of] * len(keys), pa.timestamp("us", tz="UTC")),
        "value": _col(last), "ewma": _col(ew), "ewma_prev": _col(ew_prev), "deviation": _col(dev), "ewma_severity": sev,
        "n": n.astype(np.int64), "median": _col(med), "mad": _col(mad), "p10": _col(p10), "p50": _col(p50), "p90": _col(p90),
        "alpha": [float(alpha)] * len(keys), "window_hours": pa.array([window_hours] * len(keys), pa.int32()),
    })


def _col(a: np.ndarray) -> pa.Array:
    a = np.asarray(a, dtype=float)
    return pa.array(a, mask=np.isnan(a))
