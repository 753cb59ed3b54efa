"""The sequential detector on one family's loaded matrix, as the hourly path runs it.

Pure numpy (no SQL, no clock). ``analytics.detect.detect_regressions`` loads every family's
trailing ``lookback_hours()`` (two weeks of history for the noise model + the 48 reference hours +
the 12-hour zone + 23 h) and calls ``sequential_alarms`` on it; benchmarks/detection.py calls the
same function on its corpus, so the benchmark's cudawatch row measures what the product runs.

- Which series: a row is tested here when it has at least ``min_history`` valid hours (positive
  values) in the history its noise model is fitted on and a usable model; the others go through
  the offline change points (short test fleets, the 48-60 h demo, new kernels whose share starts
  at 0). docs/detection.md gives the measurement behind the default (``MIN_HISTORY_HOURS``).
- The noise model is fitted once per UTC day: on the ``fit_hours`` before the zone of the day's
  first hourly run (``fit_anchor``), so every run of a day uses the same model and re-running an
  hour gives the same answer (the benchmark reuses the model within a day; the product refits it
  each run from the same hours, which gives the same numbers).
- Onsets and magnitudes are ``analytics.sequential.detect_hourly``'s (argmax of the GLR over the
  onset, one threshold per window length: ``analytics.sequential.DEFAULT_THRESHOLDS``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from analytics import noise_model as nm
from analytics.outliers import OutlierLaw
from analytics import sequential as sq
from analytics import young

#: Version of the day's fitted noise model (analytics.store.noise_models keys its cache by it):
#: change it whenever fit_noise_model or the fit's SequentialConfig fields change.
MODEL_VERSION = "2026-12-06.1"
#: Fewest valid hours in the fit history for the sequential path (7 days; docs/detection.md).
MIN_HISTORY_HOURS = 168
#: Smallest innovation scale (log units, 0.01 %) the sequential path accepts: below it a series is
#: quantised or constant (a clock pinned at its maximum) and the t likelihood would be degenerate.
MIN_SCALE = 1e-4


def model_version(config: sq.SequentialConfig = sq.SequentialConfig(), min_history: int = MIN_HISTORY_HOURS) -> str:
    """The key of the statistic of rows with ``min_history`` (thresholds calibrated on the fleet are
    kept under it): MODEL_VERSION and the settings the fit depends on."""
    return f"{MODEL_VERSION}/{config.fit_hours}/{config.max_window}/{config.nu:g}/{config.refine}/{min_history}"


def cache_version(config: sq.SequentialConfig = sq.SequentialConfig(), min_history: int = MIN_HISTORY_HOURS,
                  young_history: int | None = young.YOUNG_HISTORY_HOURS) -> str:
    """The cache key of a day's model: ``model_version`` and which young rows it holds."""
    return model_version(config, min_history) + f"/young{young_history or 0}/{young.YOUNG_MODEL_VERSION}"


def lookback_hours(config: sq.SequentialConfig = sq.SequentialConfig()) -> int:
    """Hours the sequential path reads per series: the fit history, the reference and the zone,
    plus the 23 hours by which the day's fit anchor can precede the current run."""
    return config.fit_hours + config.reference_hours + config.max_window + 23


def hour_of_day(n_cols: int, last_hour_of_day: int) -> np.ndarray:
    """Hour of day (0..23) of each of ``n_cols`` consecutive hourly columns ending at ``last_hour_of_day``."""
    return (last_hour_of_day - (n_cols - 1 - np.arange(n_cols))) % 24


def fit_anchor(n_cols: int, last_hour_of_day: int, config: sq.SequentialConfig = sq.SequentialConfig()) -> int:
    """Column where the noise model's history ends: the start of the zone of the UTC day's first
    run (hour 0), so all runs of a day share one model."""
    return max(0, n_cols - config.max_window - int(last_hour_of_day))


def fit_window(n_cols: int, last_hour_of_day: int, config: sq.SequentialConfig = sq.SequentialConfig()) -> slice:
    """Columns of the day's fit history: the ``fit_hours`` before ``fit_anchor``."""
    a = fit_anchor(n_cols, last_hour_of_day, config)
    return slice(max(0, a - config.fit_hours), a)


@dataclass(frozen=True)
class SeqResult:
    """rows: indices (into the matrix) of the series the sequential path tested; alarms: their
    ``analytics.sequential.Alarms`` with ``onset`` as a column of the whole matrix (-1: none);
    model: the noise model of those rows (reusable for the other runs of the same UTC day)."""

    rows: np.ndarray
    alarms: sq.Alarms
    model: nm.NoiseModel | None


def fit_day(values: np.ndarray, last_hour_of_day: int, *, bad: int, config: sq.SequentialConfig = sq.SequentialConfig(),
            min_history: int = MIN_HISTORY_HOURS, young_history: int | None = None, outliers: OutlierLaw | None = None,
            drift: float | None = None) -> tuple[np.ndarray, nm.NoiseModel | None]:
    """The UTC day's noise model: rows of ``values`` the sequential path tests (enough history in
    the fit history, a usable model) and their model, fitted on the ``fit_hours`` before the zone of
    the day's first run. young_history: rows with at least this many valid hours there but fewer
    than ``min_history`` are fitted too, on what they have, with the outlier law and drift of the
    mature rows when there are any (``young.is_young`` tells them apart; None: not tested). outliers,
    drift: use this outlier law and random-walk drift (the day's, from the cache) instead of the ones
    pooled over these rows."""
    values = np.atleast_2d(np.asarray(values, float))
    n, T = values.shape
    if n == 0 or T < config.max_window + config.reference_hours + 1:
        return np.zeros(0, dtype=int), None
    hod = hour_of_day(T, last_hour_of_day)
    x = nm.to_log(values, bad)
    w = fit_window(T, last_hour_of_day, config)
    a = w.stop
    have = np.count_nonzero(~np.isnan(x[:, w]), axis=1)
    rows, model = _fit_rows(x, hod, a, np.flatnonzero(have >= min_history), config, min_history, outliers, drift)
    if young_history is not None and young_history < min_history:
        fresh = np.flatnonzero((have >= young_history) & (have < min_history))
        if model is not None:  # the mature rows' outlier law and drift: pooled over more, longer histories
            outliers = outliers or model.outliers
            if drift is None and model.drift is not None:
                drift = float(np.median(model.drift))
        yrows, ymodel = _fit_rows(x, hod, a, fresh, config, young_history, outliers, drift)
        if ymodel is not None and drift is None:  # a new fleet: no mature rows to take the drift from
            ymodel = replace(ymodel, drift=np.full(yrows.size, young.fitted_drift(x[yrows, w], hod[w], ymodel)))
        rows, model = np.concatenate([rows, yrows]), _concat(model, ymodel)
    return (rows, model) if rows.size else (rows, None)


def _fit_rows(x, hod, a, rows, config, min_hours, outliers, drift) -> tuple[np.ndarray, nm.NoiseModel | None]:
    if rows.size == 0:
        return rows, None
    with np.errstate(invalid="ignore", divide="ignore"):  # flat rows (a constant share) get no model
        model = sq.fit(x[rows, :a], hod[:a], config, min_hours=min_hours)
    keep = model.ok & (np.nan_to_num(model.scale) >= MIN_SCALE)
    rows, model = rows[keep], _subset(model, keep)
    if outliers is not None:
        model = replace(model, outliers=outliers)
    if drift is not None:
        model = replace(model, drift=np.full(rows.size, float(drift)))
    return (rows, model) if rows.size else (rows, None)


def fit_prints(values: np.ndarray, last_hour_of_day: int, config: sq.SequentialConfig = sq.SequentialConfig()) -> np.ndarray:
    """A fingerprint per row of the data the day's fit reads (the ``fit_hours`` before the fit
    anchor): valid hours, their sum and their position-weighted sum (series x 3). A cached model
    whose fingerprint no longer matches (late rows filled its history) is refitted."""
    values = np.atleast_2d(np.asarray(values, float))
    x = values[:, fit_window(values.shape[1], last_hour_of_day, config)]
    ok = ~np.isnan(x)
    v = np.where(ok, x, 0.0)
    return np.column_stack([ok.sum(axis=1), v.sum(axis=1), v @ np.arange(1, x.shape[1] + 1, dtype=float)])


def _same_print(a: np.ndarray, b: np.ndarray) -> bool:
    """Same valid hours and the same sums up to rounding (the sums' order of addition depends on
    the matrix's shape; a late row changes the count or the sums far more)."""
    return a[0] == b[0] and np.allclose(a[1:], b[1:], rtol=1e-9, atol=0.0)


def day_model(values: np.ndarray, keys: list[str], last_hour_of_day: int, cached, *, bad: int,
              config: sq.SequentialConfig = sq.SequentialConfig(), min_history: int = MIN_HISTORY_HOURS,
              young_history: int | None = young.YOUNG_HISTORY_HOURS):
    """The day's model for the rows of ``values`` (series keys ``keys``), from the day's cache
    when there is one. cached: None or (row of each cached key in the cached model, or None for
    a key not tested; the cached model; each cached key's ``fit_prints`` row), as
    ``analytics.store.noise_models.load_day`` returns it.

    Keys the cache has not seen (series that appeared since the day's first run) and keys whose fit
    data changed since (late rows) are fitted here with the day's outlier law. Returns (rows, model,
    store): rows/model for ``sequential_alarms``; store is None when the cache needs no update, else
    (keys, tested, model, prints) of the whole day (``analytics.store.noise_models.save_day``)."""
    prints = fit_prints(values, last_hour_of_day, config)
    if cached is None:
        rows, model = fit_day(values, last_hour_of_day, bad=bad, config=config, min_history=min_history,
                              young_history=young_history)
        tested = np.zeros(len(keys), bool)
        tested[rows] = True
        return rows, model, (list(keys), tested, model, prints)
    where, cmodel, cprints = cached
    fresh = [k in where and _same_print(cprints[k], prints[i]) for i, k in enumerate(keys)]
    new = [i for i, ok in enumerate(fresh) if not ok]
    hit = [(i, where[k]) for i, k in enumerate(keys) if fresh[i] and where[k] is not None]
    rows = np.array([i for i, _ in hit], dtype=int)
    model = _subset(cmodel, np.array([j for _, j in hit], dtype=int)) if hit else None
    if not new:
        return rows, model, None
    law = cmodel.outliers if cmodel is not None else None
    drift = float(np.median(cmodel.drift)) if cmodel is not None and cmodel.drift is not None else None
    nrows, nmodel = fit_day(np.atleast_2d(values)[new], last_hour_of_day, bad=bad, config=config, min_history=min_history,
                            young_history=young_history, outliers=law, drift=drift)
    nrows = np.asarray(new, dtype=int)[nrows]
    rows, model = np.concatenate([rows, nrows]), _concat(model, nmodel)
    # the whole day for the cache: the cached keys still current (as cached) plus the (re)fitted ones
    refit = {keys[i] for i in new}
    ckeys = [k for k in where if k not in refit]
    allkeys = ckeys + [keys[i] for i in new]
    nset = set(nrows.tolist())
    tested = np.array([where[k] is not None for k in ckeys] + [i in nset for i in new], bool)
    old = _subset(cmodel, np.array([where[k] for k in ckeys if where[k] is not None], dtype=int)) if cmodel is not None else None
    allprints = np.array([cprints[k] for k in ckeys] + [prints[i] for i in new], float).reshape(-1, 3)
    return rows, model, (allkeys, tested, _concat(old, nmodel), allprints)


def sequential_alarms(values: np.ndarray, last_hour_of_day: int, *, bad: int, thresholds=sq.DEFAULT_THRESHOLDS,
                      config: sq.SequentialConfig = sq.SequentialConfig(), min_history: int = MIN_HISTORY_HOURS,
                      young_history: int | None = young.YOUNG_HISTORY_HOURS, young_thresholds=young.YOUNG_THRESHOLDS,
                      model: nm.NoiseModel | None = None, rows: np.ndarray | None = None) -> SeqResult:
    """Sequential test of the newest hour of every row of ``values`` (series x hours, NaN =
    missing, last column = the hour being analysed, at hour of day ``last_hour_of_day``).

    bad: +1 when a rise is a regression, -1 when a fall is. model, rows: the day's model and rows
    (``fit_day`` / ``day_model``, or an earlier run of the same UTC day); None fits them here.
    Young rows (``young.is_young``) are held to ``young_thresholds``, the others to ``thresholds``.
    Rows without enough history are not in ``rows``; the caller analyses them another way.
    """
    values = np.atleast_2d(np.asarray(values, float))
    n, T = values.shape
    M, R = config.max_window, config.reference_hours
    empty = SeqResult(np.zeros(0, dtype=int), _no_alarms(0), None)
    if n == 0 or T < M + R + 1:
        return empty
    if rows is None:
        rows, model = fit_day(values, last_hour_of_day, bad=bad, config=config, min_history=min_history,
                              young_history=young_history)
    if model is None or rows.size == 0:
        return empty
    hod = hour_of_day(T, last_hour_of_day)
    w = M + R
    h = young.row_thresholds(model, thresholds, young_thresholds, min_history)
    al = sq.detect_hourly(values[rows, -w:], hod[-w:], bad=bad, thresholds=h, config=config, model=model)
    onset = np.where(al.alarm, al.onset + (T - w), -1)
    return SeqResult(rows, sq.Alarms(al.alarm, onset, al.stat, al.ratio, al.before, al.after, al.magnitude_pct,
                                     al.model_ok), model)


def scan_stats(values: np.ndarray, last_hour_of_day: int, *, bad: int, config: sq.SequentialConfig = sq.SequentialConfig(),
               model: nm.NoiseModel, rows: np.ndarray) -> sq.Scan:
    """The GLR statistics ``sequential_alarms`` thresholds, for the same rows and model (what a
    calibration replay records: analytics.calibration.calibrate_thresholds)."""
    values = np.atleast_2d(np.asarray(values, float))
    T = values.shape[1]
    w = config.max_window + config.reference_hours
    hod = hour_of_day(T, last_hour_of_day)
    return sq.scan(nm.to_log(values[rows, -w:], bad), hod[-w:], model, config)


def _concat(a: nm.NoiseModel | None, b: nm.NoiseModel | None) -> nm.NoiseModel | None:
    if a is None or b is None:
        return a if b is None else b
    drift = None if a.drift is None or b.drift is None else np.r_[a.drift, b.drift]
    return replace(a, phi=np.r_[a.phi, b.phi], scale=np.r_[a.scale, b.scale], season=np.vstack([a.season, b.season]),
                   ok=np.r_[a.ok, b.ok], hours=np.r_[a.hours, b.hours], drift=drift)


def _subset(model: nm.NoiseModel, keep: np.ndarray) -> nm.NoiseModel:
    return nm.NoiseModel(phi=model.phi[keep], scale=model.scale[keep], nu=model.nu, season=model.season[keep],
                         ok=model.ok[keep], hours=model.hours[keep], period=model.period, outliers=model.outliers,
                         drift=None if model.drift is None else model.drift[keep])


def _no_alarms(n: int) -> sq.Alarms:
    z = np.zeros(n)
    return sq.Alarms(np.zeros(n, bool), np.full(n, -1), z, z, z, z, z, np.zeros(n, bool))
