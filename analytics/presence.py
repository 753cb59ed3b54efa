"""A kernel that vanished: a run of hours its job ran without it, longer than its own history
makes plausible. Pure (numpy, no I/O, no clock).

The ``kernel_presence`` series is 1 in the hours a kernel launched, 0 in the hours its job ran
without it (NaN: the job did not run). Change points on such 0/1 data compare medians, so a kernel
that runs in 80 % of hours at random reads 1 -> 0 whenever a few absent hours cluster. Here the
kernel's history before the current absent run sets what an absent run may be:

- under independent hours with absence rate q, a given hour starts a run of r or more absent
  hours with probability at most q^r; the run is an alarm once q^r <= ``alpha`` (a fixed
  false-alarm rate per series-hour), with q estimated as (absent + 1) / (hours + 2) (Laplace's
  rule: an always-present kernel over a week gives q = 1/167, and 3 hours suffice from 45 hours of
  history on; Jeffreys' (absent + 0.5) / (hours + 1) lets 3 hours suffice from 23 hours but raised
  2.3x the false alarms on kernels absent at random: benchmarks/presence_prior.py, docs/detection.md);
- and the run must be longer than every absent run in that history (absence in bursts, such as an
  evaluation kernel every few hours, is its own habit, not a vanishing);
- and at least ``min_size`` hours long (as every other series' step).

The history starts at the kernel's first presence in the window (the hours before a new kernel
existed are not its absence).
"""

from __future__ import annotations

import math

import numpy as np

#: False alarms per series-hour the absent-run rule allows (0.24 per 1,000 series-days).
DEFAULT_ALPHA = 1e-5


def needed_run(history: np.ndarray, *, alpha: float = DEFAULT_ALPHA, min_size: int = 3, prior: float = 1.0) -> int:
    """Shortest absent run (hours) that is a vanished kernel, given its 0/1 ``history`` (valid
    hours only, oldest first, starting at its first presence). prior: pseudo-count of each outcome
    in the estimate of q (1: Laplace's rule, 0.5: Jeffreys')."""
    geometric = math.ceil(math.log(alpha) / math.log(absence_rate(history, prior)))
    return max(min_size, geometric, _longest_zero_run(history) + 1)


def _longest_zero_run(x: np.ndarray) -> int:
    if x.size == 0 or np.all(x != 0):
        return 0
    z = np.concatenate(([0], (x == 0).astype(np.int8), [0]))
    d = np.diff(z)
    return int((np.flatnonzero(d == -1) - np.flatnonzero(d == 1)).max())


def absence_rate(history: np.ndarray, prior: float = 1.0) -> float:
    """q: the share of absent hours in ``history`` with ``prior`` pseudo-hours of each outcome."""
    if prior <= 0:
        raise ValueError(f"prior must be > 0 (0 gives an always-present kernel q = 0), got {prior}")
    n = int(history.size)
    return (n - np.count_nonzero(history) + prior) / (n + 2 * prior)


def absent_now(values: np.ndarray) -> np.ndarray:
    """Rows of a (series x hours) presence matrix whose newest valid hour is 0 (vectorised screen:
    only those can hold a vanished kernel)."""
    values = np.asarray(values, dtype=float)
    if values.size == 0:
        return np.zeros(values.shape[0], dtype=bool)
    valid = ~np.isnan(values)
    last = np.where(valid.any(axis=1), values.shape[1] - 1 - np.argmax(valid[:, ::-1], axis=1), -1)
    rows = np.arange(values.shape[0])
    return (last >= 0) & (values[rows, np.maximum(last, 0)] == 0)


def vanished(values, *, alpha: float = DEFAULT_ALPHA, min_size: int = 3, min_points: int = 24, prior: float = 1.0):
    """The vanished-kernel step of one presence series, or None.

    Returns ``(index, before, p_value)``: index of the first absent hour of the current run (into
    ``values``), the kernel's presence rate over its history, and q^r (the run's probability under
    that history). None when the newest valid hour is not absent, the history has fewer than
    ``min_points`` hours, or the run is not yet longer than ``needed_run``.
    """
    values = np.asarray(values, dtype=float)
    idx = np.flatnonzero(~np.isnan(values))
    x = values[idx]
    present = np.flatnonzero(x != 0)
    if present.size == 0 or x[-1] != 0:
        return None
    start = int(present[-1]) + 1  # first hour of the current absent run (valid positions)
    history = x[int(present[0]) : start]
    if history.size < min_points:
        return None
    run = x.size - start
    if run < needed_run(history, alpha=alpha, min_size=min_size, prior=prior):
        return None
    return int(idx[start]), float(np.count_nonzero(history) / history.size), float(absence_rate(history, prior) ** run)
