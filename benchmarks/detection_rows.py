"""The rows of the detection benchmark: each replays the hourly protocol on a corpus and returns,
per series, its alerts as (onset hour, run hour) pairs. Used by benchmarks/detection.py.

- ``product_stats`` / ``oracle_stats`` / ``model_oracle_stats``: the product's hourly path on the
  loaded matrix (analytics.online: the day's noise model, ``scan_stats`` every hour), the same GLR
  with the corpus' realised level, cycle and drift path known (the oracle rows), and with only the
  true noise model known (level from the reference hours, the walk through the drift term). Their statistics are thresholded with
  ``alerts_from_stats`` (thresholds from analytics.calibration).
- ``old_detect_regressions``: ``analytics.detect.detect_regressions`` itself (with DetectConfig
  fields: ``sequential=False`` is the previous, change-point-only path), run hour by hour on a real
  DuckDB warehouse (the series are bulk-loaded into the raw ``kernels`` table; the rollups, the
  loading and the detection are the product's).
- ``competitor``: Otava, ruptures PELT on the trailing 168 hours each run, and the EWMA rule, with
  the same 2 % floor and the same one-alert-per-event rule.
"""

from __future__ import annotations

import dataclasses
import datetime as dt

import numpy as np

from analytics import calibration as cal
from analytics import fleet_calibration
from analytics import noise_model as nm
from analytics.outliers import OutlierLaw
from analytics import sequential as sq

HOLD = fleet_calibration.HOLD_HOURS  # alarms of a series within this many hours of an alert's onset are that alert
T0 = dt.datetime(2026, 11, 1, tzinfo=dt.timezone.utc)


def _replay(x, start, cfg, model_at, mean_at=None):
    n, hours = x.shape
    hod = np.arange(hours) % 24
    runs = np.arange(start, hours)
    M = cfg.max_window
    S = np.empty((n, runs.size, M))
    V = np.empty((n, runs.size, M))
    Z = np.zeros((n, runs.size, M))
    model = None
    for j, t in enumerate(runs):
        if j % 24 == 0:
            model = model_at(t)
        lo = t + 1 - M - cfg.reference_hours
        mp = None if mean_at is None else mean_at(t)
        sc = sq.scan(x[:, lo : t + 1], hod[lo : t + 1], model, cfg, mean_path=mp)
        S[:, j], V[:, j], Z[:, j] = sc.stat, sc.valid, sc.ref_z
    return runs, S, V, Z


def product_stats(values, start, cfg=sq.SequentialConfig(), min_history=None):
    """Hourly replay of the product's hourly path on the loaded matrix (analytics.fleet_calibration:
    the function a fleet's own calibration runs): every run gives ``analytics.online`` the trailing
    ``online.lookback_hours`` (what detect_regressions loads), the series it tests and their noise
    model come from ``online.fit_day`` at the UTC day's first run (the product stores that model in
    the warehouse and reads it back every run of the day: analytics.store.noise_models), and the
    statistics are ``online.scan_stats`` of that run — what ``sequential_alarms`` thresholds with
    ``analytics.sequential.alarm_rule``. Series the path does not test never alarm here (the
    product sends them to the change points)."""
    return fleet_calibration.replay_stats(values, start, cfg, bad=1, min_history=min_history)


def true_outlier_law(phi: float, lo: float = 0.08, hi: float = 0.45) -> OutlierLaw:
    """The corpus' outlier hours in innovation space: +log1p(U(lo, hi)) at the hour, then -phi
    times that in the next innovation, each with probability 1 % per hour."""
    edges = np.linspace(0.0, 1.2, 241)
    c = 0.5 * (edges[1:] + edges[:-1])
    a, b = np.log1p(lo), np.log1p(hi)
    pos = np.where((c >= a) & (c <= b), np.exp(c) / (hi - lo), 0.0)
    neg = np.where((c >= phi * a) & (c <= phi * b), np.exp(c / phi) / (hi - lo) / phi, 0.0)
    return OutlierLaw(0.01, 0.01, edges, pos, neg)


def true_model(corpus, hours: int, *, outliers: bool, known_mean: bool) -> nm.NoiseModel:
    """The corpus' noise model as a fit would hold it: the true AR coefficient, t scale of the
    innovations and, with ``outliers``, the true outlier law. known_mean: the level, cycle and walk
    are given to ``scan`` as a mean path (no cycle, no drift here); otherwise the model carries the
    true daily cycle and random-walk step."""
    n = corpus.values.shape[0]
    phi, df = corpus.phi, corpus.df
    scale = corpus.sigma * np.sqrt(1 - phi**2) * np.sqrt((df - 2) / df)
    return nm.NoiseModel(phi=np.full(n, phi), scale=scale, nu=df, season=np.zeros((n, 4)) if known_mean else corpus.season,
                         ok=np.ones(n, bool), hours=np.full(n, hours), outliers=true_outlier_law(phi) if outliers else None,
                         drift=None if known_mean else corpus.drift_q)


def oracle_stats(corpus, start, cfg=sq.SequentialConfig(), *, clairvoyant: bool):
    """The limit: the same GLR with the true AR coefficient, innovation law, level, daily cycle and
    drift. clairvoyant: outlier hours known (removed), innovations t(df); otherwise the outlier
    hours are unknown and the likelihood is the true mixture of t(df) and the outlier law."""
    x = np.log(corpus.values) - (corpus.outlier_log if clairvoyant else 0.0)
    model = true_model(corpus, x.shape[1], outliers=not clairvoyant, known_mean=True)
    M = cfg.max_window
    return _replay(x, start, dataclasses.replace(cfg, nu=corpus.df), lambda t: model, lambda t: corpus.mean_log[:, t - M : t + 1])


def model_oracle_stats(corpus, start, cfg=sq.SequentialConfig()):
    """The limit with the noise *model* known and nothing of its realisation: the true AR
    coefficient, innovation law, outlier law, daily cycle and random-walk step, as a fitted model
    would hold them. The level is not given: the random walk's current value is noise, so the level
    before each onset comes from the reference hours, and the walk enters the no-step hypothesis
    through the drift term, as on the product's path. ``oracle_stats`` gives the realised level,
    cycle and walk of every hour: more than a noise model holds."""
    x = np.log(corpus.values)
    model = true_model(corpus, x.shape[1], outliers=True, known_mean=False)
    return _replay(x, start, dataclasses.replace(cfg, nu=corpus.df), lambda t: model)


def alerts_from_stats(runs, S, V, Z, thresholds, cfg=sq.SequentialConfig()):
    """Alerts (onset, run) per series from replayed statistics: analytics.sequential.alarm_rule
    each run, and the one-alert-per-event rule."""
    alarm, arg, _ = sq.alarm_rule(S, V, thresholds, cfg, Z)
    return cal.first_alerts(alarm, runs[None, :] - arg, HOLD, runs)


def calibrate(runs, S, V, Z, target, cfg=sq.SequentialConfig(), weights=fleet_calibration.WINDOW_WEIGHTS,
              series_days: float | None = None):
    """Thresholds for ``target`` on replayed clean statistics; ``series_days``: what the false-alarm
    rate is counted over (default: every series of ``S`` over its runs; a joint statistic over a
    group's members passes its members' days); ``weights``: tail-probability share per window length
    (the product's by default)."""
    days = S.shape[0] * runs.size / 24 if series_days is None else series_days
    return fleet_calibration.calibrate_stats(runs, S, V, Z, target, cfg, series_days=days, weights=weights)


# --------------------------------------------------------------------------- the previous hourly path


def old_detect_regressions(values, start, *, went_away: bool = False, **config):
    """``analytics.detect.detect_regressions`` run for every hour from ``start``, on a DuckDB
    warehouse holding the series as one kernel each (window = hour, 100 launches; a NaN hour has
    no row). config: DetectConfig fields (``sequential=False``: the previous path, change points
    only). went_away: also return the events stored as went_away."""
    import duckdb
    import pyarrow as pa

    from analytics.detect import DetectConfig, detect_regressions
    from analytics.store.schema import ensure_schema, refresh_hourly
    from simulator.corpus import kernel_rows

    n, hours = values.shape
    con = duckdb.connect()
    ensure_schema(con)
    hour_ts = [T0 + dt.timedelta(hours=h) for h in range(hours)]
    ok = ~np.isnan(values)
    con.register("tbl", kernel_rows(np.where(ok, values, 1.0), T0).filter(pa.array(ok.reshape(-1))))
    con.execute("INSERT INTO kernels BY NAME SELECT * FROM tbl")
    con.unregister("tbl")
    refresh_hourly(con, "kernels", hour_ts[0], hour_ts[-1])  # the hourly rollups the series read
    cfg = DetectConfig(series=("kernel_mean_ns",), **config)
    for t in range(start, hours):
        detect_regressions(con, hour_ts[t], cfg)
    rows = con.execute("SELECT job, onset, detected_at FROM regressions" + ("" if went_away else " WHERE status <> 'went_away'")).fetchall()
    out: list[list[tuple[int, int]]] = [[] for _ in range(n)]
    for job, onset, det in rows:
        out[int(job[3:])].append((round((onset - T0).total_seconds() / 3600), round((det - T0).total_seconds() / 3600)))
    return [sorted(a, key=lambda p: p[1]) for a in out]


# --------------------------------------------------------------------------- competitors


def _otava_cps(v) -> list[tuple[int, float]]:
    from otava.analysis import compute_change_points

    cps, _ = compute_change_points(list(map(float, v)))  # defaults: window 50, p 0.001
    return [(int(c.index), float(c.stats.forward_change_percent())) for c in cps]


def _pelt_cps(v) -> list[tuple[int, float]]:
    import ruptures as rpt

    d = np.diff(v)
    sigma2 = (1.4826 * np.median(np.abs(d - np.median(d))) / np.sqrt(2)) ** 2
    bk = [0] + [int(b) for b in rpt.KernelCPD(kernel="linear", min_size=3, jump=1).fit(v).predict(pen=2 * sigma2 * np.log(v.size))]
    return [(b, 100 * (v[b:c].mean() / v[a:b].mean() - 1)) for a, b, c in zip(bk, bk[1:], bk[2:])]


COMPETITORS = {"otava": _otava_cps, "ruptures PELT": _pelt_cps}


def competitor(name, values, start, *, window=168, tail=24, floor_pct=2.0):
    """Hourly protocol for an offline method: each run, change points of the trailing ``window``
    hours; an upward one of >= ``floor_pct`` in the last ``tail`` hours is an alarm (onset = its
    index); one alert per event (HOLD)."""
    fn = COMPETITORS[name]
    n, hours = values.shape
    out: list[list[tuple[int, int]]] = [[] for _ in range(n)]
    for i in range(n):
        last = -10**9
        for t in range(start, hours):
            lo = max(0, t + 1 - window)
            cps = [(lo + c, pct) for c, pct in fn(values[i, lo : t + 1]) if pct >= floor_pct and lo + c > t - tail]
            if cps and t - last > HOLD:
                onset = max(cps, key=lambda c: c[1])[0]
                out[i].append((onset, t))
                last = onset
    return out


def ewma_rule(values, start, alpha=2 / 25, threshold=0.2):
    """The design article's rule hourly: the hour exceeds the previous hour's EWMA by > 20 %
    (20 % is above the 2 % floor); one alert per event (HOLD)."""
    from analytics.detect import ewma

    ew = ewma(values, alpha)
    prev = np.concatenate([np.full((values.shape[0], 1), np.nan), ew[:, :-1]], axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        fire = (values - prev) / prev > threshold
    runs = np.arange(start, values.shape[1])
    return cal.first_alerts(fire[:, start:], np.broadcast_to(runs, (values.shape[0], runs.size)), HOLD, runs)
