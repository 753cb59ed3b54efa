"""Sequential (online) regression detection for the hourly path: a windowed Student-t GLR on
prewhitened residuals, vectorised over many series at once.

Pure numpy, no SQL, no I/O, no clock. ``detect_hourly(values, hour_of_day, ...)`` runs on the trailing window
of every series of one family; ``analytics.changepoint`` stays for history and reports.

Method (docs/detection.md has the derivation and what was tried):

- Noise model per series (``analytics.noise_model``): level, daily cycle (2 harmonics), AR(1)
  ``phi`` and the t(4) scale of the innovations, all estimated robustly from the series' own
  history before the test zone (up to ``fit_hours``, two weeks by default).
- Outlier hours are additive: the previous hour in each innovation is clipped around the tested
  hypothesis' mean (``clean_prev``), so one outlier hour is one large innovation, not two.
- The last ``max_window`` hours are the test zone. The pre-change level of each candidate onset
  is the mean of the ``reference_hours`` before it (de-cycled, winsorised). Residuals
  u = x - level - cycle are prewhitened, e[t] = u[t] - phi u[t-1]; a step of size d at onset tau
  shifts e[tau] by d and every later e[t] by (1 - phi) d, which is the exact AR(1) law of a short
  post-change mean (no (1 + rho)/(1 - rho) inflation, which overstates a 3-hour mean's variance by
  ~35 %).
- For every onset tau in the zone the generalised likelihood ratio of "a step up of d >= floor at
  tau" against "no step" under the innovations' law (t(nu) mixed with the fleet's outlier hours),
  maximised over a grid of d (Page 1954; Lorden 1971, doi:10.1214/aoms/1177693055; Basseville &
  Nikiforov, *Detection of Abrupt Changes*, 1993, ch. 2.4; a windowed GLR as in Willsky & Jones
  1976, doi:10.1109/TAC.1976.1101146). One-sided: only the bad way. Under the t likelihood one
  outlier hour among m hours raises the statistic by a bounded amount ((nu + 1)/2 log(1 / (1 -
  phi)^2) ~ 2.2 for t(4), phi 0.35).
- Random-walk drift: the no-step hypothesis lets the level have moved by b ~ N(0, Vrw) since the
  reference (``drift_var``, the family's drift from ``analytics.noise_model``); the statistic is
  the GLR minus the null's penalised profile over b (docs/detection.md has the arithmetic).
- An alarm needs the statistic of some window of m >= ``min_len`` (3) hours above that window
  length's threshold ``thresholds[m - 1]`` (``analytics.calibration`` sets them on the fleet's
  clean history for a target false-alarm rate); the onset is the argmax of the statistic over
  tau (the maximum-likelihood change time), and an alarm whose onset cannot be placed (the zone's
  oldest hour, or a reference that already rose) waits; the magnitude is a t M-estimate after it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.special import gammaln

from analytics import noise_model as nm
from analytics.outliers import OutlierLaw


@dataclass(frozen=True)
class SequentialConfig:
    """max_window: onsets up to this many hours back are tested (the zone). min_len: fewest
    post-change hours for an alarm. reference_hours: hours before the zone that give the level.
    fit_hours: history before the zone the noise model is fitted on. floor_pct: smallest step
    (relative, %) tested, the product's minimum magnitude. grid: shift values tried between
    ``grid_lo`` and ``grid_hi`` innovation scales (geometric; all at least the floor). clip:
    winsorising of the reference, in stationary sigmas. ref_z: an alarm whose onset's last w
    reference hours sit this many standard errors above the earlier ones, for some w in
    ``ref_splits``, is held back (the step began before that onset; w = 3, 6 see one that began a
    few hours before it, which 12 hours dilute). clean_prev: in every innovation the previous hour
    enters clipped at this many stationary sigmas around the hypothesis' own mean, so an additive
    outlier hour does not leak into the next hour's innovation (0: off). refine: iterations of the
    t-ML refit of phi and the scale (analytics.noise_model; 0: off). drift_term: the no-step
    hypothesis allows the model's random-walk drift since the reference (``drift_var``)."""

    max_window: int = 12
    min_len: int = 3
    reference_hours: int = 48
    fit_hours: int = 336
    floor_pct: float = 2.0
    nu: float = 4.0
    grid: int = 16
    grid_lo: float = 0.5
    grid_hi: float = 60.0
    clip: float = 3.0
    ref_z: float = 3.0
    ref_splits: tuple[int, ...] = (3, 6, 12)
    clean_prev: float = 3.0
    refine: int = 3
    drift_term: bool = True

    @property
    def floor_log(self) -> float:
        return float(np.log1p(self.floor_pct / 100.0))


#: Version of DEFAULT_THRESHOLDS (change it with the numbers; events do not store it).
THRESHOLDS_VERSION = "2026-12-05.1"
#: Thresholds on the GLR per window length m = 1..12 h: ``analytics.calibration.calibrate_thresholds``
#: through the hourly path on the benchmark's clean seed 101 (36,000 series x 7 days of runs) for 0.9
#: false alarms per 1,000 series-days, tail weighted per window length (``fleet_calibration.WINDOW_WEIGHTS``,
#: chosen on development seeds); held-out 2026-12-05: 0.88 false, k=3σ within 3 runs 0.32
#: (docs/benchmarks.md; `benchmarks/detection.py --product-only` reproduces them). 2026-12-04.2: equal
#: weights (0.97, 0.21). Windows shorter than min_len never alarm.
DEFAULT_THRESHOLDS: tuple[float, ...] = (np.inf, np.inf, 9.86, 11.03, 11.17, 11.35, 12.38, 12.64, 12.77, 12.93, 13.15, 13.39)


@dataclass(frozen=True)
class Scan:
    """GLR statistics of the zone: stat[i, m-1] is the statistic of a step starting m hours before
    the end (m = 1..max_window); shift[i, m-1] the maximising step (log units); valid[i, m-1] the
    number of valid hours in that window; level[i, m-1] the pre-change level of that onset (log
    units, cycle removed); cycle: (n, max_window) daily cycle over the zone; ref_z[i, m-1]: the
    largest rise of the last w reference hours of that onset over the earlier ones (w in
    ``ref_splits``), in standard errors (large when the step began before the onset)."""

    stat: np.ndarray
    shift: np.ndarray
    valid: np.ndarray
    level: np.ndarray
    cycle: np.ndarray
    ref_z: np.ndarray | None = None


def loglik(e: np.ndarray, scale: np.ndarray, nu: float, outliers: OutlierLaw | None = None) -> np.ndarray:
    """Log density of innovations e: Student-t(nu) with ``scale``, mixed with the fleet's outlier
    component when given ((1 - p) t + p g); without it, up to a constant."""
    t = -0.5 * (nu + 1.0) * np.log1p((e / scale) ** 2 / nu)
    if outliers is None:
        return t
    c = gammaln((nu + 1) / 2) - gammaln(nu / 2) - 0.5 * np.log(nu * np.pi) - np.log(scale)
    q = outliers.p_pos + outliers.p_neg
    return np.logaddexp(np.log1p(-q) + c + t, np.log(outliers.density(e) + 1e-300))


def shift_grid(scale: np.ndarray, config: SequentialConfig) -> np.ndarray:
    """(n, grid) step sizes tried per series: geometric in innovation scales, at least the floor."""
    k = np.geomspace(config.grid_lo, config.grid_hi, config.grid)
    return np.maximum(scale[:, None] * k[None, :], config.floor_log)


def glr(e0: np.ndarray, delta: np.ndarray, phi: np.ndarray, scale: np.ndarray, config: SequentialConfig,
        outliers: OutlierLaw | None = None, chunk: int = 1024, u: np.ndarray | None = None,
        sigma: np.ndarray | None = None, shifts: np.ndarray | None = None,
        penalty: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Windowed one-sided t-GLR over the zone's innovations.

    e0: (n, M) innovations of the zone against a common anchor level (NaN: missing hour);
    delta: (n, M) level of the hours before each onset minus that anchor (the pre-change level of
    onset j). Returns stat, shift, valid, each (n, M), column m-1 for the onset m hours before the
    end: stat = max over d >= floor of sum_{t >= tau} log f(e_t - w_{t-tau} d) - log f(e_t), with
    e_t = e0_t - (1 - phi) delta_tau, w_0 = 1 and w_k = 1 - phi.
    u, sigma: when ``config.clean_prev`` > 0, the zone's residuals (n, M + 1, the hour before the
    zone first) and stationary sigmas: the previous hour in each innovation is then clipped at
    clean_prev sigmas around the hypothesis' own mean (an additive outlier hour does not leak into
    the next hour's innovation).
    shifts, penalty: instead of the grid of steps >= floor, the shifts (n, G, M) tried per onset
    (zone order) and a penalty (G,) subtracted from each shift's log-likelihood ratio before the
    maximum (the null's random-walk offset, ``scan``)."""
    n, M = e0.shape
    stat = np.empty((n, M))
    shift = np.empty((n, M))
    valid = ~np.isnan(e0)
    nvalid = np.cumsum(valid[:, ::-1], axis=1)[:, ::-1]  # valid hours from onset j to the end
    oj, ot = np.triu_indices(M)  # (onset, hour) pairs with hour >= onset, grouped by onset
    starts = np.flatnonzero(np.r_[True, oj[1:] != oj[:-1]])
    e0z = np.where(valid, e0, 0.0)
    cp = config.clean_prev
    if cp > 0:
        uz = np.where(np.isnan(u), 0.0, u)
        pmiss = np.isnan(u[:, :-1])  # previous hour missing: no prediction from it
    for a in range(0, n, chunk):
        b = min(n, a + chunk)
        d = shift_grid(scale[a:b], config) if shifts is None else shifts[a:b][:, :, oj]  # (c, G) or (c, G, pairs)
        d3 = d[:, :, None] if shifts is None else d
        ph = phi[a:b, None]
        use = valid[a:b, ot]
        s = scale[a:b, None]
        if cp > 0:
            lim = cp * sigma[a:b, None, None]
            dl = delta[a:b, oj]
            cur = uz[a:b, ot + 1] - dl  # (c, pairs) residual of hour t against the pre-change level
            prv = np.where(pmiss[a:b, ot], 0.0, uz[a:b, ot] - dl)
            E = cur - ph * np.clip(prv, -lim[:, 0], lim[:, 0])
            after = (ot > oj)[None, None, :]
            p1 = np.where(pmiss[a:b, ot][:, None, :], 0.0, prv[:, None, :] - np.where(after, d3, 0.0))
            E1 = cur[:, None, :] - d3 - ph[:, :, None] * np.clip(p1, -lim, lim)
        else:
            E = e0z[a:b, ot] - (1.0 - ph) * delta[a:b, oj]  # (c, pairs)
            W = np.where(ot == oj, 1.0, 1.0 - ph)  # (c, pairs)
            E1 = E[:, None, :] - W[:, None, :] * d3
        base = loglik(E, s, config.nu, outliers)
        H1 = loglik(E1, s[:, :, None], config.nu, outliers)
        L = np.add.reduceat(np.where(use[:, None, :], H1 - base[:, None, :], 0.0), starts, axis=-1)  # (c, G, onset)
        if penalty is not None:
            L = L - np.asarray(penalty, float)[None, :, None]
        best = np.argmax(L, axis=1)  # (c, onset)
        stat[a:b] = np.take_along_axis(L, best[:, None, :], axis=1)[:, 0, :]
        if shifts is None:
            shift[a:b] = np.take_along_axis(d, best, axis=1)
        else:
            shift[a:b] = np.take_along_axis(shifts[a:b], best[:, None, :], axis=1)[:, 0]
    # column m-1 <-> onset at zone index M - m
    return stat[:, ::-1], shift[:, ::-1], nvalid[:, ::-1]


def scan(x: np.ndarray, hour_of_day: np.ndarray, model: nm.NoiseModel, config: SequentialConfig = SequentialConfig(),
         *, mean_path: np.ndarray | None = None) -> Scan:
    """GLR statistics for the last ``config.max_window`` hours of ``x`` (n, T) in log units.

    The pre-change level of an onset is the mean of the ``reference_hours`` before it (cycle
    removed, winsorised at ``clip`` stationary sigmas around a t M-estimate of the level before the
    zone), so T >= max_window + reference_hours. mean_path: (n, max_window + 1) known mean
    (level + cycle) of the zone and the hour before it, instead of the estimates (the oracle rows
    of benchmarks/detection.py).
    """
    M, R = config.max_window, config.reference_hours
    x = np.atleast_2d(np.asarray(x, float))
    n, T = x.shape
    hod = np.asarray(hour_of_day, float)
    sig = np.where(model.ok, model.sigma, 1.0)
    if mean_path is None:
        if T < M + R:
            raise ValueError(f"scan needs at least {M + R} hours, got {T}")
        cyc_all = model.cycle(hod[-M - R :])
        y = x[:, -M - R :] - cyc_all
        anchor = nm.t_location(y[:, :R], sig * np.sqrt(max(model.nu - 2, 1e-9) / model.nu), model.nu)
        c = np.clip(y - anchor[:, None], -config.clip * sig[:, None], config.clip * sig[:, None])
        ok = ~np.isnan(c)
        cs = np.concatenate([np.zeros((n, 1)), np.cumsum(np.where(ok, c, 0.0), axis=1)], axis=1)
        ks = np.concatenate([np.zeros((n, 1)), np.cumsum(ok, axis=1)], axis=1)
        j = R + np.arange(M)  # onsets, as indices into y
        with np.errstate(invalid="ignore", divide="ignore"):
            delta = (cs[:, j] - cs[:, j - R]) / (ks[:, j] - ks[:, j - R])
            lrv = (1 + model.phi[:, None]) / (1 - model.phi[:, None])  # long-run variance factor of AR(1)
            ref_z = np.full((n, M), -np.inf)
            for w in {max(1, min(w, M, R // 2)) for w in config.ref_splits}:  # newest w reference hours vs the rest
                n_early, n_late = ks[:, j - w] - ks[:, j - R], ks[:, j] - ks[:, j - w]  # valid hours, not w and R - w
                early = (cs[:, j - w] - cs[:, j - R]) / n_early
                late = (cs[:, j] - cs[:, j - w]) / n_late
                se = sig[:, None] * np.sqrt(lrv * (1.0 / n_late + 1.0 / n_early))
                ref_z = np.maximum(ref_z, np.nan_to_num((late - early) / se))
        delta = np.nan_to_num(delta)
        u = y[:, -M - 1 :] - anchor[:, None]
        level, cyc = anchor[:, None] + delta, cyc_all[:, -M:]
    else:
        mean = np.asarray(mean_path, float)
        u = x[:, -M - 1 :] - mean
        delta = np.zeros((n, M))
        ref_z = np.zeros((n, M))
        level, cyc = np.repeat(mean[:, :1], M, axis=1), mean[:, 1:] - mean[:, :1]
    prev = np.clip(np.nan_to_num(u[:, :-1]), -config.clip * sig[:, None], config.clip * sig[:, None])
    prev[:, 1:] = np.where(np.isnan(u[:, 1:-1]), 0.0, u[:, 1:-1])
    e0 = u[:, 1:] - model.phi[:, None] * prev
    e0[~model.ok] = np.nan
    stat, shift, valid = glr(e0, delta, model.phi, np.where(model.ok, model.scale, 1.0), config, model.outliers,
                             u=np.where(model.ok[:, None], u, np.nan), sigma=sig)
    if config.drift_term and model.drift is not None and np.nan_to_num(model.drift).max() > 0:
        # the null's level may have wandered by b ~ N(0, Vrw) since the reference: profile it out
        sd = np.sqrt(drift_var(model, config))[:, ::-1]  # (n, M), zone (onset) order
        mult = np.asarray(DRIFT_GRID)
        null, _, _ = glr(e0, delta, model.phi, np.where(model.ok, model.scale, 1.0), config, model.outliers,
                         u=np.where(model.ok[:, None], u, np.nan), sigma=sig, shifts=sd[:, None, :] * mult[None, :, None],
                         penalty=mult**2 / 2)
        stat = stat - np.maximum(null, 0.0)
    return Scan(stat, shift, valid, level[:, ::-1], cyc, ref_z[:, ::-1])


#: Offsets of the null's level tried when profiling out the random-walk drift, in standard
#: deviations of the walk's contribution to the contrast (``drift_var``); b = 0 is always in.
DRIFT_GRID = (0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0)


def drift_var(model: nm.NoiseModel, config: SequentialConfig) -> np.ndarray:
    """(n, max_window) Vrw: the variance a random-walk level (hourly step ``model.drift``) adds to
    the mean of the m hours from an onset against the mean of the R reference hours before it,
    q^2 [(m + 1)(2m + 1) / (6m) + (R - 1)(2R - 1) / (6R)] (about q^2 (R + m) / 3), column m - 1.

    The GLR compares the post-change hours with the reference as if the level were constant; under
    drift the no-step hypothesis is "the level moved by b ~ N(0, Vrw)". ``scan`` subtracts from
    the GLR the null's profile max_b [l(b) - b^2 / (2 Vrw)] (l: the same log-likelihood ratio of a
    shift b from the onset). For Gaussian innovations (l(b) = S b - I b^2 / 2) the result is
    S^2 / (2 I (1 + I Vrw)) = d^2 / (2 (1/I + Vrw)): the GLR of the contrast with the walk's variance
    added; under the t likelihood a large step keeps a large statistic (the penalty caps b)."""
    M, R = config.max_window, config.reference_hours
    m = np.arange(1, M + 1, dtype=float)
    return np.nan_to_num(model.drift)[:, None] ** 2 * ((m + 1) * (2 * m + 1) / (6 * m) + (R - 1) * (2 * R - 1) / (6 * R))


@dataclass(frozen=True)
class Alarms:
    """Per series: alarm (bool); onset (column index into the values given, -1 without alarm);
    stat (the GLR at the onset) and ratio (the largest stat / threshold over windows); before and
    after (the level before and after in the caller's units, at the zone's last hour's cycle);
    magnitude_pct (signed, the caller's direction); model_ok (enough history to test)."""

    alarm: np.ndarray
    onset: np.ndarray
    stat: np.ndarray
    ratio: np.ndarray
    before: np.ndarray
    after: np.ndarray
    magnitude_pct: np.ndarray
    model_ok: np.ndarray


def alarm_rule(stat: np.ndarray, valid: np.ndarray, thresholds, config: SequentialConfig,
               ref_z: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The alarm rule on statistics of any leading shape (..., max_window).

    Returns (alarm, arg, usable): arg is the ML onset's window index (m - 1: the argmax of the
    statistic over windows of >= min_len valid hours); alarm needs some usable window above its
    threshold and an onset that can be placed: inside the zone (not its oldest hour) and with a
    flat reference before it (``ref_z`` at the onset below ``config.ref_z``) — otherwise the step
    began earlier, its onset would be misplaced, and the run holds the alarm back."""
    M = stat.shape[-1]
    h = np.asarray(thresholds, float)[..., :M]
    m = np.arange(1, M + 1)
    usable = (m >= config.min_len) & (valid >= config.min_len)
    arg = np.argmax(np.where(usable, stat, -np.inf), axis=-1)
    alarm = (np.where(usable, stat, -np.inf) > h).any(axis=-1) & (arg < M - 1)
    if ref_z is not None:
        alarm &= np.take_along_axis(ref_z, arg[..., None], axis=-1)[..., 0] < config.ref_z
    return alarm, arg, usable


def decide(sc: Scan, thresholds, config: SequentialConfig, n_cols: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Alarm, onset column, onset statistic and maximal stat/threshold ratio from a Scan."""
    alarm, arg, usable = alarm_rule(sc.stat, sc.valid, thresholds, config, sc.ref_z)
    h = np.asarray(thresholds, float)[..., : sc.stat.shape[1]]  # (M,) or one row per series (n, M)
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = np.where(usable, sc.stat / h, -np.inf)
    onset = np.where(alarm, n_cols - 1 - arg, -1)
    stat = np.take_along_axis(sc.stat, arg[:, None], axis=1)[:, 0]
    return alarm, onset, stat, ratio.max(axis=1)


def detect_hourly(values: np.ndarray, hour_of_day: np.ndarray, *, bad: int = +1, thresholds=DEFAULT_THRESHOLDS,
                  config: SequentialConfig = SequentialConfig(), model: nm.NoiseModel | None = None) -> Alarms:
    """Sequential test of the newest hours of every row of ``values`` (n, T) (NaN = missing).

    values: trailing hourly window up to the current hour (its last column). hour_of_day: (T,).
    bad: +1 when a rise is a regression, -1 when a fall is. model: a noise model fitted earlier
    (e.g. once a day, ``fit(values_history)``); None fits it here on the hours before the zone.
    """
    values = np.atleast_2d(np.asarray(values, float))
    x = nm.to_log(values, bad)
    M = config.max_window
    if model is None:
        model = fit(x[:, :-M], np.asarray(hour_of_day)[:-M], config)
    sc = scan(x, hour_of_day, model, config)
    alarm, onset, stat, ratio = decide(sc, thresholds, config, values.shape[1])
    arg = np.where(alarm, values.shape[1] - 1 - onset, 0)
    lb = np.take_along_axis(sc.level, arg[:, None], axis=1)[:, 0]
    # magnitude: t M-estimate of the de-cycled post-change hours against the pre-change level (the
    # GLR's maximising d is on a coarse grid)
    zone = x[:, -M:] - sc.cycle - lb[:, None]
    post = np.where(np.arange(M)[None, :] >= (M - 1 - arg)[:, None], zone, np.nan)
    d = np.where(alarm, nm.t_location(post, np.where(model.ok, model.sigma, 1.0) * 0.7, model.nu), 0.0)
    lb = lb + sc.cycle[:, -1]
    before = np.exp(bad * lb)
    after = np.exp(bad * (lb + d))
    mag = np.where(alarm, 100.0 * (after - before) / before, 0.0)
    return Alarms(alarm & model.ok, np.where(model.ok, onset, -1), stat, ratio, before, after, mag, model.ok)


def fit(x_hist: np.ndarray, hour_of_day: np.ndarray, config: SequentialConfig = SequentialConfig(), min_hours: int = 72) -> nm.NoiseModel:
    """The noise model from (at most) the last ``config.fit_hours`` hours of ``x_hist`` (log units);
    rows with fewer than ``min_hours`` valid hours get no usable model."""
    x_hist = np.atleast_2d(x_hist)[:, -config.fit_hours :]
    return nm.fit_noise_model(x_hist, np.asarray(hour_of_day)[-x_hist.shape[1] :], nu=config.nu, refine=config.refine,
                              min_hours=min_hours)
