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
import math
from dataclasses import dataclass, field, replace

import numpy as np

from analytics.store import series as sr
from analytics.changepoint import detect_change_points
from analytics.results import Regression
from analytics.store import regressions as events
from analytics.store.regressions import OPEN, load_regressions
from cudawatch.shards import hour_floor

#: A series that starts from 0 (a new kernel's share) has an infinite relative change; regressions
#: report it as +1000 % so that JSON, charts and sorting stay finite.
MAX_MAGNITUDE_PCT = 1000.0

#: Preference when several series show one event of the same kernel (most specific first).
_PRIORITY = {"kernel_mean_ns": 0, "kernel_id_mean_ns": 1, "kernel_launch_share": 2, "kernel_time_share": 3,
             "memcpy_ns_per_byte": 4, "job_gpu_busy_s": 5, "gpu_sm_clock_mhz": 6, "gpu_mem_clock_mhz": 7}



@dataclass(frozen=True)
class DetectConfig:
    """Settings of the regression layer (defaults are the benchmarked ones).

    lookback_hours: trailing window each run analyses. tail_hours: change points older than this
    when first seen are history, not new events. min_points: fewest valid hours a series needs.
    min_size, window, max_pvalue, min_magnitude_pct: passed to detect_change_points.
    went_away_hours: a step that reverts within this many hours is recorded as went_away.
    dedup_hours: events of one kernel/job/GPU whose onsets are this close are one event.
    min_share: kernel-level events below this share of their job's GPU time are not raised (0: all).
    symptom_hours: a job or kernel step this close to a step of its GPU's clocks (or a job step this
    close to a kernel step of the same job) is taken as that event's symptom, not a new event.
    screen_z: incremental mode's tail screen threshold; incremental=False analyses every series.
    drift: relative random-walk drift per hour of the series' level (see detect_change_points);
    None estimates it across the fleet's kernel series each run (``estimate_drift``).
    series: names of the series families (analytics.store.series.SPECS) to watch.
    """

    lookback_hours: int = 168
    tail_hours: int = 24
    min_points: int = 24
    min_size: int = 3
    window: int = 48
    max_pvalue: float = 1e-6
    min_magnitude_pct: float = 2.0
    went_away_hours: int = 6
    dedup_hours: int = 6
    min_share: float = 0.0
    symptom_hours: int = 2
    screen_z: float = 4.0
    drift: float | None = None
    incremental: bool = True
    series: tuple[str, ...] = tuple(s.name for s in sr.SPECS)

    def cp_options(self, period: int | None) -> dict:
        return dict(min_size=self.min_size, window=self.window, max_pvalue=self.max_pvalue,
                    min_magnitude_pct=self.min_magnitude_pct, period=period, drift=self.drift or 0.0)


@dataclass(frozen=True)
class Step:
    """A bad-way level change found in one series (indices into the analysed values)."""

    index: int
    before: float
    after: float
    magnitude_pct: float
    p_value: float
    reverted_index: int | None = None


# --------------------------------------------------------------------------- pure functions


def ewma_deviation_check(value: float, baseline: float, *, medium: float = 0.2, high: float = 0.5) -> str | None:
    """The design article's rule: |value - baseline| / baseline above 20 % is medium, above 50 % high.

    Returns "medium", "high" or None. One hour against the EWMA, both directions, no noise model:
    fast but blind to steps below 20 % and loud on noisy series (docs/detection.md).
    """
    if baseline is None or not math.isfinite(baseline) or baseline == 0 or value is None or not math.isfinite(value):
        return None
    deviation = abs(value - baseline) / abs(baseline)
    if deviation > high:
        return "high"
    if deviation > medium:
        return "medium"
    return None


def ewma(values: np.ndarray, alpha: float) -> np.ndarray:
    """EWMA along the last axis, skipping NaNs (the previous level carries over a missing hour)."""
    values = np.asarray(values, dtype=float)
    out = np.full(values.shape, np.nan)
    level = np.full(values.shape[:-1], np.nan)
    for h in range(values.shape[-1]):
        x = values[..., h]
        fresh = np.isnan(level)
        level = np.where(np.isnan(x), level, np.where(fresh, x, alpha * x + (1 - alpha) * level))
        out[..., h] = level
    return out


def find_steps(values, *, bad: int, period: int | None, config: DetectConfig = DetectConfig()) -> list[Step]:
    """Bad-way change points of one series, each with the index where it reverted, if it did.

    A later change point reverts a step when it moves the good way and brings the level back to
    within half the step of the old level. Series with fewer than ``config.min_points`` valid
    hours, and seasonal series with fewer than three periods, give no steps.
    """
    values = np.asarray(values, dtype=float)
    valid = np.count_nonzero(~np.isnan(values))
    if valid < config.min_points or (period is not None and valid < 3 * period):
        return []  # too little data (a seasonal series needs three cycles for its daily profile)
    cps = detect_change_points(values, **config.cp_options(period))
    steps = []
    for i, cp in enumerate(cps):
        if bad * (cp.mean_after - cp.mean_before) <= 0:
            continue
        jump = cp.mean_after - cp.mean_before
        revert = None
        for later in cps[i + 1 :]:
            if bad * (later.mean_after - later.mean_before) < 0 and abs(later.mean_after - cp.mean_before) <= 0.5 * abs(jump):
                revert = later.index
                break
        if _onset_not_yet_clear(values, cp, bad, config.min_size):
            continue
        steps.append(Step(cp.index, cp.mean_before, cp.mean_after, cp.magnitude_pct, cp.p_value, revert))
    return steps


def _onset_not_yet_clear(values: np.ndarray, cp, bad: int, min_size: int, window: int = 48) -> bool:
    """True when the new segment is still short and its first point sits on the old side of the
    midpoint between the raw medians of the old and the new level: with ``min_size`` points
    required, a step one hour old plus one high old-level hour can pass the test with the onset an
    hour early. Waiting a run places it right."""
    after = values[cp.index :]
    after = after[~np.isnan(after)]
    if after.size >= 2 * min_size or after.size == 0:
        return False
    before = values[max(0, cp.index - window) : cp.index]
    before = before[~np.isnan(before)]
    if before.size == 0:
        return False
    mid = 0.5 * (float(np.median(before)) + float(np.median(after)))
    return bad * (after[0] - mid) <= 0


def estimate_drift(values: np.ndarray, *, short: int = 6, long: int = 24, min_series: int = 10) -> float | None:
    """Fleet-wide relative random-walk drift per hour, pooled over the rows of ``values``.

    Each row is divided by its median; for a random walk of step variance q plus short-memory
    noise, E (x[t+L] - x[t])^2 = const + L q once L exceeds the noise memory, so
    q_i = (V_long - V_short) / (long - short), with robust scales (1.4826 x median |lag difference|,
    not centred: a drift's trend is what we measure). The 20 %-trimmed mean of q_i over rows is
    returned as a standard deviation (None when fewer than ``min_series`` rows qualify).
    """
    from scipy.stats import trim_mean

    values = np.asarray(values, dtype=float)
    if values.ndim != 2 or values.shape[1] < long + 12:
        return None
    with np.errstate(all="ignore"), quiet_warnings():
        med = np.nanmedian(values, axis=1, keepdims=True)
        r = values / np.where(med != 0, med, np.nan)

        def robust_var(lag):
            return (1.4826 * np.nanmedian(np.abs(r[:, lag:] - r[:, :-lag]), axis=1)) ** 2

        q = (robust_var(long) - robust_var(short)) / (long - short)
    q = q[np.isfinite(q)]
    if q.size < min_series:
        return None
    return float(math.sqrt(max(float(trim_mean(q, 0.2)), 0.0)))


def screen_tail(values: np.ndarray, bad: int, z: float, tails=(3, 6, 12), window: int = 48) -> np.ndarray:
    """Rows of ``values`` whose last 3, 6 or 12 hours (their median) sit more than ``z`` noise units the bad way
    from the median of the ``window`` hours before them (noise: MAD of first differences, the
    white-noise scale). Looser than the change-point test it gates (which needs about 5 such units
    at the default p-value, more with serial correlation or drift): it only decides which series
    that test looks at."""
    n, hours = values.shape
    if n == 0:
        return np.zeros(0, dtype=bool)
    end = max(hours - max(tails), 1)
    ref = values[:, max(0, end - window) : end]  # the recent past, as the change-point test sees it
    med = np.median if not np.isnan(values).any() else np.nanmedian  # nanmedian is ~10x slower
    with np.errstate(all="ignore"), quiet_warnings():
        level = med(ref, axis=1)
        d = np.diff(values, axis=1)
        sigma = 1.4826 * med(np.abs(d - med(d, axis=1, keepdims=True)), axis=1) / math.sqrt(2)
        sigma = np.where(sigma > 0, sigma, np.nanmean(np.abs(d), axis=1) / math.sqrt(2))
        hit = np.zeros(n, dtype=bool)
        for m in tails:
            tail = values[:, -m:]
            k = np.count_nonzero(~np.isnan(tail), axis=1)
            shift = bad * (med(tail, axis=1) - level)  # median: an outlier hour does not pass
            zt = shift / (sigma / np.sqrt(np.maximum(k, 1)))
            hit |= (k > 0) & ((zt > z) | ((sigma == 0) & (shift > 0)))
    return hit | np.isnan(sigma)


class quiet_warnings:
    def __enter__(self):
        import warnings

        self._w = warnings.catch_warnings()
        self._w.__enter__()
        warnings.simplefilter("ignore", RuntimeWarning)

    def __exit__(self, *exc):
        return self._w.__exit__(*exc)


def severity_of(magnitude_pct: float, share: float) -> str:
    """Severity from the extra GPU time the change costs: |magnitude| x share of the job's GPU time."""
    impact = min(abs(magnitude_pct), 1000.0) / 100.0 * share
    if impact >= 0.10:
        return "critical"
    if impact >= 0.03:
        return "high"
    if impact >= 0.005:
        return "medium"
    return "low"


# --------------------------------------------------------------------------- events


@dataclass
class _Candidate:
    reg: Regression
    series_key: str
    ended_at: dt.datetime | None = None
    extra: dict = field(default_factory=dict)


def detect_regressions(con, as_of: dt.datetime, config: DetectConfig | None = None) -> list[Regression]:
    """Detect regressions in the data up to ``as_of`` (a UTC hour), store them, return the open ones.

    Idempotent: the same ``as_of`` twice leaves the ``regressions`` table as the first run left it.
    Returned regressions have empty ``causes`` (analytics.rules.attach_causes fills them).
    """
    config = config or DetectConfig()
    events.ensure_tables(con)
    as_of = hour_floor(as_of)
    existing = events.known_events(con, as_of, config.lookback_hours)
    mats = {name: sr.load_matrix(con, sr.SPEC_BY_NAME[name], as_of, config.lookback_hours) for name in config.series}
    if config.drift is None:
        ref = mats.get("kernel_mean_ns")
        config = replace(config, drift=estimate_drift(ref.values) if ref is not None else None)
    shares = events.gpu_time_shares(con, as_of)
    gpu_jobs = events.gpu_top_jobs(con, as_of, config.lookback_hours)
    candidates: list[_Candidate] = []
    updates: list[tuple] = []
    for name, mat in mats.items():
        spec = mat.spec
        open_here = {}
        for row in existing:
            if row["series"] == name:
                open_here.setdefault(row["series_key"], []).append(row)
        keys = [sr.series_key(name, k) for k in mat.keys]
        todo = np.ones(len(keys), dtype=bool)
        if config.incremental and len(keys):
            todo = screen_tail(mat.values, spec.bad, config.screen_z, window=config.window)
            todo |= np.array([k in open_here for k in keys], dtype=bool)
        for i in np.flatnonzero(todo):
            steps = find_steps(mat.values[i], bad=spec.bad, period=spec.period, config=config)
            updates += _update_open(open_here.pop(keys[i], []), steps, mat, i, as_of, config)
            for st in steps:
                if st.index < mat.hours - config.tail_hours or abs(st.magnitude_pct) < config.min_magnitude_pct:
                    continue
                cand = _candidate(name, mat, i, keys[i], st, shares, gpu_jobs, as_of, config)
                if spec.kernel_level and cand.reg.share_gpu_time < config.min_share:
                    continue
                candidates.append(cand)
        for rows in open_here.values():  # open events whose series vanished from the window
            updates += _update_open(rows, [], mat, None, as_of, config)
    candidates = _dedup(candidates, existing, config)
    events.save_events(con, [(c.reg, c.series_key, c.ended_at) for c in candidates], updates, as_of)
    return load_regressions(con, statuses=OPEN, as_of=as_of)


def _candidate(name, mat, i, key, st: Step, shares, gpu_jobs, as_of, config) -> _Candidate:
    job, kernel, kernel_id, gpu_uuid, signature = mat.keys[i]
    spec = mat.spec
    if spec.kernel_level:
        share = shares.get((job, kernel_id), 0.0)
    elif name.startswith("memcpy_"):
        share = shares.get(("memcpy", job), 0.0)
    else:
        share = 1.0
    if gpu_uuid is not None and job is None:
        job = gpu_jobs.get(gpu_uuid, ("", set()))[0] or ""
    onset = mat.hour_at(st.index)
    ended = mat.hour_at(st.reverted_index) if st.reverted_index is not None else None
    status = "new"
    if ended is not None:
        status = "went_away" if (ended - onset) <= dt.timedelta(hours=config.went_away_hours) else "resolved"
    magnitude = max(-MAX_MAGNITUDE_PCT, min(MAX_MAGNITUDE_PCT, st.magnitude_pct))
    reg = Regression(job=job or "", kernel=kernel, kernel_id=kernel_id, gpu_uuid=gpu_uuid, series=name, onset=onset,
                     before=st.before, after=st.after, magnitude_pct=magnitude, p_value=st.p_value,
                     severity=severity_of(magnitude, share), share_gpu_time=share, signature=signature,
                     status=status, detected_at=as_of)
    return _Candidate(reg, key, ended, {"jobs": gpu_jobs.get(gpu_uuid, ("", set()))[1] if gpu_uuid else {job}})


def _update_open(rows, steps, mat, i, as_of, config) -> list[tuple]:
    """New status, stats and end of the open events of one series at ``as_of``."""
    out = []
    for row in rows:
        if row["updated_at"] > as_of or row["status"] not in OPEN:
            continue  # a later run already looked at it, or it is closed
        onset = row["onset"]
        match = None
        for st in steps:
            if abs((mat.hour_at(st.index) - onset).total_seconds()) <= config.dedup_hours * 3600:
                match = st
        status = "new" if row["detected_at"] == as_of else "ongoing"
        before, after, mag, p, ended = row["before"], row["after"], row["magnitude_pct"], row["p_value"], None
        if match is not None:
            after, mag, p = match.after, max(-MAX_MAGNITUDE_PCT, min(MAX_MAGNITUDE_PCT, match.magnitude_pct)), match.p_value
            if match.reverted_index is not None:
                ended = mat.hour_at(match.reverted_index)
        elif i is None:
            ended = as_of  # the series is gone (kernel or job stopped): the regression no longer shows
        else:
            recent = mat.values[i, -config.min_size :]
            recent = recent[~np.isnan(recent)]
            if recent.size and abs(np.median(recent) - before) < abs(np.median(recent) - after):
                ended = as_of - (config.min_size - 1) * sr.HOUR
        if ended is not None:
            status = "went_away" if ended - onset <= dt.timedelta(hours=config.went_away_hours) else "resolved"
        out.append((row["event_id"], status, after, mag, p, ended))
    return out


def _dedup(cands: list[_Candidate], existing: list[dict], config) -> list[_Candidate]:
    """One event per regression: per kernel (all its signatures and series), per job, per GPU."""
    near = dt.timedelta(hours=config.dedup_hours)
    symptom = dt.timedelta(hours=config.symptom_hours)

    def scope(c: _Candidate):
        r = c.reg
        return _scope(r.series, r.job, r.kernel_id, r.gpu_uuid, r.signature)

    def scope_row(row):
        return _scope(row["series"], row["job"], row["kernel_id"], row["gpu_uuid"], row["signature"])

    taken: list[tuple] = [(scope_row(r), r["onset"], r["job"]) for r in existing]
    kept: list[_Candidate] = []
    order = sorted(cands, key=lambda c: (_PRIORITY.get(c.reg.series, 9), -c.reg.share_gpu_time * abs(c.reg.magnitude_pct)))
    # GPU events first: kernel and job steps of jobs on a GPU that changed at the same hour are its symptoms.
    order.sort(key=lambda c: scope(c)[0] != "gpu")
    gpu_events = [(r["onset"], _jobs_of_gpu_row(r)) for r in existing if r["gpu_uuid"] is not None]
    for c in order:
        s, onset = scope(c), c.reg.onset
        if any(ts == s and abs(o - onset) <= near for ts, o, _ in taken):
            continue
        if s[0] == "job" and any(ts[0] == "kernel" and j == c.reg.job and abs(o - onset) <= symptom for ts, o, j in taken):
            continue
        if s[0] != "gpu" and any(abs(o - onset) <= symptom and c.reg.job in jobs for o, jobs in gpu_events):
            continue
        kept.append(c)
        taken.append((s, onset, c.reg.job))
        if s[0] == "gpu":
            gpu_events.append((onset, c.extra.get("jobs", set())))
    # job-level events found before a kernel event of the same job at the same onset are dropped too
    return [c for c in kept if not (scope(c)[0] == "job" and any(
        scope(k)[0] == "kernel" and k.reg.job == c.reg.job and abs(k.reg.onset - c.reg.onset) <= symptom for k in kept))]


def _scope(series, job, kernel_id, gpu_uuid, signature) -> tuple:
    if gpu_uuid is not None:
        return ("gpu", gpu_uuid)
    if kernel_id is not None:
        return ("kernel", job, kernel_id)
    if series.startswith("memcpy_"):
        return ("memcpy", job, signature)
    return ("job", job)


def _jobs_of_gpu_row(row) -> set:
    return {row["job"]} if row.get("job") else set()


