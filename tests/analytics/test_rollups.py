"""The hourly rollup tables match the raw rows after ingest, late shards, duplicates and retention,
and a warehouse from before the rollups (views of the same names) is migrated."""

from __future__ import annotations

import datetime as dt
import shutil

import duckdb

from analytics import store
from analytics.store.maintenance import RetentionPolicy, apply_retention
from analytics.store.schema import ROLLUPS
from simulator import simulate_fleet

START = dt.datetime(2026, 11, 1, tzinfo=dt.timezone.utc)


def _from_raw(con, name: str) -> list:
    select = ROLLUPS[name][2].format(where="")
    return sorted(con.execute(f"SELECT * FROM ({select})").fetchall(), key=repr)


def _stored(con, name: str) -> list:
    return sorted(con.execute(f"SELECT * FROM {name}").fetchall(), key=repr)


def _assert_consistent(con) -> None:
    for name in ROLLUPS:
        stored = _stored(con, name)
        assert stored, name
        assert stored == _from_raw(con, name), name


def test_rollups_follow_ingest_late_shards_and_retention(tmp_path):
    full = tmp_path / "full"
    simulate_fleet(full, gpus=8, hours=6, seed=21, start=START, jobs=4)
    part = tmp_path / "part"
    shutil.copytree(full, part)
    late = sorted((part / "kernels").rglob("hour=03/*.parquet"))
    assert late
    for p in late:
        p.unlink()
    con = store.connect(tmp_path / "w.duckdb")
    for h in range(6):
        store.ingest_shards(part, con, hour=START + dt.timedelta(hours=h))
    _assert_consistent(con)
    # the late shards arrive (plus every shard again: duplicates change nothing)
    store.ingest_shards(full, con)
    _assert_consistent(con)
    n = con.execute("SELECT count(*) FROM kernel_hourly").fetchone()[0]
    # retention of everything before hour 2 (by a "now" 2 hours after the start plus the retention)
    apply_retention(full, con, tmp_path / "reports", policy=RetentionPolicy(shard_days=0, warehouse_days=1, report_days=0),
                    now=START + dt.timedelta(days=1, hours=2, minutes=30))
    _assert_consistent(con)
    assert con.execute("SELECT min(hour) FROM kernel_hourly").fetchone()[0] == START + dt.timedelta(hours=2)
    assert con.execute("SELECT count(*) FROM kernel_hourly").fetchone()[0] < n
    con.close()


def test_a_warehouse_with_hourly_views_is_migrated(tmp_path):
    simulate_fleet(tmp_path / "s", gpus=4, hours=2, seed=2, start=START, injections=[])
    con = store.connect(tmp_path / "w.duckdb")
    store.ingest_shards(tmp_path / "s", con)
    for name, (_, _, select) in ROLLUPS.items():  # the pre-rollup schema: views of these names
        con.execute(f"DROP TABLE {name}")
        con.execute(f"CREATE VIEW {name} AS {select.format(where='')}")
    con.close()
    con = store.connect(tmp_path / "w.duckdb")
    kinds = dict(con.execute("SELECT table_name, table_type FROM information_schema.tables").fetchall())
    assert all(kinds[name] == "BASE TABLE" for name in ROLLUPS)
    _assert_consistent(con)
    con.close()
    ro = duckdb.connect(str(tmp_path / "w.duckdb"), read_only=True)
    assert ro.execute("SELECT count(*) FROM device_hourly").fetchone()[0] == 2 * 4
    ro.close()
