"""A labelled corpus of hourly series for the detection benchmark (benchmarks/detection.py).

Each series is a kernel's hourly mean duration: ``base * exp(noise)`` where the log-noise has the
parts real GPU series show (and the fleet simulator uses):

- AR(1) hourly noise (coefficient ``phi``) with Student-t innovations (``df`` 4: heavy tails),
  scaled so its stationary standard deviation is the series' ``sigma`` (log-uniform in
  ``sigma_range``, i.e. 0.3 %..3 % per hour);
- a daily load cycle of amplitude ``U(0, diurnal_max) * sigma``;
- slow drift: a random walk whose hourly step is ``U(0, drift_max)`` (relative);
- outlier hours: with probability ``outlier_p`` an hour is multiplied by ``1 + U(8 %, 45 %)``.

Labelled changes: a fraction of series gets one step *up* (a regression) at a known onset, of
size ``k * sigma`` with k from ``k_grid``, kept within 1..20 % by redrawing sigma; another fraction
of the regression-free series gets a step *down* (an improvement, which is not a regression).
``sigma`` is the per-hour noise the step is measured in: the stationary standard deviation of the
AR part, before tails, cycle, drift and outliers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass
class Corpus:
    """values: (n, hours); onset: index of the first changed hour, -1 for none; k, step_pct, sigma:
    per series (k and step_pct 0 where there is no step); up: True for a regression step, False
    for an improvement step or none."""

    values: np.ndarray
    onset: np.ndarray
    k: np.ndarray
    step_pct: np.ndarray
    sigma: np.ndarray
    up: np.ndarray
    #: The known parts, for the oracle rows of the benchmark (log units): level + daily cycle +
    #: drift of each hour, the outlier hours' log1p(spike) (0 elsewhere), and the AR/tail law.
    mean_log: np.ndarray | None = None
    outlier_log: np.ndarray | None = None
    phi: float = 0.35
    df: float = 4.0
    #: The noise model's remaining parts, for the model-known oracle row: the daily cycle as Fourier
    #: coefficients (n, 4; analytics.noise_model's cos/sin layout, hour of day = column index mod 24)
    #: and each series' random-walk step (log units per hour).
    season: np.ndarray | None = None
    drift_q: np.ndarray | None = None

    @property
    def regression(self) -> np.ndarray:
        return (self.onset >= 0) & self.up


def make_corpus(
    n: int,
    *,
    hours: int = 168,
    seed: int = 0,
    k_grid: tuple[float, ...] = (0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 10.0),
    step_fraction: float = 0.5,
    improvement_fraction: float = 0.1,
    onset_range: tuple[int, int] = (96, 156),
    sigma_range: tuple[float, float] = (0.003, 0.03),
    step_range_pct: tuple[float, float] = (1.0, 20.0),
    phi: float = 0.35,
    df: float = 4.0,
    diurnal_max: float = 1.0,
    drift_max: float = 0.0005,
    outlier_p: float = 0.01,
) -> Corpus:
    """Draw ``n`` labelled series of ``hours`` hours (deterministic for a seed)."""
    if n < 1 or hours < onset_range[1] + 1 or not 0 <= step_fraction <= 1:
        raise ValueError(f"bad corpus parameters: n={n}, hours={hours}, onset_range={onset_range}, step_fraction={step_fraction}")
    rng = np.random.default_rng(seed)
    lo, hi = math.log(sigma_range[0]), math.log(sigma_range[1])
    sigma = np.exp(rng.uniform(lo, hi, n))
    has_step = rng.random(n) < step_fraction
    improve = ~has_step & (rng.random(n) < improvement_fraction / max(1e-9, 1 - step_fraction))
    k = np.where(has_step | improve, rng.choice(np.asarray(k_grid, float), n), 0.0)
    # keep steps within the 1..20 % by redrawing sigma where k*sigma falls outside
    for _ in range(100):
        pct = k * sigma * 100
        bad = (k > 0) & ((pct < step_range_pct[0]) | (pct > step_range_pct[1]))
        if not bad.any():
            break
        s_lo = np.maximum(lo, np.log(step_range_pct[0] / 100 / np.maximum(k[bad], 1e-9)))
        s_hi = np.minimum(hi, np.log(step_range_pct[1] / 100 / np.maximum(k[bad], 1e-9)))
        sigma[bad] = np.exp(rng.uniform(s_lo, np.maximum(s_lo, s_hi)))
    step_pct = k * sigma * 100
    onset = np.where(has_step | improve, rng.integers(onset_range[0], onset_range[1] + 1, n), -1)

    t = rng.standard_t(df, (n, hours)) * math.sqrt((df - 2) / df)  # unit variance
    eps = t * (sigma * math.sqrt(1 - phi**2))[:, None]
    ar = np.empty((n, hours))
    ar[:, 0] = rng.standard_normal(n) * sigma
    for h in range(1, hours):
        ar[:, h] = phi * ar[:, h - 1] + eps[:, h]
    hour = np.arange(hours)
    amp = rng.uniform(0, diurnal_max, n) * sigma  # the draws in this order: the corpus of a seed never changes
    phase = rng.uniform(0, 24, n)
    diurnal = amp[:, None] * np.sin(2 * np.pi * (hour[None, :] + phase[:, None]) / 24)
    walk = rng.normal(0, 1, (n, hours))
    q = rng.uniform(0, drift_max, n)
    drift = np.cumsum(walk * q[:, None], axis=1)
    spikes = (rng.random((n, hours)) < outlier_p) * rng.uniform(0.08, 0.45, (n, hours))
    step = np.zeros((n, hours))
    sign = np.where(has_step, 1.0, -1.0)
    for i in np.flatnonzero(onset >= 0):
        step[i, onset[i]:] = math.log1p(sign[i] * step_pct[i] / 100)
    base = np.exp(rng.uniform(math.log(1e4), math.log(1e6), n))
    values = base[:, None] * np.exp(ar + diurnal + drift + step) * (1 + spikes)
    theta = 2 * np.pi * phase / 24  # amp sin(w + theta) = amp sin(theta) cos(w) + amp cos(theta) sin(w)
    season = np.stack([amp * np.sin(theta), amp * np.cos(theta), np.zeros(n), np.zeros(n)], axis=1)
    return Corpus(values, onset, k, step_pct, sigma, has_step, mean_log=np.log(base)[:, None] + diurnal + drift,
                  outlier_log=np.log1p(spikes), phi=phi, df=df, season=season, drift_q=q)


def kernel_rows(values: np.ndarray, start):
    """The corpus as raw ``kernels`` rows (a pyarrow Table), one kernel per series on its own job
    (``job00``, ``job01``, ...: series i is job i), one 1-h window per hour with 100 launches whose
    mean is the series' value; ``start`` is the UTC datetime of column 0. Loaded with
    ``INSERT INTO kernels BY NAME`` and ``refresh_hourly``, it is a warehouse whose
    ``kernel_mean_ns`` series are the corpus (benchmarks and tests of the hourly path)."""
    import datetime as dt

    import pyarrow as pa

    n, hours = values.shape
    m, width = n * hours, len(str(max(n - 1, 0)))
    hour_ts = np.array([(start + dt.timedelta(hours=h)).replace(tzinfo=None) for h in range(hours)], dtype="datetime64[us]")
    return pa.table({
        "window_start": pa.array(np.tile(hour_ts, n), pa.timestamp("us", tz="UTC")),
        "window_s": np.full(m, 3600, np.int32), "host": ["h"] * m, "gpu_uuid": ["GPU-0"] * m,
        "job": np.repeat([f"job{i:0{width}d}" for i in range(n)], hours).tolist(), "kernel": ["k"] * m,
        "kernel_id": ["kid"] * m, "launches": np.full(m, 100, np.int64),
        "total_ns": np.rint(values.reshape(-1) * 100).astype(np.int64), "sampling_duty": np.ones(m)})
