"""Young series (less than a week of fit history) on the sequential path (analytics.online): which
rows are young, the thresholds they are held to, a sustained step found at its exact onset and an
outlier hour that never alarms; through detect_regressions on DuckDB, a step in a 4-day-old
series found by the third hourly run. docs/detection.md ("Young series")."""

import numpy as np
import pytest

from analytics import noise_model as nm
from analytics import online, young
from benchmarks import detection_rows
from tests.analytics.test_sequential import series

T = 14 * 24 + 72  # columns of the matrix the hourly path loads (fewer than lookback_hours is fine)
HOD = 11  # hour of day of the last column: the day's fit ends at the zone of its hour-0 run


def family(seed=5):
    """Rows 0-1 mature (full history), 2-4 young (120 h), 5 too short (30 h)."""
    v = series(n=6, hours=T, seed=seed)
    v[2:5, : T - 120] = np.nan
    v[5, : T - 30] = np.nan
    return v


def test_rows_with_a_day_or_more_of_fit_history_are_young_and_tested():
    v = family()
    a = online.fit_anchor(T, HOD)
    have = (~np.isnan(v[:, a - 336 : a])).sum(axis=1)
    assert have.tolist() == [336, 336, 97, 97, 97, 7]  # the fit ends 23 h before the newest hour
    rows, model = online.fit_day(v, HOD, bad=+1, young_history=24)
    assert rows.tolist() == [0, 1, 2, 3, 4]
    assert young.is_young(model, online.MIN_HISTORY_HOURS).tolist() == [False, False, True, True, True]
    h = young.row_thresholds(model, (1.0,) * 12, (2.0,) * 12, online.MIN_HISTORY_HOURS)
    assert h[:, 5].tolist() == [1.0, 1.0, 2.0, 2.0, 2.0]
    old_rows, _ = online.fit_day(v, HOD, bad=+1, young_history=None)  # as before: young rows on the change points
    assert old_rows.tolist() == [0, 1]


def test_young_rows_take_the_mature_rows_outlier_law_and_drift():
    v = family()
    rows, model = online.fit_day(v, HOD, bad=+1, young_history=24)
    mature, mmodel = online.fit_day(v, HOD, bad=+1, young_history=None)
    np.testing.assert_array_equal(model.phi[:2], mmodel.phi)  # the mature fit is unchanged by young rows
    np.testing.assert_array_equal(model.scale[:2], mmodel.scale)
    assert model.outliers is mmodel.outliers or np.array_equal(model.outliers.dens_pos, mmodel.outliers.dens_pos)
    np.testing.assert_array_equal(model.drift[2:], np.median(mmodel.drift))


def test_a_sustained_step_in_a_young_row_alarms_at_its_onset_and_an_outlier_hour_does_not():
    v = family(seed=7)
    v[2, -3:] *= 1.06  # a 6 % step three hours before the newest hour (12 stationary sigmas)
    v[3, -2] *= 1.45  # one outlier hour
    v[4, -1] *= 1.45
    res = online.sequential_alarms(v, HOD, bad=+1)
    assert res.rows.tolist() == [0, 1, 2, 3, 4]
    alarm = dict(zip(res.rows.tolist(), res.alarms.alarm.tolist()))
    assert alarm == {0: False, 1: False, 2: True, 3: False, 4: False}
    assert res.alarms.onset[res.rows.tolist().index(2)] == T - 3
    assert young.YOUNG_THRESHOLDS[2] > 0 and np.all(np.asarray(young.YOUNG_THRESHOLDS[2:]) > 0)
    # the young rows' thresholds are the ones that gate them: out of reach, the step waits; the mature rows' do not
    closed = online.sequential_alarms(v, HOD, bad=+1, young_thresholds=(np.inf,) * 12)
    assert not closed.alarms.alarm.any()
    opened = online.sequential_alarms(v, HOD, bad=+1, thresholds=(np.inf,) * 12)
    assert opened.alarms.alarm.tolist() == res.alarms.alarm.tolist()


def test_detect_regressions_finds_a_step_in_a_four_day_old_series_by_the_third_run():
    # a new fleet's family of 43 rows (a simulated fleet's kernel families hold 43-56); a family of 4
    # takes its largest row's drift estimate (young.upper_median) and found this step only later
    # (docs/detection.md, "Young series": the cost of the bound in small families)
    start = 96  # the first hourly run: four days of history
    v = series(n=43, hours=start + 12, seed=11, sigma=0.01)
    v[0, start + 2 :] *= 1.06  # onset at column start + 2: 6 stationary sigmas
    rows, model = online.fit_day(v[:, : start + 1], start % 24, bad=+1, young_history=young.YOUNG_HISTORY_HOURS)
    assert rows.tolist() == list(range(43)) and young.is_young(model, online.MIN_HISTORY_HOURS).all()  # young at the first run
    alerts = detection_rows.old_detect_regressions(v, start)
    assert alerts[0] and alerts[0][0][0] == start + 2 and alerts[0][0][1] <= start + 4
    assert alerts[1:] == [[]] * 42


def test_an_event_opened_on_the_change_points_is_carried_and_resolved_by_the_young_path(tmp_path):
    from analytics import detect
    from tests.analytics.test_detect import START, H, warehouse_with

    con = warehouse_with(tmp_path, step=(40, 51, 10.0))  # 60 h: day 3 (hour 48 on) is young-row territory
    status = {h: [r.status for r in detect.detect_regressions(con, START + h * H)] for h in range(38, 60)}
    assert status[42] == ["new"] and all(status[h] == ["ongoing"] for h in range(43, 52))
    assert all(status[h] == [] for h in range(56, 60))
    (row,) = con.execute("SELECT status, onset, ended_at FROM regressions").fetchall()
    # the end is the first normal hour, 52, found without a change point (lifecycle.back_since)
    assert row[0] == "resolved" and row[1] == START + 40 * H and row[2] == START + 52 * H
    tested = con.execute("SELECT count(*) FROM noise_models WHERE series = 'kernel_mean_ns' AND tested "
                         "AND day = DATE '2026-11-03'").fetchone()[0]
    assert tested > 0  # the third day's model holds the young rows


@pytest.mark.parametrize("row, back", [(2, 60), (2, 120), (0, 100)])  # a young row (120: its first hour); a mature row
def test_an_absurd_hour_in_the_fit_history_does_not_mute_a_row(row, back):
    # before noise_model.day_clip the hour moved the first-pass 48-h moving mean for 48 hours and
    # inflated the young row's scale ~15x (GLR 0.5 instead of ~19) and the mature row's by 30 %
    v = family(seed=9)
    clean = online.sequential_alarms(v, HOD, bad=+1)
    v[row, T - back] = 1e12
    v[row, -3:] *= 1.06
    res = online.sequential_alarms(v, HOD, bad=+1)
    i = res.rows.tolist().index(row)
    assert res.alarms.alarm[i]
    assert res.model.scale[i] == pytest.approx(clean.model.scale[clean.rows.tolist().index(row)], rel=0.1)


def test_upper_median_is_the_order_statistic_of_the_medians_upper_confidence_bound():
    v = np.arange(1.0, 44.0)[::-1]  # 43 values, unsorted
    assert young.upper_median(v, z=0.0) == 22.0  # rank ceil(21.5): the median
    assert young.upper_median(v) == 28.0  # rank ceil(21.5 + 1.96 * sqrt(43) / 2) = ceil(27.93)
    assert young.upper_median(np.r_[v, np.nan, np.inf]) == 28.0  # only finite values count
    assert young.upper_median(np.array([3.0, -1.0])) == 3.0  # fewer values than the rank: the largest
    assert np.isnan(young.upper_median(np.array([np.nan])))
    assert young.upper_median(np.arange(7.0), z=1.96) == 6.0 and young.upper_median(np.arange(8.0), z=1.96) == 6.0
    with pytest.raises(ValueError):
        young.upper_median(v, z=-1.0)


def test_a_small_new_family_takes_its_largest_rows_drift():
    # the cost of the bound (docs/detection.md, "A new fleet's drift from one or two days"): with 7
    # rows or fewer the bound is the largest row's estimate
    v = series(n=4, hours=97, seed=11, sigma=0.01)
    rows, model = online.fit_day(v, 0, bad=+1, young_history=young.YOUNG_HISTORY_HOURS)
    w = online.fit_window(v.shape[1], 0)
    q2 = young.row_drift_q2(nm.to_log(v[rows, w], +1), online.hour_of_day(v.shape[1], 0)[w], model)
    assert rows.size == 4 and model.drift == pytest.approx(np.full(4, np.sqrt(q2.max())))
    assert np.sqrt(q2.max()) > 1.5 * np.sqrt(np.median(q2))  # here 0.29 %/h against the median's 0.16


def test_a_new_fleets_young_drift_is_the_upper_bound_not_a_median_at_zero(tmp_path):
    """A clean simulated fleet (seed 13004, 8 GPUs) whose kernel_time_share family's young rows have
    a median lag drift of 0 on the third day while the shares wander ~2 %: model 2026-12-06.1 read a
    +2.5 % share as a regression at the third day's first run; docs/detection.md ("Young series")."""
    import datetime as dt

    import simulator
    from analytics import detect, store
    from analytics.store import series as sr

    start = dt.datetime(2026, 11, 1, tzinfo=dt.timezone.utc)
    simulator.simulate_fleet(tmp_path / "shards", gpus=8, hours=96, seed=13004, start=start, injections=[])
    con = store.connect(tmp_path / "w.duckdb")
    store.ingest_shards(tmp_path / "shards", con)
    as_of = start + dt.timedelta(hours=48)
    spec = sr.SPEC_BY_NAME["kernel_time_share"]
    x = sr.load_matrix(con, spec, as_of, online.lookback_hours()).values
    rows, model = online.fit_day(x, 0, bad=spec.bad, young_history=young.YOUNG_HISTORY_HOURS)
    w = online.fit_window(x.shape[1], 0)  # the fit history, as fit_day takes it
    q2 = young.row_drift_q2(nm.to_log(x[rows, w], spec.bad), online.hour_of_day(x.shape[1], 0)[w], model)
    assert young.is_young(model, online.MIN_HISTORY_HOURS).all() and rows.size > 30
    assert nm.pooled_drift(q2) == 0.0  # the median: no drift
    assert model.drift[0] > 0.001  # the upper bound: 0.1 %/h or more
    assert detect.detect_regressions(con, as_of) == []
