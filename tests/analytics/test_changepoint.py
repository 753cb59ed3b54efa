"""detect_change_points: exact indices on tiny series, edge cases, robustness."""

import math

import numpy as np
import pytest

from analytics.changepoint import ChangePointError, detect_change_points

NOISE = [0.1, -0.2, 0.15, -0.05, 0.0, 0.2, -0.1, -0.15, 0.05, 0.1]  # fixed small noise, ~1 % of 10


def idx(values, **kw):
    return [c.index for c in detect_change_points(values, **kw)]


def test_clean_step_in_twenty_points():
    cps = detect_change_points([1.0] * 10 + [2.0] * 10)
    assert [c.index for c in cps] == [10]
    c = cps[0]
    assert (c.mean_before, c.mean_after, c.magnitude_pct, c.p_value) == (1.0, 2.0, 100.0, 0.0)


def test_noisy_step_up_and_down():
    base = [10 + e for e in NOISE * 3]
    values = base[:10] + [v + 3 for v in base[10:20]] + base[20:30]
    cps = detect_change_points(values)
    assert [c.index for c in cps] == [10, 20]
    assert cps[0].magnitude_pct > 25 and cps[1].magnitude_pct < -20
    assert all(c.p_value < 1e-5 for c in cps)


def test_step_at_the_end_reported_once_min_size_points_exist():
    base = [10 + e for e in NOISE * 3]
    assert idx(base[:28] + [13.0, 13.1]) == []  # two points of the new level: not yet
    assert idx(base[:27] + [13.0, 13.1, 12.9]) == [27]


def test_single_outlier_hour_is_not_a_change():
    values = [10 + e for e in NOISE * 3]
    values[12] = 100.0
    assert idx(values) == []
    values[-1] = 1000.0  # an outlier as the newest point neither
    assert idx(values) == []


def test_min_magnitude_filters_small_significant_steps():
    values = [1000.0] * 15 + [1010.0] * 15  # 1 %: significant, below the 2 % default
    assert idx(values) == []
    assert idx(values, min_magnitude_pct=0.5) == [15]


def test_min_size_controls_shortest_segment():
    values = [1.0] * 20 + [5.0] * 2 + [1.0] * 20
    assert idx(values, hampel_k=None) == []  # a 2-point blip is shorter than min_size=3
    assert idx(values, min_size=2, hampel_k=None) == [20, 22]


def test_constant_short_and_empty_series_give_no_change():
    assert idx([5.0] * 50) == []
    assert idx([]) == []
    assert idx([1.0, 2.0, 3.0, 4.0, 5.0]) == []  # shorter than two segments


def test_nans_are_skipped_and_indices_refer_to_the_input():
    values = [1.0] * 10 + [2.0] * 10
    values[3] = float("nan")
    values[11] = None
    assert idx(values) == [10]
    assert idx([math.nan] * 30) == []


def test_huge_and_tiny_values_do_not_overflow():
    assert idx([1e300] * 10 + [2e300] * 10) == [10]
    assert idx([1e-300] * 10 + [2e-300] * 10) == [10]
    cps = detect_change_points([1.7e308] * 10 + [-1.7e308] * 10)
    assert [c.index for c in cps] == [10] and cps[0].magnitude_pct < 0


def test_bad_input_raises_clear_errors():
    with pytest.raises(ChangePointError, match="infinite"):
        detect_change_points([1.0, math.inf] * 10)
    with pytest.raises(ChangePointError, match="1-D"):
        detect_change_points([[1.0, 2.0], [3.0, 4.0]])
    with pytest.raises(ChangePointError, match="numbers"):
        detect_change_points(["a", "b"])
    with pytest.raises(ValueError, match="bad options"):
        detect_change_points([1.0] * 20, min_size=0)
    with pytest.raises(ValueError, match="period"):
        detect_change_points([1.0] * 20, period=1)


def test_daily_cycle_is_not_a_change_with_period():
    h = np.arange(24 * 7)
    rng = np.random.default_rng(3)
    values = 100 + 15 * np.sin(2 * np.pi * h / 24) + rng.normal(0, 1, h.size)
    assert idx(values, period=24) == []
    values[150:] += 5
    assert idx(values, period=24) == [150]


def test_drift_widens_the_test():
    values = [100.0 + 0.3 * e for e in NOISE * 4] + [102.5 + 0.3 * e for e in NOISE[:8]]
    assert idx(values) == [40]
    assert idx(values, drift=0.005) == []  # a 2.5 % move is within a 0.5 %/h random walk's reach


def test_result_does_not_depend_on_units():
    rng = np.random.default_rng(0)
    values = np.r_[rng.normal(100, 1, 60), rng.normal(106, 1, 30)]
    a = detect_change_points(values)
    b = detect_change_points(values * 1e-6)
    assert [c.index for c in a] == [c.index for c in b] == [60]
    assert a[0].p_value == pytest.approx(b[0].p_value) and a[0].magnitude_pct == pytest.approx(b[0].magnitude_pct)


def test_heavy_tailed_noise_stays_quiet():
    rng = np.random.default_rng(11)
    false = sum(bool(idx(100 + rng.standard_t(3, 168))) for _ in range(200))
    assert false <= 2


def test_a_step_needs_half_a_day_of_reference_before_it_in_the_regression_layer():
    # analytics.lifecycle.find_steps: the same +10 % step 8 h into a series' life is not a
    # regression (fewer than min_reference_hours = 12 valid hours before it); 14 h in, it is
    from analytics.lifecycle import DetectConfig, find_steps

    rng = np.random.default_rng(5)
    cfg = DetectConfig()
    for onset, expected in ((8, []), (14, [14])):
        values = 100.0 * np.exp(rng.normal(0, 0.005, 48))
        values[onset:] *= 1.10
        assert [s.index for s in find_steps(values, bad=1, period=None, config=cfg)] == expected


def test_a_seasonal_series_shorter_than_three_periods_is_tested_on_its_raw_levels():
    # issue 15: find_steps gave a seasonal series (job_busy_share, period 24) no steps at all before
    # 72 valid hours, so idle gaps on a 48-hour fleet were never found. Now it is tested without the
    # daily profile, with the same significance and day-of-reference rule; its clean twin stays quiet.
    from analytics.lifecycle import DetectConfig, find_steps

    rng = np.random.default_rng(15)
    cfg = DetectConfig(drift=0.0015)
    hours = np.arange(48)
    for _ in range(20):
        clean = 0.9 * (1 + 0.01 * np.sin(2 * np.pi * hours / 24)) * np.exp(rng.normal(0, 0.01, 48))
        assert find_steps(clean, bad=-1, period=24, config=cfg) == []
        idle = clean.copy()
        idle[32:] *= 0.87  # busy share falls 13 % at hour 32, wall time unchanged
        assert [s.index for s in find_steps(idle, bad=-1, period=24, config=cfg)] == [32]
        assert find_steps(idle[:20], bad=-1, period=24, config=cfg) == []  # under min_points: still nothing
