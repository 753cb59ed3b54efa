"""Regression detection: change points on the watched hourly series, turned into regression events.

``detect_regressions(con, as_of)`` runs once per hour (idempotently). For every series in
analytics.store.series.SPECS it loads the trailing ``lookback_hours`` up to ``as_of`` and, in the
incremental mode, first screens the tail of all series at once (a vectorised z test of the last
3/6/12 hours against the robust level of the window); only series that pass the screen or carry
an open event go through ``analytics.changepoint.detect_change_points``. A change point becomes a
regression when it moved the bad way by at least ``min_magnitude_pct`` and lies in the last
``tail_hours``. Events are deduplicated (one per kernel, job or GPU and onset), a step that
reverts within ``went_away_hours`` is recorded as ``went_away`` and not returned, and the
``regressions`` table is keyed by ``Regression.event_id``, so re-running an hour changes nothing.

The design article's EWMA deviation rule is kept as ``ewma_deviation_check``: one hour against
the EWMA, no significance test; docs/detection.md explains how the two differ.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import replace

import numpy as np

from analytics import online
from analytics import sequential as sq
from analytics.lifecycle import (MAX_MAGNITUDE_PCT, Candidate, DetectConfig, Step, candidate, dedup, find_absence, find_steps,
                                 update_open)
from analytics.presence import absent_now
from analytics.results import Regression
from analytics.store import noise_models as noise_cache
from analytics.store import regressions as events
from analytics.store import series as sr
from analytics.store import thresholds as fleet_thresholds
from analytics.store.regressions import OPEN, load_regressions
from analytics.trend import estimate_drift, ewma, ewma_deviation_check, quiet_warnings, screen_tail, severity_of
from cudawatch.shards import hour_floor

__all__ = [
    "detect_regressions", "DetectConfig", "Step", "find_steps", "ewma", "ewma_deviation_check", "estimate_drift",
    "screen_tail", "severity_of", "quiet_warnings", "load_regressions", "MAX_MAGNITUDE_PCT", "OPEN",
]


def detect_regressions(con, as_of: dt.datetime, config: DetectConfig | None = None) -> list[Regression]:
    """Detect regressions in the data up to ``as_of`` (a UTC hour), store them, return the open ones.

    Idempotent: the same ``as_of`` twice leaves the ``regressions`` table as the first run left it.
    Returned regressions have empty ``causes`` (analytics.explain.attach_causes fills them).
    """
    config = config or DetectConfig()
    if config.thresholds is None:  # the fleet's own calibration of this statistic, else the shipped thresholds
        stored = fleet_thresholds.current(con, online.model_version(config.seq, config.seq_min_history))
        config = replace(config, thresholds=stored or sq.DEFAULT_THRESHOLDS)
    events.ensure_tables(con)
    noise_cache.ensure_tables(con)
    as_of = hour_floor(as_of)
    existing = events.known_events(con, as_of, config.lookback_hours)
    long_h = max(config.lookback_hours, online.lookback_hours(config.seq))
    mats = {}
    for name in config.series:
        spec = sr.SPEC_BY_NAME[name]
        mats[name] = sr.load_matrix(con, spec, as_of, long_h if _sequential(spec, config) else config.lookback_hours)
    if config.drift is None:
        ref = mats.get("kernel_mean_ns")
        config = replace(config, drift=estimate_drift(ref.values[:, -config.lookback_hours :]) if ref is not None else None)
    shares = events.gpu_time_shares(con, as_of)
    gpu_jobs = events.gpu_top_jobs(con, as_of, config.lookback_hours)
    candidates: list[Candidate] = []
    updates: list[tuple] = []
    for name, mat in mats.items():
        spec = mat.spec
        open_here = {}
        for row in existing:
            if row["series"] == name:
                open_here.setdefault(row["series_key"], []).append(row)
        keys = [sr.series_key(name, k) for k in mat.keys]
        recent = _in_window(mat, config.lookback_hours)  # the others have vanished, whichever path tested them
        seq = _sequential_steps(con, mat, keys, as_of, config) if _sequential(spec, config) else {}
        steps_of = {i: s for i, s in seq.items() if recent[i]}
        todo = recent & ~np.isin(np.arange(len(keys)), list(steps_of))
        short = _tail(mat, config.lookback_hours)
        absence = spec.steps == "absence"
        if config.incremental and len(keys):
            screened = absent_now(short.values) if absence else screen_tail(short.values, spec.bad, config.screen_z, window=config.window)
            todo &= screened | np.array([k in open_here for k in keys], dtype=bool)
        off = mat.hours - short.hours  # find_steps indexes the short window; steps index ``mat``
        for i in np.flatnonzero(todo):
            found = (find_absence(short.values[i], config=config) if absence
                     else find_steps(short.values[i], bad=spec.bad, period=spec.period, config=config))
            steps_of[i] = [_shift(st, off) for st in found]
        for i, steps in steps_of.items():
            updates += update_open(open_here.pop(keys[i], []), steps, mat, i, as_of, config)
            for st in steps:
                if st.index < mat.hours - config.tail_hours or abs(st.magnitude_pct) < config.min_magnitude_pct:
                    continue
                cand = candidate(name, mat, i, keys[i], st, shares, gpu_jobs, as_of, config)
                if spec.kernel_level and cand.reg.share_gpu_time < config.min_share:
                    continue
                candidates.append(cand)
        for rows in open_here.values():  # open events whose series vanished from the window
            updates += update_open(rows, [], mat, None, as_of, config)
    candidates = dedup(candidates, existing, config)
    events.save_events(con, [(c.reg, c.series_key, c.ended_at) for c in candidates], updates, as_of)
    return load_regressions(con, statuses=OPEN, as_of=as_of)


def _sequential(spec, config: DetectConfig) -> bool:
    return config.sequential and spec.sequential


def _sequential_steps(con, mat, keys: list[str], as_of: dt.datetime, config: DetectConfig) -> dict[int, list[Step]]:
    """Rows of ``mat`` the sequential detector tests (enough history), each with its alarm as a
    Step (index into ``mat``) or none. p_value: exp(-GLR), the likelihood-ratio bound. The day's
    noise model comes from the ``noise_models`` cache (fitted and stored by the day's first run)."""
    version = online.cache_version(config.seq, config.seq_min_history, config.seq_young_history)
    cached = noise_cache.load_day(con, mat.spec.name, as_of.date(), version)
    rows, model, store = online.day_model(mat.values, keys, as_of.hour, cached, bad=mat.spec.bad, config=config.seq,
                                          min_history=config.seq_min_history, young_history=config.seq_young_history)
    if store is not None:
        noise_cache.save_day(con, mat.spec.name, as_of.date(), version, *store, nu=config.seq.nu)
    res = online.sequential_alarms(mat.values, as_of.hour, bad=mat.spec.bad, thresholds=config.thresholds,
                                   config=config.seq, min_history=config.seq_min_history,
                                   young_thresholds=config.young_thresholds, model=model, rows=rows)
    out: dict[int, list[Step]] = {}
    al = res.alarms
    for j, i in enumerate(res.rows.tolist()):
        if not al.alarm[j]:
            out[i] = []
            continue
        out[i] = [Step(int(al.onset[j]), float(al.before[j]), float(al.after[j]), float(al.magnitude_pct[j]),
                       float(np.exp(-min(float(al.stat[j]), 700.0))))]
    return out


def _shift(st: Step, off: int) -> Step:
    return replace(st, index=st.index + off, reverted_index=None if st.reverted_index is None else st.reverted_index + off)


def _in_window(mat, hours: int) -> np.ndarray:
    """Rows with data in the last ``hours`` columns (a row seen only earlier has vanished)."""
    v, w = mat.values[:, -hours:], mat.weights[:, -hours:]
    return (~np.isnan(v) | (w > 0)).any(axis=1) if v.size else np.zeros(len(mat.keys), dtype=bool)


def _tail(mat, hours: int):
    """The last ``hours`` columns of ``mat`` (the change-point path's window)."""
    if mat.hours <= hours:
        return mat
    return sr.SeriesMatrix(mat.spec, mat.end, mat.keys, mat.values[:, -hours:], mat.weights[:, -hours:])
