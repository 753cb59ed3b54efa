"""Young rows of the sequential path: series with a day to a week of fit history (a new fleet from
its third day, a kernel in its first week). ``analytics.online.fit_day`` fits them on the hours they
have and the hourly path holds them to thresholds calibrated for such short fits
(``YOUNG_THRESHOLDS``, benchmarks/young_series.py); docs/detection.md ("Young series").

Their random-walk drift: the mature rows' (``noise_model.drift_q2``, daily levels over two weeks)
when the family has any; otherwise, in a new fleet, ``lag_drift_q2`` from hourly lags, because the
daily-level estimator needs four whole days and a fleet drifting 0.15 %/h without a drift term
raised 12.96 false alarms per 1,000 young series-days (``benchmarks/young_series.py --drift-check``).
From one or two days of hours a family's few dozen rows do not pin the drift down (a row's lag
estimate is mostly noise: 37-73 % of them positive on simulated 96-h fleets), and a pooled median at
0 where the series do wander raised 7 of 9 false alarms on ten clean 96-h fleets; so a new fleet's
young rows take the median's upper confidence bound (``upper_median``), not the median.
"""

from __future__ import annotations

import warnings

import numpy as np

from analytics import noise_model as nm

#: Version of how young rows are fitted (part of the day model's cache key: ``online.cache_version``).
#: 2026-12-06.2: a new fleet's drift is the median's upper confidence bound (``fitted_drift``).
YOUNG_MODEL_VERSION = "2026-12-06.2"
#: Fewest valid hours in the fit history for a young row; None: young rows go through the change points.
YOUNG_HISTORY_HOURS: int | None = 24
#: Thresholds for young rows per window length m = 1..12 h: ``benchmarks/young_series.py --targets 0.5``,
#: calibrated for 0.5 false alarms per 1,000 young series-days on dev seeds 301/302/304/305 (62,305
#: young series-days; 0.7 kept 0.71 on the validation seeds but read 1.26 on seed 303); check seed 306: 0.42.
YOUNG_THRESHOLDS_VERSION = "2026-12-06.1"
YOUNG_THRESHOLDS: tuple[float, ...] = (np.inf, np.inf, 11.80, 13.46, 14.02, 14.27, 15.55, 15.81, 16.03, 16.16, 16.28, 16.35)
#: Hourly lags of ``lag_drift_q2``: at 12 h the AR(1) noise has forgotten itself (0.35^12 ~ 3e-6).
SHORT_LAG, LONG_LAG = 12, 24
#: One-sided normal quantile of the upper confidence bound on the young rows' pooled drift (97.5 %).
DRIFT_BOUND_Z = 1.96


def is_young(model: nm.NoiseModel, min_history: int) -> np.ndarray:
    """Rows of a day's model fitted on fewer than ``min_history`` valid hours."""
    return np.asarray(model.hours) < min_history


def row_thresholds(model: nm.NoiseModel, thresholds, young_thresholds, min_history: int) -> np.ndarray:
    """(rows, max_window) thresholds: ``young_thresholds`` for young rows, ``thresholds`` for the others."""
    return np.where(is_young(model, min_history)[:, None], np.asarray(young_thresholds, float)[None, :],
                    np.asarray(thresholds, float)[None, :])


def lag_drift_q2(y: np.ndarray, sigma: np.ndarray, phi: np.ndarray) -> np.ndarray:
    """Per row, q^2 (variance of the hourly step of a random-walk level) from hourly lags of the
    de-cycled series ``y`` (log units, NaN missing). A lag-L change holds two AR(1) values and L
    steps of the walk, so its variance is V(L) = 2 s^2 (1 - phi^L) + L q^2 (s the stationary
    sigma); then q^2 = (V(LONG) - V(SHORT) - 2 s^2 (phi^SHORT - phi^LONG)) / (LONG - SHORT), each V a
    robust variance ((1.4826 x median |change|)^2, not centred: a trend is drift too). NaN where a
    row has no change at the long lag. Noisy per row; pooled by ``fitted_drift``."""
    y = np.atleast_2d(np.asarray(y, float))
    if y.shape[1] <= LONG_LAG:
        return np.full(y.shape[0], np.nan)

    def v(lag):
        return (nm.MAD_TO_SD * nm.nanmedian(np.abs(y[:, lag:] - y[:, :-lag]))) ** 2

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        ar = 2 * np.asarray(sigma, float) ** 2 * (np.asarray(phi, float) ** SHORT_LAG - np.asarray(phi, float) ** LONG_LAG)
        return (v(LONG_LAG) - v(SHORT_LAG) - ar) / (LONG_LAG - SHORT_LAG)


def fitted_drift(x: np.ndarray, hour_of_day: np.ndarray, model: nm.NoiseModel) -> float:
    """The family's drift from young rows alone: ``row_drift_q2`` of the rows' fit history ``x``
    (log units, the columns the model was fitted on) pooled by ``noise_model.pooled_drift`` with the
    median's upper confidence bound (``upper_median``) instead of the median."""
    return nm.pooled_drift(row_drift_q2(x, hour_of_day, model), pool=upper_median)


def row_drift_q2(x: np.ndarray, hour_of_day: np.ndarray, model: nm.NoiseModel) -> np.ndarray:
    """``lag_drift_q2`` of each young row: its fit history ``x`` (log units) de-cycled with ``model``."""
    return lag_drift_q2(x - model.cycle(np.asarray(hour_of_day, float)), model.sigma, model.phi)


def upper_median(v: np.ndarray, z: float = DRIFT_BOUND_Z) -> float:
    """Distribution-free upper confidence bound of the median of the finite values of ``v``: the
    order statistic of rank ceil(n/2 + z sqrt(n)/2) (the binomial law of the count below the
    median, normal approximation; z >= 0), the largest value when n is not above that (at z = 1.96,
    n <= 7). NaN when none."""
    if z < 0:
        raise ValueError(f"z must be >= 0 (an upper bound), got {z}")
    v = np.sort(np.asarray(v, float)[np.isfinite(v)])
    if v.size == 0:
        return float("nan")
    rank = int(np.ceil(v.size / 2 + z * np.sqrt(v.size) / 2))
    return float(v[min(max(rank, 1), v.size) - 1])
