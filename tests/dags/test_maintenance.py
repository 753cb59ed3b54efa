"""Maintenance: shard compaction without double loading, retention, checkpoint; and the DAG."""

from __future__ import annotations

import datetime as dt
import shutil

import duckdb
import pytest

from analytics import store
from analytics.store import maintenance
from app.arrival import arrival
from cudawatch import shards as sh
from tests.dags.conftest import START, run_dag, task_states

HOUR = dt.timedelta(hours=1)


@pytest.fixture
def loaded(tmp_path):
    """6 hours of 16 GPUs (two hosts: two small shards per table and hour), all ingested."""
    from simulator import simulate_fleet

    root, db = tmp_path / "shards", tmp_path / "cudawatch.duckdb"
    simulate_fleet(root, gpus=16, hours=6, seed=5, start=START, injections=[])
    con = store.connect(db)
    store.ingest_shards(root, con)
    yield root, db, con
    con.close()


def _raw_counts(con):
    return {t: con.execute(f"SELECT count(*), sum(hash(columns(* EXCLUDE (shard_id)))::HUGEINT) FROM {t}").fetchone() for t in sh.SCHEMAS}


def test_compaction_merges_settled_hours_and_loads_nothing_twice(loaded):
    root, db, con = loaded
    before = _raw_counts(con)
    hosts_before = arrival({"name": "default", "shards": str(root)}, START + 2 * HOUR, 2)["present"]
    result = maintenance.compact_shards(root, con, older_than=START + 4 * HOUR)
    assert (result.partitions, result.merged_files, result.written_files) == (4 * 4, 4 * 4 * 2, 4 * 4)
    for h in range(6):
        files = sh.list_shards(root, "kernels", START + h * HOUR)
        assert len(files) == (1 if h < 4 else 2)
        assert (files[0].name.startswith("compacted-")) == (h < 4)
    # Same rows in the warehouse, and a new ingest finds nothing to load.
    again = store.ingest_shards(root, con)
    assert again.loaded == 0 and again.quarantined == []
    assert _raw_counts(con) == before
    # The merged files hold exactly the rows that were loaded from their sources.
    merged = sum(pq_rows(p) for p in sh.list_shards(root, "kernels") if p.name.startswith("compacted-"))
    assert merged == con.execute("SELECT count(*) FROM kernels WHERE window_start < ?", [START + 4 * HOUR]).fetchone()[0]
    # The sensor still knows which hosts sent shards for a compacted hour.
    assert arrival({"name": "default", "shards": str(root)}, START + 2 * HOUR, 2)["present"] == hosts_before
    # Idempotent: a second run merges nothing.
    assert maintenance.compact_shards(root, con, older_than=START + 4 * HOUR).partitions == 0


def pq_rows(path) -> int:
    import pyarrow.parquet as pq

    return pq.ParquetFile(path).metadata.num_rows


def test_compaction_leaves_partitions_with_unloaded_shards(loaded, tmp_path):
    root, db, con = loaded
    from simulator import simulate_fleet

    simulate_fleet(tmp_path / "late", gpus=8, hours=1, seed=9, start=START, injections=[])
    late = sh.list_shards(tmp_path / "late", "kernels")[0]
    target = sh.partition_dir(root, "kernels", START) / ("late-" + late.name)
    shutil.copy(late, target)
    result = maintenance.compact_shards(root, con, older_than=START + HOUR)
    assert result.skipped_unloaded == 1
    assert target.exists() and len(sh.list_shards(root, "kernels", START)) == 3
    # Once loaded, the partition is merged (three shards into one).
    assert store.ingest_shards(root, con, hour=START).loaded == 1
    assert maintenance.compact_shards(root, con, older_than=START + HOUR).merged_files == 3


def test_interrupted_compaction_is_finished(loaded):
    """A crash after the merged file appeared but before the sources were deleted."""
    root, db, con = loaded
    sources = sh.list_shards(root, "kernels", START)
    saved = {p: p.read_bytes() for p in sources}
    maintenance.compact_shards(root, con, older_than=START + HOUR)
    for p, data in saved.items():  # the sources are back, as if never deleted
        p.write_bytes(data)
    before = _raw_counts(con)
    result = maintenance.compact_shards(root, con, older_than=START + HOUR)
    assert result.finished_interrupted == 2 and result.partitions == 0
    assert [p.name.startswith("compacted-") for p in sh.list_shards(root, "kernels", START)] == [True]
    assert store.ingest_shards(root, con).loaded == 0
    assert _raw_counts(con) == before


def test_retention_and_checkpoint(loaded, tmp_path):
    root, db, con = loaded
    reports = tmp_path / "reports"
    for day in ("2026-10-01", "2026-10-31", "not-a-day"):
        (reports / day).mkdir(parents=True)
    now = START + 5 * HOUR
    policy = maintenance.RetentionPolicy(shard_days=0, warehouse_days=0, report_days=5)
    assert maintenance.apply_retention(root, con, reports, now=now, policy=policy).report_days == 1
    assert sorted(p.name for p in reports.iterdir()) == ["2026-10-31", "not-a-day"]

    # Hours 0..2 fall out of a retention that ends at hour 3 (days as fractions are not allowed,
    # so move "now" instead: 1 day after hour 3).
    now = START + 3 * HOUR + dt.timedelta(days=1)
    kept = con.execute("SELECT count(*) FROM kernels WHERE window_start >= ?", [START + 3 * HOUR]).fetchone()[0]
    result = maintenance.apply_retention(root, con, reports, now=now, policy=maintenance.RetentionPolicy(1, 1, 0))
    assert result.shard_partitions == 3 * 4
    assert result.warehouse_rows["kernels"] > 0
    assert con.execute("SELECT count(*) FROM kernels").fetchone()[0] == kept
    assert sh.list_shards(root, "kernels", START) == [] and sh.list_shards(root, "kernels", START + 3 * HOUR)
    # Ledger rows stay, so a deleted shard that reappears is not loaded again.
    assert store.ingest_shards(root, con).loaded == 0
    out = maintenance.checkpoint(con, db)
    assert out["bytes_after"] > 0


def test_maintenance_dag_end_to_end(dagbag, loaded, tmp_path, monkeypatch):
    root, db, con = loaded
    rows = con.execute("SELECT count(*) FROM kernels").fetchone()[0]
    con.close()  # the DAG's tasks open the warehouse themselves
    (tmp_path / "reports" / "2025-01-01").mkdir(parents=True)
    monkeypatch.setenv("CUDAWATCH_SHARDS", str(root))
    monkeypatch.setenv("CUDAWATCH_DB", str(db))
    monkeypatch.setenv("CUDAWATCH_REPORTS", str(tmp_path / "reports"))
    monkeypatch.setenv("CUDAWATCH_COMPACT_AFTER_H", "2")
    # The run of 2026-11-01 04:30 ends its interval in hour 04: hours before 02:00 are settled.
    dr = run_dag(dagbag, "cudawatch_maintenance", START + dt.timedelta(hours=4, minutes=30))
    assert str(dr.state) == "success", task_states(dr)
    assert [len(sh.list_shards(root, "kernels", START + h * HOUR)) for h in range(6)] == [1, 1, 2, 2, 2, 2]
    assert not (tmp_path / "reports" / "2025-01-01").exists()
    con = duckdb.connect(str(db), read_only=True)
    assert con.execute("SELECT count(*) FROM kernels").fetchone()[0] == rows
    assert con.execute("SELECT count(*) FROM shard_compactions").fetchone()[0] == 2 * 4 * 2
    con.close()


def test_retention_drops_cached_noise_models_before_its_cutoff(tmp_path):
    """Reviewer's finding: the day's noise-model cache grew one row per series per day forever."""
    from analytics import online
    from analytics.store import noise_models as cache
    from tests.analytics.test_sequential import HIST, series

    con = store.connect(tmp_path / "w.duckdb")
    cache.ensure_tables(con)
    v = series(n=2, hours=HIST + 17, seed=34)
    rows, model, keep = online.day_model(v, ["a", "b"], 0, None, bad=+1)
    for day in (dt.date(2026, 11, 1), dt.date(2026, 11, 20)):
        cache.save_day(con, "kernel_mean_ns", day, "v", *keep, nu=model.nu)
    now = dt.datetime(2026, 11, 25, tzinfo=dt.timezone.utc)
    result = maintenance.apply_retention(tmp_path / "shards", con, tmp_path / "reports", now=now,
                                         policy=maintenance.RetentionPolicy(0, 10, 0))
    assert result.warehouse_rows["noise_models"] == 2
    assert con.execute("SELECT DISTINCT day FROM noise_models").fetchall() == [(dt.date(2026, 11, 20),)]
    assert con.execute("SELECT DISTINCT day FROM noise_outliers").fetchall() == [(dt.date(2026, 11, 20),)]
    assert cache.load_day(con, "kernel_mean_ns", dt.date(2026, 11, 20), "v") is not None
