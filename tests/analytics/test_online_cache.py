"""The day's noise model is fitted once and kept in the warehouse (analytics.store.noise_models):
later runs of the day read it, give what a fresh fit gives, and re-running an hour changes nothing."""

import duckdb
import numpy as np

from analytics import online
from analytics.store import noise_models as cache
from tests.analytics.test_sequential import HIST, series

DAY = np.datetime64("2026-11-20").astype(object)


def store_and_load(con, values, keys, hod=0, version="v"):
    rows, model, store = online.day_model(values, keys, hod, None, bad=+1)
    cache.save_day(con, "kernel_mean_ns", DAY, version, *store, nu=model.nu)
    return rows, model, cache.load_day(con, "kernel_mean_ns", DAY, version)


def test_cached_model_round_trips_and_gives_the_fresh_fits_alarms():
    con = duckdb.connect()
    cache.ensure_tables(con)
    v = series(n=5, hours=HIST + 24, seed=31, cycle=0.02)
    v[3, : HIST - 5] = np.nan  # too little history, even for a young row: left to the change points
    v[:, -5:] *= 1.05
    keys = [f"k{i}" for i in range(5)]
    rows, model, cached = store_and_load(con, v[:, :-7], keys)  # the day's first run (hour 0)
    assert rows.tolist() == [0, 1, 2, 4] and cached[0] == {"k0": 0, "k1": 1, "k2": 2, "k3": None, "k4": 3}
    # a later run of the day (hour 7), rows in another order: the cache maps them by key
    perm = [4, 2, 0, 3, 1]
    r2, m2, store = online.day_model(v[perm], [keys[i] for i in perm], 7, cached, bad=+1)
    assert store is None and r2.tolist() == [0, 1, 2, 4]
    for f in ("phi", "scale", "season", "hours"):
        np.testing.assert_array_equal(getattr(m2, f), getattr(model, f)[[3, 2, 0, 1]])
    np.testing.assert_array_equal(m2.outliers.dens_pos, model.outliers.dens_pos)
    fresh = online.sequential_alarms(v[perm], 7, bad=+1)
    viacache = online.sequential_alarms(v[perm], 7, bad=+1, model=m2, rows=r2)
    assert viacache.alarms.alarm.sum() == 4  # the step of the 4 tested series
    np.testing.assert_array_equal(fresh.rows, viacache.rows)
    np.testing.assert_allclose(fresh.alarms.stat, viacache.alarms.stat, rtol=1e-12)
    np.testing.assert_array_equal(fresh.alarms.onset, viacache.alarms.onset)


def test_a_series_new_since_the_first_run_is_fitted_with_the_days_outlier_law_and_stored():
    con = duckdb.connect()
    cache.ensure_tables(con)
    v = series(n=4, hours=HIST + 24, seed=32)
    rows, model, cached = store_and_load(con, v[:3, :-7], ["a", "b", "c"])
    r2, m2, store = online.day_model(v[:, :-7], ["a", "b", "c", "d"], 0, cached, bad=+1)
    assert r2.tolist() == [0, 1, 2, 3] and store[0] == ["a", "b", "c", "d"] and store[1].all()
    assert m2.outliers is cached[1].outliers or np.array_equal(m2.outliers.dens_pos, cached[1].outliers.dens_pos)
    cache.save_day(con, "kernel_mean_ns", DAY, "v", *store, nu=m2.nu)
    again = cache.load_day(con, "kernel_mean_ns", DAY, "v")
    # a later run of the day (hour 3: three more hours in the matrix, the same fit data)
    r3, m3, store3 = online.day_model(v[:, :-4], ["a", "b", "c", "d"], 3, again, bad=+1)
    assert store3 is None and r3.tolist() == [0, 1, 2, 3]
    np.testing.assert_array_equal(m3.scale, m2.scale)


def test_late_rows_in_a_cached_series_fit_history_refit_it_and_update_the_cache():
    """Reviewer's finding: the cache was keyed by series only, so hours arriving late for the fit
    history kept the first run's model (or its 'too little history') all day."""
    con = duckdb.connect()
    cache.ensure_tables(con)
    v = series(n=3, hours=HIST + 24, seed=33)
    early = v[:, :-7].copy()
    early[2, : HIST - 5] = np.nan  # its history is late: too little at the day's first run, even for a young row
    rows, model, cached = store_and_load(con, early, ["a", "b", "c"])
    assert rows.tolist() == [0, 1] and cached[0]["c"] is None
    r2, m2, store = online.day_model(v[:, :-4], ["a", "b", "c"], 3, cached, bad=+1)  # hour 3, the late hours arrived
    assert r2.tolist() == [0, 1, 2] and store is not None and store[1].tolist() == [True, True, True]
    np.testing.assert_array_equal(m2.scale[:2], model.scale)  # a and b: still the cached fit
    fresh_rows, fresh = online.fit_day(v[:, :-4], 3, bad=+1, outliers=model.outliers)
    np.testing.assert_allclose(m2.scale[2], fresh.scale[2], rtol=1e-12)  # c: fitted on its whole history
    cache.save_day(con, "kernel_mean_ns", DAY, "v", *store, nu=m2.nu)
    again = cache.load_day(con, "kernel_mean_ns", DAY, "v")
    assert online.day_model(v[:, :-3], ["a", "b", "c"], 4, again, bad=+1)[2] is None  # current now: nothing to store


def test_detect_regressions_stores_the_days_model_once_and_reruns_change_nothing(tmp_path):
    from analytics import detect
    from tests.analytics.test_detect import START as T0, H as HR, warehouse_with

    con = warehouse_with(tmp_path, hours=216, step=(212, None, 6.0))
    assert detect.detect_regressions(con, T0 + 213 * HR) == []
    n_rows = con.execute("SELECT count(*), count(DISTINCT day) FROM noise_models WHERE series = 'kernel_mean_ns'").fetchone()
    assert n_rows[0] > 0 and n_rows[1] == 1
    snapshot = con.execute("SELECT * FROM noise_models ORDER BY ALL").fetchall()
    regs = detect.detect_regressions(con, T0 + 214 * HR)
    assert [(r.kernel, r.onset) for r in regs] == [("gemm", T0 + 212 * HR)]
    assert detect.detect_regressions(con, T0 + 214 * HR) == regs  # re-run: same answer
    assert con.execute("SELECT * FROM noise_models ORDER BY ALL").fetchall() == snapshot  # read, not refitted
