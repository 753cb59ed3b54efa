"""The random-walk drift term of the sequential detector (analytics.noise_model.drift_q2 /
pooled_drift, analytics.sequential.drift_factor): a family of clean series whose level wanders by
a random walk of 0.15 % per hour (the fleet simulator's drift) raises nothing in a week of hourly
runs, where the statistic without the drift term alarmed; steps and outlier hours keep their
behaviour. docs/detection.md ("Random-walk drift in the null")."""

import numpy as np
import pytest

from analytics import noise_model as nm
from analytics import online
from analytics import sequential as sq
from simulator.noise import hourly_log_noise

HIST = 264  # hours before the first hourly run (11 days, as benchmarks/fleet_noise.py)
DAYS = 7
#: The thresholds of version 2026-12-03.2, calibrated for the statistic without the drift term.
OLD_THRESHOLDS = (np.inf, np.inf, 11.13, 11.25, 11.47, 11.61, 11.94, 12.16, 12.47, 12.60, 12.89, 13.14)


def family(n=40, drift=0.0015, seed=3, outliers=0.02):
    rng = np.random.default_rng(seed)
    sigma = rng.choice([0.008, 0.010, 0.012], n)
    return 1e5 * np.exp(hourly_log_noise(rng, n, HIST + 24 * DAYS, sigma, drift_sigma=drift, outlier_p=outliers))


def hourly_runs(values, first, last, config=sq.SequentialConfig(), thresholds=sq.DEFAULT_THRESHOLDS):
    """Alarms (row, onset column, run column) of online.sequential_alarms run at every hour from
    ``first`` to ``last`` (columns; hour of day = column % 24), the day's model from its hour-0 run."""
    out, day = [], None
    for t in range(first, last + 1):
        v = values[:, : t + 1]
        if day is None or t % 24 == 0:
            day = online.fit_day(v, t % 24, bad=1, config=config)
        rows, model = day
        res = online.sequential_alarms(v, t % 24, bad=1, thresholds=thresholds, config=config, model=model, rows=rows)
        out += [(int(res.rows[i]), int(res.alarms.onset[i]), t) for i in np.flatnonzero(res.alarms.alarm)]
    return out


def test_the_fitted_drift_recovers_the_random_walk_step_and_ignores_steps_in_the_history():
    hod = np.arange(HIST) % 24

    def drift(x):
        q = sq.fit(x, hod).drift
        assert (q == q[0]).all()  # pooled over the family
        return q[0]

    x = np.log(family(300))[:, :HIST]
    assert drift(x) == pytest.approx(0.0015, rel=0.15)
    assert drift(np.log(family(300, drift=0.0005))[:, :HIST]) == pytest.approx(0.0005, rel=0.3)
    assert drift(np.log(family(300, drift=0.0))[:, :HIST]) < 0.0004
    stepped = x.copy()
    stepped[:60, 150:] += 0.05  # a +5 % step in the history of 20 % of the series
    stepped[60:90, 100:] += 0.10  # and +10 % in 10 % more
    assert drift(stepped) == pytest.approx(0.0015, rel=0.15)


def test_the_drift_term_only_lowers_the_statistic_and_vanishes_without_drift():
    from dataclasses import replace

    x = np.log(family(20))
    hod = np.arange(x.shape[1]) % 24
    model = sq.fit(x[:, :HIST], hod[:HIST])
    cfg = sq.SequentialConfig()
    v = sq.drift_var(model, cfg)
    q2, R = model.drift[:, None] ** 2, cfg.reference_hours
    assert v[:, 2:3] == pytest.approx(q2 * (4 * 7 / 18 + (R - 1) * (2 * R - 1) / (6 * R)))  # m = 3
    assert (np.diff(v, axis=1) > 0).all()
    w = x[:, HIST - 60 : HIST]
    with_drift = sq.scan(w, hod[HIST - 60 : HIST], model, cfg).stat
    without = sq.scan(w, hod[HIST - 60 : HIST], model, replace(cfg, drift_term=False)).stat
    assert (with_drift <= without + 1e-12).all() and (with_drift < without - 1e-6).any()
    none = sq.scan(w, hod[HIST - 60 : HIST], replace(model, drift=np.zeros(20)), cfg).stat
    assert none == pytest.approx(without)


def test_a_clean_drifting_family_raises_nothing_in_a_week_of_hourly_runs():
    values = family()
    raised = hourly_runs(values, HIST, values.shape[1] - 1)
    assert raised == []
    # the same week without the drift term, at the thresholds calibrated for it, alarmed
    old = hourly_runs(values, HIST, values.shape[1] - 1, sq.SequentialConfig(drift_term=False), OLD_THRESHOLDS)
    assert len({r for r, _, _ in old}) >= 2


@pytest.mark.parametrize("size", [0.05, 0.08])
def test_a_sustained_step_in_a_drifting_series_alarms_with_its_exact_onset(size):
    values = family()
    onset = HIST + 30
    values[7, onset:] *= 1 + size  # 4-10 sigma of the hourly noise
    raised = hourly_runs(values, onset, onset + 5)
    ours = [(o, t) for r, o, t in raised if r == 7]
    assert ours, raised
    assert ours[0] == (onset, ours[0][1]) and ours[0][1] <= onset + 5
    assert all(o == onset for o, _ in ours)
    assert all(r == 7 for r, _, _ in raised)


@pytest.mark.parametrize("size", [0.08, 0.45, 2.0])
def test_an_isolated_outlier_hour_in_a_drifting_series_never_alarms(size):
    values = family()
    hour = HIST + 40
    values[5, hour] *= 1 + size
    assert [r for r in hourly_runs(values, hour, hour + 11) if r[0] == 5] == []


def test_for_gaussian_innovations_the_profiled_null_is_the_glr_of_the_contrast_with_the_walks_variance():
    """With nu -> inf (Gaussian), phi = 0 and a constant reference, l(b) = S b - I b^2 / 2, and the
    statistic minus the null's profile is d^2 / (2 (1/I + Vrw)) (docs/detection.md), up to the
    grids of d and b (a fine grid of b here; the shipped DRIFT_GRID's 7 values leave the null's
    maximum up to ~18 % of the statistic short, measured on these windows)."""
    cfg = sq.SequentialConfig(nu=1e6, clean_prev=0.0, floor_pct=0.01, grid=64, grid_lo=0.01, grid_hi=20.0)
    M, n, s = cfg.max_window, 200, 0.01
    rng = np.random.default_rng(7)
    e0 = rng.normal(0.0, s, (n, M)) + rng.uniform(0.0, 0.02, (n, 1))  # innovations = residuals (phi 0)
    phi, scale = np.zeros(n), np.full(n, s)
    stat, _, _ = sq.glr(e0, np.zeros((n, M)), phi, scale, cfg)
    q = 0.0015
    model = nm.NoiseModel(phi=phi, scale=scale, nu=cfg.nu, season=np.zeros((n, 4)), ok=np.ones(n, bool),
                          hours=np.full(n, 336), drift=np.full(n, q))
    sd = np.sqrt(sq.drift_var(model, cfg))[:, ::-1]
    mult = np.linspace(0.02, 4.0, 200)
    null, _, _ = sq.glr(e0, np.zeros((n, M)), phi, scale, cfg, shifts=sd[:, None, :] * mult[None, :, None],
                        penalty=mult**2 / 2)
    got = stat - np.maximum(null, 0.0)
    k = np.arange(1, M + 1)
    S = np.cumsum(e0[:, ::-1], axis=1) / s**2  # column m - 1: the last m hours
    info = k / s**2
    vrw = sq.drift_var(model, cfg)
    exact = np.where(S > 0, S**2 / (2 * info * (1 + info * vrw)), 0.0)
    bstar = S / (info + 1 / vrw) / np.sqrt(vrw)  # the null's best offset, in sd of the walk
    inside = (S / info > 0.003) & (bstar > 0.05) & (bstar < 3.9)  # both optima inside their grids
    assert inside.sum() > 500
    assert got[inside] == pytest.approx(exact[inside], rel=0.03, abs=0.01)  # the grid of d: 64 values
