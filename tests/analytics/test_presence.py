"""The absent-run rule of ``kernel_presence`` (analytics.presence), pure: a kernel that ran every
hour and stops is found on its third absent hour with the exact onset; a kernel that runs in some
hours only (at random or in bursts) is not a vanished kernel."""

from __future__ import annotations

import numpy as np
import pytest

from analytics import presence
from analytics.lifecycle import DetectConfig, find_absence


def test_an_always_present_kernel_that_stops_is_found_on_its_third_absent_hour():
    x = np.ones(165)
    assert presence.vanished(np.r_[x, 0, 0]) is None  # two hours: not yet
    hit = presence.vanished(np.r_[x, 0, 0, 0])
    assert hit is not None
    index, before, p = hit
    assert index == 165 and before == 1.0 and p == pytest.approx((1 / 167) ** 3)
    (st,) = find_absence(np.r_[x, 0, 0, 0])
    assert (st.index, st.before, st.after, st.magnitude_pct) == (165, 1.0, 0.0, -100.0)


def test_hours_the_job_did_not_run_are_neither_presence_nor_absence():
    x = np.r_[np.ones(100), np.nan, np.nan, 0, np.nan, 0, 0]
    index, _, _ = presence.vanished(x)
    assert index == 102  # the first hour the job ran without the kernel
    assert presence.vanished(np.r_[np.ones(100), 0, 0, np.nan]) is None  # the newest valid hour decides


def test_a_kernel_present_in_80_percent_of_random_hours_needs_a_run_it_never_shows():
    rng = np.random.default_rng(7)
    alarms = 0
    for _ in range(400):
        x = (rng.random(168) < 0.8).astype(float)
        alarms += any(presence.vanished(x[: t + 1]) is not None for t in range(144, 168))
    # q ~ 0.2: a run of 8 absent hours (0.2^8 = 2.6e-6 per hour) -> about 0.02 of 400 x 24 runs
    assert alarms == 0
    assert presence.needed_run(np.r_[np.ones(130), np.zeros(35)][rng.permutation(165)]) >= 7


def test_absence_in_bursts_is_the_kernel_s_habit():
    x = np.tile(np.r_[np.ones(9), np.zeros(3)], 14)  # an evaluation kernel off 3 hours in 12
    assert presence.needed_run(x) >= 4
    assert presence.vanished(np.r_[x, np.ones(9), 0, 0, 0]) is None
    assert presence.vanished(np.r_[x, np.ones(9), np.zeros(40)]) is not None  # far longer than ever: gone


def test_a_new_kernel_s_hours_before_it_existed_are_not_its_absence():
    x = np.r_[np.zeros(100), np.ones(60), 0, 0, 0]
    index, before, _ = presence.vanished(x)
    assert index == 160 and before == 1.0
    assert presence.vanished(np.r_[np.zeros(100), np.ones(10), 0, 0, 0, 0]) is None  # < min_points of history


def test_the_screen_picks_the_rows_whose_newest_valid_hour_is_absent():
    m = np.array([[1, 1, 0], [1, 0, np.nan], [1, 1, 1], [np.nan, np.nan, np.nan]], dtype=float)
    assert presence.absent_now(m).tolist() == [True, True, False, False]
    assert presence.absent_now(np.empty((0, 5))).tolist() == []


def test_alpha_sets_the_run_length():
    hist = np.r_[np.ones(80), np.zeros(20)]
    rng = np.random.default_rng(1)
    hist = hist[rng.permutation(100)]
    loose, default = presence.needed_run(hist, alpha=1e-2), presence.needed_run(hist)
    assert loose < default
    x = np.r_[np.ones(5), hist, np.ones(5), np.zeros(loose)]  # the bracketing hours keep hist's runs
    assert find_absence(x, config=DetectConfig(presence_alpha=1e-2)) and not find_absence(x)


def test_the_prior_of_the_absence_rate_sets_a_young_kernels_run():
    # Laplace's rule (the default) needs 4 absent hours after 32 present ones, 3 from 45 on;
    # Jeffreys' (prior 0.5) 3 from the first 24 (benchmarks/presence_prior.py: 2.3x the false alarms)
    assert [presence.needed_run(np.ones(n)) for n in (32, 44, 45)] == [4, 4, 3]
    assert presence.needed_run(np.ones(32), prior=0.5) == 3
    assert presence.vanished(np.r_[np.ones(32), 0, 0, 0]) is None
    assert presence.vanished(np.r_[np.ones(32), 0, 0, 0], prior=0.5)[0] == 32
    with pytest.raises(ValueError):
        presence.needed_run(np.ones(32), prior=0.0)  # q = 0 for an always-present kernel: no run length
