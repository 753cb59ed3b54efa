"""Per-series noise model of hourly series, estimated robustly from each series' own history.

Pure numpy, vectorised over many series at once (rows of a matrix), no I/O, no clock.

A series is modelled on the log scale (relative changes; see ``to_log``) as

    x[t] = level[t] + season(hour_of_day[t]) + u[t],    u[t] = phi * u[t-1] + e[t],

with a slowly moving level, a daily cycle of ``harmonics`` Fourier terms, AR(1) noise ``u`` and
innovations ``e`` from a Student-t law with ``nu`` degrees of freedom and scale ``scale``
(heavy tails: hourly GPU series have outlier hours). ``fit_noise_model`` estimates, per row:

1. the level: a centred moving mean of two periods of the winsorised series (it cancels the daily
   cycle exactly and follows slow drift); the first pass that sets the winsorising bounds averages
   hours clipped to their 24-h block's median +- 8 robust SDs (``day_clip``), so an absurd hour
   moves it by at most that bound;
2. the daily cycle: least squares of the de-levelled series on ``harmonics`` sine/cosine pairs,
   after winsorising at 4 robust scales (a fitted profile of 2 harmonics has 4 parameters where a
   per-phase median has 24, so two weeks give it a small error);
3. ``phi``: the robust lag-1 autocorrelation of Gnanadesikan & Kettenring (Biometrics 1972)
   computed with a robust scale, as in Ma & Genton (J. Time Series Analysis 2000,
   doi:10.1111/1467-9892.00186), so an outlier hour does not pull it towards 0;
4. ``scale``: the Student-t maximum-likelihood scale of the prewhitened innovations
   (EM iterations, Lange, Little & Taylor, JASA 1989, doi:10.1080/01621459.1989.10478852),
   started from the MAD. Under t(4) innovations it is the efficient scale; its influence function
   is bounded, so outlier hours add at most a constant each;
5. with ``refine`` > 0, phi and the scale refitted together by t maximum likelihood (iteratively
   reweighted least squares) with outlier hours treated as additive (the previous hour clipped at
   3 stationary sigmas, innovations beyond 8 scales left to the outlier law, a trimmed EM made
   consistent by ``_trim_factor``), and phi corrected for the part of the AR noise the moving-mean
   level removes. The first pass overstates the scale by ~7 % on the benchmark corpus; the refit
   by ~1 % (docs/detection.md);
6. ``drift``: the hourly step of a random-walk level, pooled over the rows (``drift_q2``,
   ``pooled_drift``), which the sequential statistic allows in its no-step hypothesis.

The scale used in ``scale_robust`` for winsorising and for the autocorrelation is the MAD (only
ranks matter there). ``NoiseModel.ok`` is False for rows with fewer than ``min_hours`` valid hours
or a degenerate scale; such rows are not tested.
"""

from __future__ import annotations

import functools
import math
import warnings
from dataclasses import dataclass

import numpy as np

from analytics.outliers import OutlierLaw, fit_outlier_law

MAD_TO_SD = 1.4826


@dataclass(frozen=True)
class NoiseModel:
    """Fitted noise model of ``n`` series (arrays of length n unless said otherwise).

    phi: AR(1) coefficient (clipped to [0, 0.9]). scale: t scale of the innovations (log units).
    nu: degrees of freedom of the innovations' t law (one value for all rows).
    season: (n, 2 * harmonics) Fourier coefficients of the daily cycle (cos, sin pairs).
    ok: rows with enough history for a test. hours: valid hours each row was fitted on.
    drift: per row, the standard deviation of the hourly step of a random-walk level (log units
    per hour; ``drift_q2``, ``pooled_drift``), or None (no drift term: the oracle rows of the benchmark).
    """

    phi: np.ndarray
    scale: np.ndarray
    nu: float
    season: np.ndarray
    ok: np.ndarray
    hours: np.ndarray
    period: int = 24
    outliers: OutlierLaw | None = None
    drift: np.ndarray | None = None

    def cycle(self, hour_of_day: np.ndarray) -> np.ndarray:
        """The daily cycle (n, len(hour_of_day)) at the given hours of day."""
        return self.season @ _basis(np.asarray(hour_of_day, float), self.season.shape[1] // 2, self.period)

    @property
    def sigma(self) -> np.ndarray:
        """Stationary standard deviation of the AR(1) noise (t innovations with nu > 2)."""
        return stationary_sigma(self.scale, self.phi, self.nu)


def stationary_sigma(scale: np.ndarray, phi: np.ndarray, nu: float) -> np.ndarray:
    """Stationary standard deviation of AR(1) noise with t(nu) innovations of scale ``scale``."""
    var_e = scale**2 * (nu / (nu - 2.0) if nu > 2 else 1.0)
    return np.sqrt(var_e / np.maximum(1e-12, 1.0 - phi**2))


def to_log(values: np.ndarray, bad: int = +1) -> np.ndarray:
    """Log of positive values, sign-flipped when a fall is bad (so a regression is always a rise).

    Non-positive values become NaN (a series whose level is 0 has no relative change)."""
    values = np.asarray(values, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        x = np.where(values > 0, np.log(np.where(values > 0, values, 1.0)), np.nan)
    return x if bad > 0 else -x


def _basis(hour_of_day: np.ndarray, harmonics: int, period: int) -> np.ndarray:
    """(2 * harmonics, T) cosine/sine rows of the daily cycle."""
    w = 2.0 * np.pi * hour_of_day / period
    rows = []
    for k in range(1, harmonics + 1):
        rows += [np.cos(k * w), np.sin(k * w)]
    return np.array(rows).reshape(2 * harmonics, -1)


def nanmedian(x: np.ndarray, axis: int = -1) -> np.ndarray:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.nanmedian(x, axis=axis) if np.isnan(x).any() else np.median(x, axis=axis)


def mad_scale(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """1.4826 x median absolute deviation from the median, along ``axis`` (NaN-aware)."""
    med = np.expand_dims(nanmedian(x, axis), axis)
    return MAD_TO_SD * nanmedian(np.abs(x - med), axis)


def t_scale(e: np.ndarray, nu: float, *, start: np.ndarray | None = None, iterations: int = 12,
            trim: float | None = None) -> np.ndarray:
    """Maximum-likelihood scale of centred Student-t(nu) data along the last axis (EM; NaN-aware).

    s^2 <- mean(w e^2), w = (nu + 1) / (nu + e^2 / s^2). Started from the MAD (times the t(nu)
    ratio of scale to MAD), a dozen iterations reach 1e-4 relative precision."""
    e = np.asarray(e, float)
    valid = ~np.isnan(e)
    e0 = np.where(valid, e, 0.0)
    cnt = np.maximum(valid.sum(axis=-1), 1)
    s2 = (start if start is not None else mad_scale(e)) ** 2
    s2 = np.where(np.isfinite(s2) & (s2 > 0), s2, np.nanmean(e0**2, axis=-1) + 1e-300)
    for _ in range(iterations):
        w = (nu + 1.0) / (nu + e0**2 / s2[..., None])
        if trim is None:
            s2 = np.maximum((w * e0**2 * valid).sum(axis=-1) / cnt, 1e-300)
        else:  # the t component only: hours beyond ``trim`` scales are outlier hours (fit_outlier_law)
            keep = valid & (e0**2 <= trim**2 * s2[..., None])
            s2 = np.maximum((w * e0**2 * keep).sum(axis=-1) / np.maximum(keep.sum(axis=-1), 1) / _trim_factor(nu, trim), 1e-300)
    return np.sqrt(s2)


@functools.lru_cache(maxsize=64)
def _trim_factor(nu: float, k: float) -> float:
    """E[w z^2 ; |z| <= k] / P(|z| <= k) for z ~ t(nu): the EM fixed point of a scale fitted on the
    hours within k scales (1 without trimming), so the trimmed scale is consistent. A pure function of
    two constants (nu and the trim), cached: the numerical integral took ~0.1 s and every EM iteration
    of every day's fit asked for it again (9.1 s of 75 s under cProfile, 32 hourly runs of an 8-GPU fleet)."""
    from scipy import integrate
    from scipy.stats import t as student_t

    f = student_t(nu).pdf
    num = integrate.quad(lambda z: (nu + 1) * z * z / (nu + z * z) * f(z), -k, k)[0]
    return num / (student_t(nu).cdf(k) - student_t(nu).cdf(-k))


def t_location(x: np.ndarray, scale: np.ndarray, nu: float, *, iterations: int = 6) -> np.ndarray:
    """Student-t(nu) M-estimate of location along the last axis with a known scale (NaN-aware),
    started from the median: one outlier hour moves it by a bounded amount."""
    x = np.asarray(x, float)
    valid = ~np.isnan(x)
    mu = nanmedian(x)
    s2 = np.maximum(scale, 1e-300)[..., None] ** 2
    x0 = np.where(valid, x, 0.0)
    for _ in range(iterations):
        r = np.where(valid, x0 - mu[..., None], 0.0)
        w = valid * (nu + 1.0) / (nu + r**2 / s2)
        mu = (w * x0).sum(axis=-1) / np.maximum(w.sum(axis=-1), 1e-300)
    return mu


def moving_mean(x: np.ndarray, width: int) -> np.ndarray:
    """Centred moving mean of ``width`` points along the last axis, NaN-aware, truncated at the
    ends (every point gets the mean of the valid points of its window)."""
    valid = ~np.isnan(x)
    x0 = np.where(valid, x, 0.0)
    c = np.concatenate([np.zeros(x.shape[:-1] + (1,)), np.cumsum(x0, axis=-1)], axis=-1)
    k = np.concatenate([np.zeros(x.shape[:-1] + (1,)), np.cumsum(valid, axis=-1)], axis=-1)
    T = x.shape[-1]
    lo = np.clip(np.arange(T) - width // 2, 0, T)
    hi = np.clip(np.arange(T) + (width - width // 2), 0, T)
    with np.errstate(invalid="ignore", divide="ignore"):
        return (c[..., hi] - c[..., lo]) / (k[..., hi] - k[..., lo])


def day_clip(x: np.ndarray, period: int, k: float, *, min_valid: int = 6) -> np.ndarray:
    """``x`` (n, T) with each value clipped to the median +- ``k`` robust SDs (1.4826 MAD) of its
    block of ``period`` hours (blocks counted back from the last column); a block with fewer than
    ``min_valid`` valid hours (a young row's first hours) takes its row's median and scale instead,
    since one or two values bound themselves. Without it one absurd hour (x1e9) would move a plain
    48-h moving mean for 48 hours, the majority of a short history, and break its MAD."""
    n, T = x.shape
    pad = -T % period
    days = np.pad(x, ((0, 0), (pad, 0)), constant_values=np.nan).reshape(n, -1, period)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        sparse = (~np.isnan(days)).sum(axis=-1) < min_valid
        med = np.where(sparse, nanmedian(x)[:, None], nanmedian(days))
        sd = np.where(sparse, mad_scale(x)[:, None], mad_scale(days))
    return np.clip(x, np.repeat(med - k * sd, period, axis=1)[:, pad:], np.repeat(med + k * sd, period, axis=1)[:, pad:])


def robust_lag1(u: np.ndarray) -> np.ndarray:
    """Gnanadesikan-Kettenring lag-1 autocorrelation with the MAD: (S(a+b)^2 - S(a-b)^2) /
    (S(a+b)^2 + S(a-b)^2), a = u[t], b = u[t-1] (each standardised by its own MAD)."""
    a, b = u[..., 1:], u[..., :-1]
    sa, sb = mad_scale(a), mad_scale(b)
    a, b = a / sa[..., None], b / sb[..., None]
    p, m = mad_scale(a + b) ** 2, mad_scale(a - b) ** 2
    with np.errstate(invalid="ignore", divide="ignore"):
        return (p - m) / (p + m)


def fit_noise_model(x: np.ndarray, hour_of_day: np.ndarray, *, nu: float = 4.0, harmonics: int = 2, period: int = 24,
                    min_hours: int = 72, clip: float = 4.0, outliers: bool = True, refine: int = 0) -> NoiseModel:
    """Fit the noise model to the history ``x`` (n, T) in log units (``to_log``), NaN = missing.

    hour_of_day: (T,) hour of day of each column (0..23; the daily cycle's phase).
    """
    x = np.atleast_2d(np.asarray(x, float))
    n, T = x.shape
    hours = (~np.isnan(x)).sum(axis=1)
    # winsorise against a two-period moving median proxy: the moving mean of a first winsorised pass,
    # itself taken over hours clipped to their 24-h block (``day_clip``)
    level = moving_mean(day_clip(x, period, 2 * clip), 2 * period)
    r = x - level
    s = mad_scale(r)
    r = np.clip(r, -clip * s[:, None], clip * s[:, None])
    level = moving_mean(level + r, 2 * period)
    r = x - level
    s = mad_scale(r)
    rw = np.clip(r, -clip * s[:, None], clip * s[:, None])
    # daily cycle: least squares on the Fourier basis (valid hours only)
    B = _basis(np.asarray(hour_of_day, float), harmonics, period)  # (p, T)
    valid = ~np.isnan(rw)
    rw0 = np.where(valid, rw, 0.0)
    if harmonics and T >= 2 * period:
        G = np.einsum("pt,qt,nt->npq", B, B, valid.astype(float))  # per-row Gram matrix
        G += 1e-9 * np.eye(B.shape[0])[None]
        season = np.linalg.solve(G, (rw0 @ B.T)[..., None])[..., 0]
    else:
        season = np.zeros((n, 2 * harmonics))
    u = r - season @ B
    phi = np.clip(np.nan_to_num(robust_lag1(np.clip(u, -clip * s[:, None], clip * s[:, None]))), 0.0, 0.9)
    e = u[:, 1:] - phi[:, None] * u[:, :-1]
    scale = t_scale(e, nu, start=mad_scale(e) * _t_mad_ratio(nu))
    if refine:
        phi, scale, e = _refine_ar(u, phi, scale, nu, refine)
        # the moving-mean level of width W removes part of the AR noise: the residual's lag-1
        # correlation is (phi - c) / (1 - c), c = (1 + phi) / (1 - phi) / W; invert it
        pr = phi.copy()
        for _ in range(6):
            c = (1 + phi) / (1 - phi) / (2 * period)
            phi = np.clip(pr * (1 - c) + c, 0.0, 0.9)
    ok = (hours >= min_hours) & np.isfinite(scale) & (scale > 0) & np.isfinite(phi)
    law = fit_outlier_law(e[ok], scale[ok]) if outliers else None
    sig = stationary_sigma(scale, phi, nu)
    q = np.full(n, pooled_drift(drift_q2((x - season @ B)[ok], sig[ok], nu, period)))
    return NoiseModel(phi=phi, scale=np.where(ok, scale, np.nan), nu=float(nu), season=season, ok=ok, hours=hours,
                      period=period, outliers=law, drift=q)


def drift_q2(y: np.ndarray, sigma: np.ndarray, nu: float, period: int = 24) -> np.ndarray:
    """Per row, an estimate of q^2, the variance of the hourly step of a random-walk level, from
    the daily levels of the de-cycled series ``y`` (series minus its daily cycle).

    The level of each whole period (day) is a t M-estimate (scale from the stationary ``sigma``),
    so an outlier hour moves it little. Levels L days apart differ by the walk and by the noise of
    two block means; for L >= 1 the noise part and the walk's within-block part do not depend on
    L, and the walk adds B q^2 per day of lag (B = period hours):

        V(L) = c + B L q^2,   so   q^2 = (V(2) - V(1)) / B,

    V(L) the robust variance (1.4826 x median |change|)^2 of the L-day changes, not centred (a
    trend is drift too). No noise model enters (the AR noise cancels exactly), and a step in the
    history is one or two large changes among the ~13 one-day and ~12 two-day changes of two
    weeks, which moves the medians little (longer lags would straddle it in more changes). Noisy
    per row, hence pooled (``pooled_drift``). NaN with fewer than 4 whole periods."""
    y = np.atleast_2d(np.asarray(y, float))
    n, T = y.shape
    D, B = T // period, period
    if D < 4:
        return np.full(n, np.nan)
    blocks = y[:, T - D * B :].reshape(n, D, B)
    s = np.asarray(sigma, float) * math.sqrt(max(nu - 2, 1e-9) / nu)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        level = t_location(blocks, np.repeat(s[:, None], D, axis=1), nu)

        def v(lag):
            return (MAD_TO_SD * nanmedian(np.abs(level[:, lag:] - level[:, :-lag]))) ** 2

        return (v(2) - v(1)) / B


def pooled_drift(q2: np.ndarray, pool=np.median) -> float:
    """The family's random-walk step scale: sqrt of ``pool`` (the median) of the rows' finite
    ``drift_q2`` estimates, at least 0 (0 without any estimate: no drift term). Pooled because one
    row's estimate is too noisy to use alone; the median, so rows with a step or a trend in their
    history do not set it (a new fleet's young rows pool by ``young.upper_median``)."""
    q2 = np.asarray(q2, float)
    q2 = q2[np.isfinite(q2)]
    return float(np.sqrt(max(float(pool(q2)), 0.0))) if q2.size else 0.0


def _refine_ar(u: np.ndarray, phi: np.ndarray, scale: np.ndarray, nu: float, iterations: int, *, clip: float = 3.0,
               trim: float | None = 8.0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Student-t maximum likelihood of phi and the scale (iteratively reweighted least squares),
    with outlier hours treated as additive: the previous hour enters the prediction clipped at
    ``clip`` stationary sigmas, and innovations beyond ``trim`` scales are left to the outlier law."""
    a, b = u[:, 1:], u[:, :-1]
    ok = ~(np.isnan(a) | np.isnan(b))
    a0, b0 = np.where(ok, a, 0.0), np.where(ok, b, 0.0)
    for _ in range(iterations):
        sig = stationary_sigma(scale, phi, nu)
        bc = np.clip(b0, -clip * sig[:, None], clip * sig[:, None])
        e = a0 - phi[:, None] * bc
        w = ok * (nu + 1.0) / (nu + e**2 / scale[:, None] ** 2)
        if trim is not None:
            w = w * (e**2 <= trim**2 * scale[:, None] ** 2)
        with np.errstate(invalid="ignore", divide="ignore"):
            phi = np.clip(np.nan_to_num((w * a0 * bc).sum(axis=1) / (w * bc * bc).sum(axis=1)), 0.0, 0.9)
        e = np.where(ok, a0 - phi[:, None] * bc, np.nan)
        scale = t_scale(e, nu, start=scale, iterations=4, trim=trim)
    return phi, scale, e


def _t_mad_ratio(nu: float) -> float:
    """t scale / (1.4826 MAD) of a t(nu) law: 1 / (1.4826 x the 0.75 quantile of t(nu))."""
    from scipy.stats import t as student_t

    return 1.0 / (MAD_TO_SD * float(student_t.ppf(0.75, nu))) if math.isfinite(nu) else 1.0
