"""Small pieces of the DAG steps: the writer lock, hour handling, partitions config, XCom round trip."""

from __future__ import annotations

import datetime as dt
import subprocess
import sys
import time

import pytest

from app import steps
from analytics.store.locking import LockTimeout, writer_lock
from analytics.store import Store
from app.hour import run_hour
from cudawatch.config import ConfigError

UTC = dt.timezone.utc

HOLD = r"""
import sys, time
from analytics.store.locking import writer_lock
with writer_lock(sys.argv[1]):
    print("held", flush=True)
    time.sleep(float(sys.argv[2]))
"""


def test_writer_lock_excludes_another_process_and_is_released(tmp_path):
    db = tmp_path / "w.duckdb"
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(db), "3"], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(LockTimeout, match="locked by another writer"):
            with writer_lock(db, timeout_s=0.3, poll_s=0.05):
                pass
        t = time.monotonic()
        with writer_lock(db, timeout_s=10, poll_s=0.05):  # waits for the holder to let go
            assert time.monotonic() - t > 1.5
        assert holder.wait(timeout=10) == 0
    finally:
        holder.kill()
        holder.wait()


def test_writer_lock_is_freed_when_the_holder_dies(tmp_path):
    db = tmp_path / "w.duckdb"
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(db), "60"], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    holder.kill()
    holder.wait()
    with writer_lock(db, timeout_s=2):
        pass


def test_hour_of_accepts_pendulum_iso_and_naive():
    import pendulum

    want = dt.datetime(2026, 11, 1, 5, tzinfo=UTC)
    assert steps.hour_of(pendulum.datetime(2026, 11, 1, 5, 20, tz="UTC")) == want
    assert steps.hour_of(pendulum.datetime(2026, 11, 1, 6, 20, tz="Europe/Berlin")) == want
    assert steps.hour_of("2026-11-01T05:59:59Z") == want
    assert steps.hour_of(dt.datetime(2026, 11, 1, 5, 1)) == want
    assert type(steps.hour_of(pendulum.datetime(2026, 11, 1, 5, tz="UTC"))) is dt.datetime


def test_partitions_from_config(monkeypatch, tmp_path):
    monkeypatch.setenv("CUDAWATCH_SHARDS", str(tmp_path))
    monkeypatch.delenv("CUDAWATCH_PARTITIONS", raising=False)
    assert steps.hourly_partitions() == [{"name": "default", "shards": str(tmp_path)}]
    monkeypatch.setenv("CUDAWATCH_PARTITIONS", "east=/a, west=/b")
    assert steps.hourly_partitions() == [{"name": "east", "shards": "/a"}, {"name": "west", "shards": "/b"}]
    for bad in ("east", "east=/a,east=/b", "=/a"):
        monkeypatch.setenv("CUDAWATCH_PARTITIONS", bad)
        with pytest.raises(ConfigError, match="cudawatch_partitions"):
            steps.hourly_partitions()
    monkeypatch.setenv("CUDAWATCH_WAIT_GRACE_MIN", "soon")
    with pytest.raises(ConfigError, match="CUDAWATCH_WAIT_GRACE_MIN"):
        steps.Settings.resolve()


def test_sensor_waits_until_grace_then_proceeds(monkeypatch, tmp_path):
    """Expected hosts come from the previous hours; a missing one holds the sensor until the grace."""
    from simulator import simulate_fleet
    from cudawatch import shards as sh

    start = dt.datetime(2026, 11, 1, tzinfo=UTC)
    simulate_fleet(tmp_path, gpus=16, hours=3, seed=4, start=start, injections=[])
    part = {"name": "default", "shards": str(tmp_path)}
    hour = start + dt.timedelta(hours=2)
    monkeypatch.setenv("CUDAWATCH_WAIT_GRACE_MIN", "20")
    done, info = steps.check_arrival(part, hour, now=hour + dt.timedelta(hours=1))
    assert done and info["missing"] == []
    sh.list_shards(tmp_path, "health", hour)[0].unlink()
    done, info = steps.check_arrival(part, hour, now=hour + dt.timedelta(hours=1, minutes=19))
    assert not done and [m[1] for m in info["missing"]] == ["health"]
    done, info = steps.check_arrival(part, hour, now=hour + dt.timedelta(hours=1, minutes=20))
    assert done and len(info["missing"]) == 1
    # With nothing to expect and nothing arrived (first hour of a new partition) it waits too.
    empty = {"name": "new", "shards": str(tmp_path / "empty")}
    assert steps.check_arrival(empty, hour, now=hour + dt.timedelta(hours=1))[0] is False
    assert steps.check_arrival(empty, hour, now=hour + dt.timedelta(hours=1, minutes=20))[0] is True


def test_hourly_ingest_picks_up_late_shards_of_earlier_hours(monkeypatch, tmp_path):
    """A shard that arrives after its own hour's run is loaded by a later hour's ingest."""
    import duckdb

    from cudawatch import shards as sh
    from tests.test_shards import kernel_rows

    start = dt.datetime(2026, 11, 1, 0, tzinfo=dt.timezone.utc)
    root, db = tmp_path / "shards", tmp_path / "w.duckdb"
    monkeypatch.setenv("CUDAWATCH_SHARDS", str(root))
    monkeypatch.setenv("CUDAWATCH_DB", str(db))
    for h in range(3):
        hour = start + dt.timedelta(hours=h)
        sh.write_shard(root, "kernels", kernel_rows(window_start=hour), hour, host="h0", pid=1)
    partition = {"name": "default", "shards": str(root)}
    store = Store(db)
    first = run_hour(store, start + dt.timedelta(hours=1), partition, stages=("ingest",))
    assert (first.ingest.loaded, first.late_loaded) == (1, 1)  # hour 1, and hour 0 not loaded before
    late = sh.write_shard(root, "kernels", kernel_rows(window_start=start, host="h1"), start, host="h1", pid=2)
    # The DAG's ingest step (the same stage) returns only the hour and the partition for XCom.
    assert steps.ingest_hour(partition, start + dt.timedelta(hours=2)) == {"hour": "2026-11-01T02:00:00+00:00", "partition": "default"}
    con = duckdb.connect(str(db), read_only=True)
    paths = {r[0] for r in con.execute("SELECT path FROM shard_ledger").fetchall()}
    con.close()
    assert late.relative_to(root).as_posix() in paths and len(paths) == 4



def test_partition_names_that_duckdb_reads_as_one_are_duplicates(monkeypatch):
    # in the partitioned layout each name is a file and a DuckDB catalog (case-blind, '-' as '_')
    for bad in ("East=/a,east=/b", "a-b=/a,a_b=/b"):
        monkeypatch.setenv("CUDAWATCH_PARTITIONS", bad)
        with pytest.raises(ConfigError, match="duplicate names"):
            steps.hourly_partitions()
