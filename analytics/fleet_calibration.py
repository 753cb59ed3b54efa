"""Thresholds set on the fleet's own history (issue 15): replay the hourly path over the warehouse's
regression-free history, calibrate one threshold per window length for a false-alarm target, and
store them; ``detect_regressions`` then uses the newest stored calibration of its statistic
(``DetectConfig.thresholds`` left at None), else ``analytics.sequential.DEFAULT_THRESHOLDS``.

The replay is the product's hourly path itself (what ``detect_regressions`` runs per family): every
run sees the trailing ``online.lookback_hours``, the day's noise model comes from ``online.fit_day``
at the UTC day's first run, and the statistics are ``online.scan_stats`` of that run.
``benchmarks/detection.py`` calibrates its rows with the same two functions (``replay_stats``,
``calibrate_stats``). Regression-free: a series with any event (any status) whose onset lies in
the replayed hours or the lookback before them is left out, and only series-runs the sequential
path tested count as series-days. Small fleets give noisy thresholds (84,000 series-days left the
rate elsewhere uncertain by about +-25 %, docs/detection.md), so ``calibrate_warehouse`` refuses
fewer than ``min_series_days``.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

import numpy as np

from analytics import calibration as cal
from analytics import online
from analytics import sequential as sq

#: Alarms of a series within this many hours of an alert's onset are that alert (the lifecycle's count).
HOLD_HOURS = 72
#: Fewest clean series-days ``calibrate_warehouse`` accepts by default.
MIN_SERIES_DAYS = 10_000
#: Relative share of the false-alarm tail probability per window length m = 1, 2, ... (the last
#: repeats; ``analytics.calibration.window_weights``): 2.5x to the shortest alarming window (3 h, the
#: one that finds a step within 3 runs), half to windows of 7 h and more (whose small steps the
#: 12-run recall keeps). Chosen on the development seeds with benchmarks/early_recall.py (k=3σ
#: within 3 runs 0.21 -> 0.31, k=4σ 0.70 -> 0.78, within 12 0.98 -> 0.96; docs/detection.md).
WINDOW_WEIGHTS: tuple[float, ...] = (1.0, 1.0, 2.5, 1.0, 1.0, 1.0, 0.5)


def replay_stats(values: np.ndarray, start: int, cfg: sq.SequentialConfig = sq.SequentialConfig(), *, bad: int = 1,
                 min_history: int | None = None, young_history: int | None = None, first_hour_of_day: int = 0,
                 model_hook=None):
    """Hourly replay of the sequential path on a (series x hours) matrix, one run per hour from
    ``start``: returns (runs, S, V, Z), the statistic, validity and reference z of every series,
    run and window length (-inf where the path did not test the series). young_history: test young
    rows too (``online.fit_day``; None: mature rows only, what the fleet's thresholds are calibrated
    on). ``first_hour_of_day``: the UTC hour of column 0. ``model_hook(rows, model) -> model``
    replaces each day's fitted model (benchmarks: a model with some parameters known)."""
    n, hours = values.shape
    L = online.lookback_hours(cfg)
    runs = np.arange(start, hours)
    M = cfg.max_window
    S = np.full((n, runs.size, M), -np.inf)
    V = np.zeros((n, runs.size, M))
    Z = np.zeros((n, runs.size, M))
    kw = {"young_history": young_history}
    if min_history is not None:
        kw["min_history"] = min_history
    res = None
    for j, t in enumerate(runs):
        lo = max(0, t + 1 - L)
        v = values[:, lo : t + 1]
        hod = (first_hour_of_day + t) % 24
        if res is None or hod == 0:
            res = online.fit_day(v, hod, bad=bad, config=cfg, **kw)
            if model_hook is not None:
                res = res[0], model_hook(*res)
        rows_, model = res
        if rows_.size:
            sc = online.scan_stats(v, hod, bad=bad, config=cfg, model=model, rows=rows_)
            S[rows_, j], V[rows_, j], Z[rows_, j] = sc.stat, sc.valid, sc.ref_z
    return runs, S, V, Z


def calibrate_stats(runs, S, V, Z, target: float, cfg: sq.SequentialConfig = sq.SequentialConfig(),
                    series_days: float | None = None, weights=WINDOW_WEIGHTS):
    """Thresholds for ``target`` alerts per 1,000 series-days on replayed clean statistics: returns
    (thresholds, tail p, rate on these statistics). ``series_days`` defaults to the series-runs the
    path tested / 24; ``weights``: the tail probability's share per window length."""
    _, arg, usable = sq.alarm_rule(S, V, np.full(cfg.max_window, np.inf), cfg)
    placed = np.take_along_axis(Z, arg[..., None], axis=-1)[..., 0] < cfg.ref_z
    if series_days is None:
        series_days = float(np.isfinite(S).any(axis=-1).sum()) / 24
    return cal.calibrate_thresholds(S, usable, runs[None, :] - arg, series_days=series_days, target_per_1000_days=target,
                                    hold_hours=HOLD_HOURS, min_len=cfg.min_len, run_hours=runs,
                                    eligible=(arg < cfg.max_window - 1) & placed, weights=weights)


@dataclass(frozen=True)
class Calibration:
    """One calibration of the fleet's thresholds (a row of ``detector_thresholds``)."""

    method: str  # online.model_version of the statistic: thresholds of another statistic are not used
    as_of: dt.datetime  # the last replayed hour
    target: float  # false alerts per 1,000 series-days aimed at
    rate: float  # the rate the thresholds give on the replayed history
    series: int
    series_days: float
    tail_p: float
    thresholds: tuple[float, ...]


@dataclass(frozen=True)
class History:
    """The clean series of every sequential family, loaded for a replay (no connection kept)."""

    as_of: dt.datetime
    days: int
    config: object  # analytics.lifecycle.DetectConfig
    families: list  # (bad, values (series x hours), UTC hour of column 0)


def load_history(con, as_of: dt.datetime, *, days: int = 14, config=None) -> History:
    """Read the last ``days`` days up to ``as_of`` (and the lookback before them) of every sequential
    family, without the series that have an event in those hours. Reads only: the replay runs after
    the connection is closed, so a long calibration never holds the warehouse file."""
    from analytics.lifecycle import DetectConfig
    from analytics.store import series as sr
    from cudawatch.shards import hour_floor

    config = config or DetectConfig()
    as_of = hour_floor(as_of)
    L = online.lookback_hours(config.seq)
    tainted = _series_with_events(con, as_of - dt.timedelta(hours=L + days * 24 - 1))
    families = []
    for name in config.series:
        spec = sr.SPEC_BY_NAME[name]
        if not (config.sequential and spec.sequential):
            continue
        mat = sr.load_matrix(con, spec, as_of, L + days * 24)
        keep = np.array([sr.series_key(name, k) not in tainted.get(name, ()) for k in mat.keys], dtype=bool)
        if keep.any():
            families.append((spec.bad, mat.values[keep], (as_of - dt.timedelta(hours=mat.hours - 1)).hour))
    return History(as_of, days, config, families)


def calibrate_history(hist: History, *, target: float = 0.75, min_series_days: float = MIN_SERIES_DAYS) -> Calibration:
    """Replay and calibrate a loaded history; raises ValueError with the numbers when it is too small."""
    config = hist.config
    cfg, L = config.seq, online.lookback_hours(config.seq)
    if not hist.families:
        raise ValueError("no clean series of a sequential family in the warehouse: nothing to calibrate on")
    parts = [replay_stats(v, L, cfg, bad=bad, min_history=config.seq_min_history, first_hour_of_day=h0)
             for bad, v, h0 in hist.families]
    runs = parts[0][0]
    S, V, Z = (np.concatenate([p[i] for p in parts]) for i in (1, 2, 3))
    tested = np.isfinite(S).any(axis=-1)
    series_days = float(tested.sum()) / 24
    if series_days < min_series_days:
        raise ValueError(f"{series_days:,.0f} clean series-days the hourly path tested in the last {hist.days} days "
                         f"(of {S.shape[0]} series); calibration needs at least {min_series_days:,.0f} (the path tests "
                         f"a series once it has {config.seq_min_history} h of history, and each replayed run reads "
                         f"the {L} h before it)")
    h, p, rate = calibrate_stats(runs, S, V, Z, target, cfg, series_days=series_days)
    return Calibration(online.model_version(cfg, config.seq_min_history), hist.as_of, target, float(rate),
                       int(tested.any(axis=1).sum()), series_days, float(p), tuple(float(x) for x in h))


def calibrate_warehouse(con, as_of: dt.datetime, *, days: int = 14, target: float = 0.75, config=None,
                        min_series_days: float = MIN_SERIES_DAYS) -> Calibration:
    """``load_history`` then ``calibrate_history`` (one call, for a connection the caller holds anyway)."""
    return calibrate_history(load_history(con, as_of, days=days, config=config), target=target,
                             min_series_days=min_series_days)


def _series_with_events(con, since: dt.datetime) -> dict[str, set[str]]:
    """Series keys with an event whose onset is at or after ``since`` (read-only: no table, no events)."""
    from analytics.store.regressions import has_table

    out: dict[str, set[str]] = {}
    if not has_table(con, "regressions"):
        return out
    for series, key in con.execute("SELECT DISTINCT series, series_key FROM regressions WHERE onset >= ?", [since]).fetchall():
        out.setdefault(series, set()).add(key)
    return out
