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

from dataclasses import dataclass

import numpy as np

from analytics import noise_model as nm
from analytics import sequential as sq

#: Fewest valid hours in the fit history for the sequential path (7 days; docs/detection.md).
MIN_HISTORY_HOURS = 168
#: Smallest innovation scale (log units, 0.01 %) the sequential path accepts: below it a series is
#: quantised or constant (a clock pinned at its maximum) and the t likelihood would be degenerate.
MIN_SCALE = 1e-4


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


@dataclass(frozen=True)
class SeqResult:
    """rows: indices (into the matrix) of the series the sequential path tested; alarms: their
    ``analytics.sequential.Alarms`` with ``onset`` as a column of the whole matrix (-1: none);
    model: the noise model of those rows (reusable for the other runs of the same UTC day)."""

    rows: np.ndarray
    alarms: sq.Alarms
    model: nm.NoiseModel | None


def sequential_alarms(values: np.ndarray, last_hour_of_day: int, *, bad: int, thresholds=sq.DEFAULT_THRESHOLDS,
                      config: sq.SequentialConfig = sq.SequentialConfig(), min_history: int = MIN_HISTORY_HOURS,
                      model: nm.NoiseModel | None = None, rows: np.ndarray | None = None) -> SeqResult:
    """Sequential test of the newest hour of every row of ``values`` (series x hours, NaN =
    missing, last column = the hour being analysed, at hour of day ``last_hour_of_day``).

    bad: +1 when a rise is a regression, -1 when a fall is. model, rows: the model and rows an
    earlier run of the same UTC day returned (the fit is then skipped). Rows without enough
    history are not in ``rows``; the caller analyses them another way.
    """
    values = np.atleast_2d(np.asarray(values, float))
    n, T = values.shape
    M, R = config.max_window, config.reference_hours
    hod = hour_of_day(T, last_hour_of_day)
    empty = SeqResult(np.zeros(0, dtype=int), _no_alarms(0), None)
    if n == 0 or T < M + R + 1:
        return empty
    if model is None or rows is None:
        x = nm.to_log(values, bad)
        a = fit_anchor(T, last_hour_of_day, config)
        lo = max(0, a - config.fit_hours)
        enough = np.count_nonzero(~np.isnan(x[:, lo:a]), axis=1) >= min_history
        rows = np.flatnonzero(enough)
        if rows.size == 0:
            return empty
        with np.errstate(invalid="ignore", divide="ignore"):  # flat rows (a constant share) get no model
            model = sq.fit(x[rows, :a], hod[:a], config)
        keep = model.ok & (np.nan_to_num(model.scale) >= MIN_SCALE)
        rows, model = rows[keep], _subset(model, keep)
        if rows.size == 0:
            return empty
    w = M + R
    al = sq.detect_hourly(values[rows, -w:], hod[-w:], bad=bad, thresholds=thresholds, config=config, model=model)
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


def _subset(model: nm.NoiseModel, keep: np.ndarray) -> nm.NoiseModel:
    return nm.NoiseModel(phi=model.phi[keep], scale=model.scale[keep], nu=model.nu, season=model.season[keep],
                         ok=model.ok[keep], hours=model.hours[keep], period=model.period, outliers=model.outliers)


def _no_alarms(n: int) -> sq.Alarms:
    z = np.zeros(n)
    return sq.Alarms(np.zeros(n, bool), np.full(n, -1), z, z, z, z, z, np.zeros(n, bool))
