"""Warehouse ingest: idempotent, quarantines bad shards with a reason, accepts late shards."""

import datetime as dt

import pyarrow as pa
import pytest

from analytics import store
from cudawatch import shards as sh
from tests.test_shards import HOUR, kernel_rows


def counts(con):
    return {t: con.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in (*store.RAW_TABLES, "shard_ledger")}


def device_rows(hour, n=4):
    return pa.Table.from_pylist([dict(ts=hour + dt.timedelta(seconds=10 * i), host="h0", gpu_uuid="GPU-0", gpu_index=0,
                                      gpu_model="H200", sm_util_pct=50.0, sm_clock_mhz=1980.0) for i in range(n)])


@pytest.fixture
def shard_root(tmp_path):
    root = tmp_path / "shards"
    for h in range(3):
        hour = HOUR + dt.timedelta(hours=h)
        sh.write_shard(root, "kernels", kernel_rows(window_start=hour), hour, host="h0", pid=1)
        sh.write_shard(root, "device", device_rows(hour), hour, host="h0", pid=2)
    return root


def test_loading_twice_counts_once(shard_root, tmp_path):
    con = store.connect(tmp_path / "w.duckdb")
    first = store.ingest_shards(shard_root, con)
    assert (first.loaded, first.skipped, first.rows) == (6, 0, {"kernels": 9, "device": 12})
    before = counts(con)
    second = store.ingest_shards(shard_root, con)
    assert (second.loaded, second.skipped) == (0, 6)
    assert counts(con) == before == {"kernels": 9, "memcpy": 0, "device": 12, "health": 0, "shard_ledger": 6}


def test_corrupt_shard_is_quarantined_and_the_rest_load(shard_root, tmp_path):
    bad = sh.partition_dir(shard_root, "kernels", HOUR) / "h9-1-bad.parquet"
    bad.write_bytes(b"not parquet at all")
    con = store.connect(tmp_path / "w.duckdb")
    result = store.ingest_shards(shard_root, con)
    assert result.loaded == 6
    assert [p for p, _ in result.quarantined] == ["kernels/date=2026-11-01/hour=05/h9-1-bad.parquet"]
    reason = con.execute("SELECT reason FROM quarantine").fetchone()[0]
    assert "not a readable Parquet file" in reason
    assert bad.exists(), "a quarantined shard is kept for inspection, never deleted"
    again = store.ingest_shards(shard_root, con)
    assert (again.loaded, again.quarantined) == (0, [])


def test_late_shard_for_an_old_hour_is_loaded(shard_root, tmp_path):
    con = store.connect(tmp_path / "w.duckdb")
    store.ingest_shards(shard_root, con)
    sh.write_shard(shard_root, "kernels", kernel_rows(n=1, window_start=HOUR, host="h1"), HOUR, host="h1", pid=7)
    late = store.ingest_shards(shard_root, con)
    assert (late.loaded, late.rows) == (1, {"kernels": 1})
    assert con.execute("SELECT count(DISTINCT host) FROM kernels WHERE window_start = ?", [HOUR]).fetchone()[0] == 2


def test_hour_filter_loads_one_partition(shard_root, tmp_path):
    con = store.connect(tmp_path / "w.duckdb")
    result = store.ingest_shards(shard_root, con, hour=HOUR + dt.timedelta(hours=1))
    assert result.loaded == 2
    hours = con.execute("SELECT DISTINCT partition_hour FROM shard_ledger").fetchall()
    assert [h[0] for h in hours] == [HOUR + dt.timedelta(hours=1)]


def test_views_aggregate_hourly(shard_root, tmp_path):
    con = store.connect(tmp_path / "w.duckdb")
    store.ingest_shards(shard_root, con)
    rows = con.execute("SELECT hour, launches, mean_ns, signature FROM kernel_hourly ORDER BY hour").fetchall()
    assert len(rows) == 3
    assert rows[0][1] == 33 and rows[0][2] == pytest.approx(3000 / 33)
    assert rows[0][3] == "1x1x1/128x1x1/r32/s0"


def test_sampling_duty_scales_counts_not_durations(tmp_path):
    root = tmp_path / "shards"
    sh.write_shard(root, "kernels", kernel_rows(n=1, sampling_duty=0.25), HOUR)
    con = store.connect(tmp_path / "w.duckdb")
    store.ingest_shards(root, con)
    launches, mean_ns = con.execute("SELECT launches, mean_ns FROM kernel_hourly").fetchone()
    assert (launches, mean_ns) == (40, 100)


def test_query_is_read_only(shard_root, tmp_path):
    db = tmp_path / "w.duckdb"
    con = store.connect(db)
    store.ingest_shards(shard_root, con)
    con.close()
    assert store.query(db, "SELECT count(*) AS n FROM kernels").to_pylist() == [{"n": 9}]
    with pytest.raises(store.QueryError, match="read-only"):
        store.query(db, "DELETE FROM kernels")


def test_query_on_missing_warehouse_is_clear(tmp_path):
    with pytest.raises(FileNotFoundError, match="run `cudawatch ingest` first"):
        store.query(tmp_path / "nope.duckdb", "SELECT 1")


def test_quarantined_shard_is_retried_once_rewritten(shard_root, tmp_path):
    bad = sh.partition_dir(shard_root, "kernels", HOUR) / "h9-1-fix.parquet"
    bad.write_bytes(b"truncated")
    con = store.connect(tmp_path / "w.duckdb")
    assert len(store.ingest_shards(shard_root, con).quarantined) == 1
    # The producer rewrites the file correctly (same name): the next ingest loads it.
    import pyarrow.parquet as pq

    pq.write_table(sh.conform("kernels", kernel_rows(n=2, host="h9")), bad)
    again = store.ingest_shards(shard_root, con)
    assert (again.loaded, again.quarantined, again.rows) == (1, [], {"kernels": 2})
    assert con.execute("SELECT count(*) FROM quarantine").fetchone()[0] == 0


def test_views_scale_counts_in_double_precision(tmp_path):
    root = tmp_path / "shards"
    sh.write_shard(root, "kernels", kernel_rows(n=1, launches=123456789, total_ns=123456789 * 100, sampling_duty=0.5), HOUR)
    con = store.connect(tmp_path / "w.duckdb")
    store.ingest_shards(root, con)
    assert con.execute("SELECT launches FROM kernel_hourly").fetchone()[0] == 246913578


def _write_raw(root, name, table):
    """Write a Parquet file into the kernels partition without the contract writer."""
    import pyarrow.parquet as pq

    folder = sh.partition_dir(root, "kernels", HOUR)
    folder.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, folder / name, **({} if "stats" not in name else {"write_statistics": False}))
    return folder / name


def test_a_value_duckdb_cannot_cast_quarantines_only_that_shard(tmp_path):
    root = tmp_path / "shards"
    good = sh.write_shard(root, "kernels", kernel_rows(n=2), HOUR, host="h0", pid=1)
    bad_rows = sh.conform("kernels", kernel_rows(n=1)).set_column(
        sh.KERNELS.get_field_index("launches"), "launches", pa.array(["lots"]))
    _write_raw(root, "h1-2-bad.parquet", bad_rows)
    con = store.connect(tmp_path / "w.duckdb")
    result = store.ingest_shards(root, con)
    assert result.loaded == 1 and result.rows == {"kernels": 2}
    assert [p.rsplit("/", 1)[1] for p, _ in result.quarantined] == ["h1-2-bad.parquet"]
    assert "launches" in result.quarantined[0][1]
    assert con.execute("SELECT DISTINCT shard_id FROM kernels").fetchall() == con.execute(
        "SELECT shard_id FROM shard_ledger WHERE path = ?", [good.relative_to(root).as_posix()]).fetchall()


def test_missing_nullable_and_extra_columns_and_files_without_statistics_load(tmp_path):
    root = tmp_path / "shards"
    lean = sh.conform("kernels", kernel_rows(n=2)).drop(["hist_bucket", "hist_count", "sampling_duty"])
    _write_raw(root, "h0-1-lean.parquet", lean.append_column("note", pa.array(["x", "y"])))
    _write_raw(root, "h0-2-nostats.parquet", sh.conform("kernels", kernel_rows(n=3, host="h2")))
    con = store.connect(tmp_path / "w.duckdb")
    result = store.ingest_shards(root, con)
    assert (result.loaded, result.quarantined, result.rows) == (2, [], {"kernels": 5})
    rows = con.execute("SELECT count(*), count(hist_bucket), count(sampling_duty), sum(launches) FROM kernels").fetchone()
    assert rows == (5, 3, 3, 10 + 11 + 10 + 11 + 12)
    assert con.execute("SELECT count(DISTINCT shard_id), count(*) FROM shard_ledger").fetchone() == (2, 2)
