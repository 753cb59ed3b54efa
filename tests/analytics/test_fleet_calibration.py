"""Thresholds set on the fleet's own history (analytics.fleet_calibration, ``cudawatch calibrate``):
the warehouse replay is the hourly path the benchmark calibrates with, series with events are left
out, a small history is refused, and stored thresholds are what the next hourly run uses."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pytest
from typer.testing import CliRunner

from analytics import fleet_calibration as fc
from analytics import online
from analytics import sequential as sq
from analytics.detect import DetectConfig, detect_regressions
from analytics.store import connect
from analytics.store import thresholds as stored
from analytics.store.schema import refresh_hourly
from app.cli import app
from simulator.corpus import kernel_rows, make_corpus

T0 = dt.datetime(2026, 11, 1, tzinfo=dt.timezone.utc)
L = online.lookback_hours(sq.SequentialConfig())
DAYS = 2
HOURS = L + 24 * DAYS
KERNELS = DetectConfig(series=("kernel_mean_ns",))


def _warehouse(path, n: int = 30, seed: int = 77, step_last_hours: int = 0):
    """Clean corpus series loaded as one kernel per job (one 1-h window per hour, 100 launches);
    ``step_last_hours``: job00 15 % slower in its last hours."""
    values = make_corpus(n, hours=HOURS, seed=seed, step_fraction=0.0, improvement_fraction=0.0, onset_range=(L, HOURS - 1)).values
    if step_last_hours:
        values[0, -step_last_hours:] *= 1.15
    con = connect(path)
    hour_ts = [T0 + dt.timedelta(hours=h) for h in range(HOURS)]
    con.register("tbl", kernel_rows(values, T0))
    con.execute("INSERT INTO kernels BY NAME SELECT * FROM tbl")
    con.unregister("tbl")
    refresh_hourly(con, "kernels", hour_ts[0], hour_ts[-1])
    return con, values, hour_ts[-1]


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    path = tmp_path_factory.mktemp("fleet") / "w.duckdb"
    con, values, last = _warehouse(path)
    yield con, values, last, path
    con.close()


def test_the_warehouse_replay_is_the_benchmarks_replay(fleet):
    con, values, last, _ = fleet
    c = fc.calibrate_warehouse(con, last, days=DAYS, target=5.0, config=KERNELS, min_series_days=10)
    direct = fc.replay_stats(np.rint(values * 100) / 100, L, sq.SequentialConfig())
    h, p, rate = fc.calibrate_stats(*direct, 5.0)
    assert c.series == 30 and c.series_days == pytest.approx(30 * DAYS)
    assert c.thresholds == pytest.approx(tuple(h)) and c.tail_p == pytest.approx(p) and c.rate == pytest.approx(rate)
    assert c.thresholds[0] == c.thresholds[1] == np.inf and np.all(np.isfinite(c.thresholds[2:]))
    assert c.method == online.model_version(KERNELS.seq, KERNELS.seq_min_history) and c.as_of == last


def test_series_with_an_event_are_left_out(fleet, tmp_path):
    con, _, last, _ = fleet
    con.execute("CREATE TEMP TABLE regressions AS SELECT 'e1' AS event_id, 'kernel_mean_ns' AS series, "
                "series_key, ?::TIMESTAMPTZ AS onset FROM (SELECT ? AS series_key)",
                [last - dt.timedelta(hours=30), _key_of_first_job(con, last)])
    try:
        c = fc.calibrate_warehouse(con, last, days=DAYS, target=5.0, config=KERNELS, min_series_days=10)
        assert c.series == 29
    finally:
        con.execute("DROP TABLE temp.regressions")


def _key_of_first_job(con, last) -> str:
    from analytics.store import series as sr

    mat = sr.load_matrix(con, sr.SPEC_BY_NAME["kernel_mean_ns"], last, 24)
    return sr.series_key("kernel_mean_ns", mat.keys[0])


def test_a_small_history_is_refused_with_its_numbers(fleet):
    con, _, last, _ = fleet
    with pytest.raises(ValueError, match=r"60 clean series-days .* at least 10,000"):
        fc.calibrate_warehouse(con, last, days=DAYS, config=KERNELS)


def test_stored_thresholds_are_what_the_next_hourly_run_uses(tmp_path):
    """A 15 % step over the last 8 hours of one series: the shipped thresholds report it; a stored
    calibration of this statistic with unreachable thresholds silences it (a row of another
    statistic is ignored)."""
    method = online.model_version(KERNELS.seq, KERNELS.seq_min_history)
    found = {}
    for name, rows in (("shipped", []),
                       ("stored", [("another statistic", (0.0,) * 12), (method, (np.inf, np.inf) + (1e9,) * 10)])):
        con, _, last = _warehouse(tmp_path / f"{name}.duckdb", n=12, seed=78, step_last_hours=8)
        for m, h in rows:
            stored.save(con, fc.Calibration(m, last, 1.0, 1.0, 12, 24.0, 1e-6, h))
        assert stored.current(con, method) == (None if not rows else (np.inf, np.inf) + (1e9,) * 10)
        found[name] = [r.job for r in detect_regressions(con, last, KERNELS)]
        con.close()
    assert found == {"shipped": ["job00"], "stored": []}


def test_cli_calibrate_prints_and_stores(fleet):
    con, _, last, path = fleet
    con.execute("CHECKPOINT")
    con.close()
    try:
        runner = CliRunner()
        small = runner.invoke(app, ["calibrate", "--db", str(path), "--days", str(DAYS)])
        assert small.exit_code == 2 and "at least 10,000" in small.output
        res = runner.invoke(app, ["calibrate", "--db", str(path), "--days", str(DAYS), "--min-series-days", "10",
                                  "--target", "5"])
        assert res.exit_code == 0, res.output
        # every sequential family of the kernels (per-launch means by configuration and by kernel, shares)
        assert "120 series, 240 clean series-days" in res.output and "stored for method" in res.output
    finally:
        con2 = connect(path)
        rows = con2.execute("SELECT target, series FROM detector_thresholds").fetchall()
        con2.close()
    assert rows == [(5.0, 120)]
