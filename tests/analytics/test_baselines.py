"""Baselines: EWMA and robust trailing statistics stored per series and hour, incremental and idempotent."""

import numpy as np
import pytest

from analytics import baselines, detect
from tests.analytics.test_detect import H, START, warehouse_with


def rows(con, series="kernel_mean_ns", kernel="gemm"):
    return con.execute(
        "SELECT as_of, value, ewma, ewma_prev, deviation, ewma_severity, n, median, mad, p10, p50, p90 FROM baselines "
        "WHERE series = ? AND kernel = ? ORDER BY as_of", [series, kernel]).fetchall()


def gemm_values(con, upto):
    return [v for (v,) in con.execute(
        "SELECT mean_ns FROM kernel_hourly WHERE kernel = 'gemm' AND hour <= ? ORDER BY hour", [upto]).fetchall()]


def test_robust_stats_and_ewma_match_a_direct_computation(tmp_path):
    con = warehouse_with(tmp_path, step=(45, None, 10.0))
    as_of = START + 50 * H
    baselines.update_baselines(con, as_of, window_hours=24)
    (row,) = rows(con)
    values = np.array(gemm_values(con, as_of))
    window = values[-24:]
    assert row[0] == as_of and row[1] == pytest.approx(values[-1]) and row[6] == 24
    assert row[7] == pytest.approx(np.median(window)) and row[8] == pytest.approx(np.median(np.abs(window - np.median(window))))
    assert (row[9], row[10], row[11]) == pytest.approx(tuple(np.percentile(window, [10, 50, 90])))
    alpha = baselines.DEFAULT_ALPHA
    ew = window[0]
    for v in window[1:-1]:
        ew = alpha * v + (1 - alpha) * ew
    assert row[3] == pytest.approx(ew)  # previous hour's EWMA, from the window (no stored row yet)
    assert row[2] == pytest.approx(alpha * values[-1] + (1 - alpha) * ew)
    assert row[4] == pytest.approx(abs(values[-1] - ew) / ew)


def test_incremental_update_folds_the_stored_row_and_rerun_is_idempotent(tmp_path):
    con = warehouse_with(tmp_path)
    for h in range(20, 30):
        baselines.update_baselines(con, START + h * H, alpha=0.5)
    before = con.execute("SELECT * FROM baselines ORDER BY series_key, as_of").fetchall()
    baselines.update_baselines(con, START + 29 * H, alpha=0.5)
    assert con.execute("SELECT * FROM baselines ORDER BY series_key, as_of").fetchall() == before
    r = rows(con)
    assert len(r) == 10
    values = gemm_values(con, START + 29 * H)
    for prev, cur, v in zip(r, r[1:], values[21:]):
        assert cur[3] == pytest.approx(prev[2]) and cur[2] == pytest.approx(0.5 * v + 0.5 * prev[2])


def test_ewma_severity_flags_a_large_jump_in_its_first_hour(tmp_path):
    con = warehouse_with(tmp_path, step=(45, None, 60.0))
    baselines.update_baselines(con, START + 44 * H)
    baselines.update_baselines(con, START + 45 * H)
    sev = dict(con.execute("SELECT as_of, ewma_severity FROM baselines WHERE series = 'kernel_mean_ns' AND kernel = 'gemm'").fetchall())
    assert sev == {START + 44 * H: None, START + 45 * H: "high"}


def test_every_watched_series_gets_rows_and_bad_arguments_fail(tmp_path):
    con = warehouse_with(tmp_path)
    baselines.update_baselines(con, START + 30 * H)
    got = {s for (s,) in con.execute("SELECT DISTINCT series FROM baselines").fetchall()}
    assert {"kernel_mean_ns", "kernel_id_mean_ns", "kernel_time_share", "kernel_launch_share", "job_gpu_busy_s",
            "gpu_sm_clock_mhz"} <= got
    with pytest.raises(ValueError, match="alpha"):
        baselines.update_baselines(con, START, alpha=0)
    with pytest.raises(ValueError, match="window_hours"):
        baselines.update_baselines(con, START, window_hours=0)


def test_ewma_helper_skips_missing_hours():
    out = detect.ewma(np.array([[1.0, np.nan, 3.0]]), 0.5)
    assert out.tolist() == [[1.0, 1.0, 2.0]]
