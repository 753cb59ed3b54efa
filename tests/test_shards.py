"""Shard contract v1: schemas, atomic writes, validation errors."""

import datetime as dt
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from cudawatch import shards as sh

HOUR = dt.datetime(2026, 11, 1, 5, tzinfo=dt.timezone.utc)


def kernel_rows(n=3, **over):
    row = dict(window_start=HOUR, window_s=600, host="h0", gpu_uuid="GPU-0", gpu_index=0, gpu_model="H200",
               job="train", run_id="r1", pid=42, kernel="void k<float>()", kernel_id=sh.kernel_id_of("_Z1kIfEvv"),
               grid_x=1, grid_y=1, grid_z=1, block_x=128, block_y=1, block_z=1, registers_per_thread=32,
               shared_mem_bytes=0, launches=10, total_ns=1000, min_ns=90, max_ns=120, sumsq_ns2=1.0e5,
               hist_bucket=[105], hist_count=[10], sampling_duty=1.0)
    row.update(over)
    # one row per (window, process, signature), as the contract says: the rows are three processes
    return pa.Table.from_pylist([dict(row, launches=row["launches"] + i, pid=row["pid"] + i) for i in range(n)])


def test_write_then_read_roundtrip(tmp_path):
    path = sh.write_shard(tmp_path, "kernels", kernel_rows(), HOUR, host="h0", pid=42)
    assert path.parent == tmp_path / "kernels" / "date=2026-11-01" / "hour=05"
    assert path.name.startswith("h0-42-") and path.suffix == ".parquet"
    table = sh.read_shard(path)
    assert table.schema.field("window_start").type == pa.timestamp("us", tz="UTC")
    assert table.column("schema_version").to_pylist() == [1, 1, 1]
    assert table.column("launches").to_pylist() == [10, 11, 12]
    assert pq.ParquetFile(path).metadata.row_group(0).column(0).compression == "ZSTD"
    assert [p.name for p in tmp_path.rglob("*")if p.name.startswith(sh.TMP_PREFIX)] == []


def test_missing_required_column_is_a_clear_error(tmp_path):
    with pytest.raises(sh.ShardError, match="required column 'kernel_id'"):
        sh.write_shard(tmp_path, "kernels", kernel_rows().drop(["kernel_id"]), HOUR)


def test_extra_columns_are_kept_and_nullable_filled(tmp_path):
    data = kernel_rows().drop(["hist_bucket", "hist_count"]).append_column("note", pa.array(["a", "b", "c"]))
    table = sh.read_shard(sh.write_shard(tmp_path, "kernels", data, HOUR))
    assert table.column("note").to_pylist() == ["a", "b", "c"]
    assert table.column("hist_bucket").null_count == 3


def test_unknown_major_version_rejected(tmp_path):
    folder = sh.partition_dir(tmp_path, "kernels", HOUR)
    folder.mkdir(parents=True)
    bad = sh.conform("kernels", kernel_rows()).set_column(0, "schema_version", pa.array([2, 2, 2], pa.int16()))
    pq.write_table(bad, folder / "x.parquet")
    with pytest.raises(sh.ShardError, match=r"schema_version \[2\] unsupported"):
        sh.read_shard(folder / "x.parquet")


def test_corrupt_file_names_the_file(tmp_path):
    folder = sh.partition_dir(tmp_path, "kernels", HOUR)
    folder.mkdir(parents=True)
    (folder / "bad.parquet").write_bytes(b"PAR1 not really")
    with pytest.raises(sh.ShardError, match="bad.parquet: not a readable Parquet file"):
        sh.read_shard(folder / "bad.parquet")


def test_crash_mid_write_leaves_no_file(tmp_path, monkeypatch):
    def boom(*a, **k):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError, match="disk full"):
        sh.write_shard(tmp_path, "kernels", kernel_rows(), HOUR)
    assert list(tmp_path.rglob("*.parquet")) == []


def test_list_shards_skips_temporary_files(tmp_path):
    done = sh.write_shard(tmp_path, "kernels", kernel_rows(), HOUR)
    (done.parent / (sh.TMP_PREFIX + "half.parquet")).write_bytes(b"partial")
    assert sh.list_shards(tmp_path) == [done]
    assert sh.list_shards(tmp_path, "kernels", HOUR) == [done]
    assert sh.list_shards(tmp_path, "kernels", HOUR + dt.timedelta(hours=1)) == []


def test_histogram_buckets_follow_the_contract():
    assert sh.hist_bucket(1) == 0
    assert sh.hist_bucket(2) == 16
    assert sh.hist_bucket(1000) == 159  # floor(16 * log2(1000)) = floor(159.45)
    assert sh.bucket_lower_ns(160) == pytest.approx(1024.0)


def test_kernel_id_is_stable_hex():
    assert sh.kernel_id_of("_Z3foov") == sh.kernel_id_of("_Z3foov") != sh.kernel_id_of("_Z3barv")
    assert len(sh.kernel_id_of("_Z3foov")) == 16
    int(sh.kernel_id_of("_Z3foov"), 16)


def test_table_of_rejects_foreign_paths(tmp_path):
    with pytest.raises(sh.ShardError, match="not under <table>"):
        sh.table_of(tmp_path / "x.parquet")
