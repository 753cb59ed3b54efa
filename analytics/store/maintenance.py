"""Housekeeping for shards, the warehouse and the report archive (the maintenance DAG's steps).

- ``compact_shards``: merge the many small shards of a settled hour (one per process per table)
  into one file, without loading any row twice. The ledger knows shards by path, so the merged
  file is entered in ``shard_ledger`` with ``rows = 0`` (its rows were loaded from the shards it
  replaces) *before* it appears on disk, and the sources are listed in ``shard_compactions``; an
  interrupted compaction is finished (sources deleted) on the next run.
- ``apply_retention``: delete shard partitions, raw warehouse rows and report archives older than
  their retention. Ledger rows stay, so a shard that reappears is not loaded again.
- ``checkpoint``: DuckDB ``CHECKPOINT`` (writes the WAL into the file and frees deleted row
  groups) and ``ANALYZE`` (refreshes optimizer statistics).

Every function takes the warehouse connection from its caller (held under the writer lock).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import re
import shutil
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from analytics.store import noise_models
from analytics.store.schema import drop_hourly_before
from analytics.store.tx import transaction
from cudawatch import shards as sh

#: Host part of a merged shard's name; ``compacted-0-<uuid>.parquet`` follows shards.shard_name.
COMPACTED_HOST = "compacted"

_DDL = """
CREATE TABLE IF NOT EXISTS shard_compactions (
    source_path VARCHAR PRIMARY KEY,   -- a shard merged away (relative to the shard root)
    compacted_path VARCHAR NOT NULL,   -- the merged file that holds its rows now
    rows BIGINT,
    compacted_at TIMESTAMPTZ DEFAULT current_timestamp
);
"""

_PARTITION_RE = re.compile(r"^date=(\d{4}-\d{2}-\d{2})$")
_HOUR_RE = re.compile(r"^hour=(\d{2})$")
_DAY_RE = re.compile(r"^\d{4}-\d{2}-\d{2}$")


@dataclass
class CompactionResult:
    partitions: int = 0          # partitions merged this run
    merged_files: int = 0        # small shards replaced
    written_files: int = 0       # merged files written
    rows: int = 0                # rows moved
    finished_interrupted: int = 0  # sources of an earlier interrupted run deleted now
    skipped_unloaded: int = 0    # partitions left alone because a shard is not loaded yet

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class RetentionPolicy:
    """Days to keep each kind of data; 0 keeps it forever."""

    shard_days: int = 30
    warehouse_days: int = 180
    report_days: int = 365


@dataclass
class RetentionResult:
    shard_partitions: int = 0
    warehouse_rows: dict = field(default_factory=dict)
    report_days: int = 0

    def as_dict(self) -> dict:
        return asdict(self)


def _hour_partitions(root: Path, table: str):
    """(hour, folder) of every hourly partition of ``table`` under ``root``."""
    base = root / table
    if not base.is_dir():
        return
    for day_dir in sorted(base.iterdir()):
        m = _PARTITION_RE.match(day_dir.name)
        if not m or not day_dir.is_dir():
            continue
        for hour_dir in sorted(day_dir.iterdir()):
            h = _HOUR_RE.match(hour_dir.name)
            if h and hour_dir.is_dir():
                yield dt.datetime.fromisoformat(f"{m.group(1)}T{h.group(1)}:00:00+00:00"), hour_dir


def compact_shards(shards_root: str | os.PathLike, con, *, older_than: dt.datetime, small_bytes: int = 8 << 20) -> CompactionResult:
    """Merge the small shards (< ``small_bytes``) of each partition whose hour is before
    ``older_than`` and whose shards are all loaded; a partition with a shard not yet in the ledger
    (or quarantined) is left for ingest. Merged rows keep the contract schema (read_shard)."""
    root = Path(shards_root)
    con.execute(_DDL)
    result = CompactionResult()
    loaded = {r[0] for r in con.execute("SELECT path FROM shard_ledger").fetchall()}
    merged_into = dict(con.execute("SELECT source_path, compacted_path FROM shard_compactions").fetchall())
    for table in sh.SCHEMAS:
        for hour, folder in _hour_partitions(root, table):
            if hour >= older_than:
                continue
            files = [p for p in sorted(folder.glob("*.parquet")) if not p.name.startswith(sh.TMP_PREFIX)]
            rel = {p: p.relative_to(root).as_posix() for p in files}
            # Finish an interrupted compaction: its merged file exists, so the sources go.
            pending = [p for p in files if rel[p] in merged_into and (root / merged_into[rel[p]]).exists()]
            for p in pending:
                p.unlink()
                result.finished_interrupted += 1
            files = [p for p in files if p not in pending]
            if any(rel[p] not in loaded for p in files):
                result.skipped_unloaded += 1
                continue
            small = [p for p in files if p.stat().st_size < small_bytes]
            if len(small) < 2:
                continue
            _merge(root, con, table, hour, folder, small, rel, result)
    return result


def _merge(root: Path, con, table: str, hour: dt.datetime, folder: Path, small: list[Path], rel: dict, result: CompactionResult) -> None:
    data = pa.concat_tables([sh.read_shard(p, table) for p in small], promote_options="default")
    final = folder / f"{COMPACTED_HOST}-0-{uuid.uuid4().hex[:12]}.parquet"
    final_rel = final.relative_to(root).as_posix()
    # 1. the ledger learns the merged file (rows already loaded from its sources) ...
    with transaction(con):
        shard_id = con.execute("SELECT nextval('shard_id_seq')").fetchone()[0]
        con.execute(
            "INSERT INTO shard_ledger (shard_id, path, table_name, partition_hour, rows, bytes) VALUES (?, ?, ?, ?, 0, 0)",
            [shard_id, final_rel, table, hour],
        )
        con.executemany(
            "INSERT OR REPLACE INTO shard_compactions (source_path, compacted_path, rows) VALUES (?, ?, ?)",
            [(rel[p], final_rel, None) for p in small],
        )
    # 2. ... then the file appears atomically, 3. then the sources go.
    with sh.atomic_file(final) as fh:
        pq.write_table(data, fh, compression="zstd")
    con.execute("UPDATE shard_ledger SET bytes = ? WHERE path = ?", [final.stat().st_size, final_rel])
    for p in small:
        p.unlink()
    result.partitions += 1
    result.merged_files += len(small)
    result.written_files += 1
    result.rows += data.num_rows


def hosts_of_compacted(path: Path) -> set[str]:
    """Hosts whose rows a merged shard holds (reads only the ``host`` column)."""
    return set(pq.read_table(path, columns=["host"]).column("host").unique().to_pylist())


def apply_retention(shards_root: str | os.PathLike, con, reports_root: str | os.PathLike, *, now: dt.datetime,
                    policy: RetentionPolicy = RetentionPolicy()) -> RetentionResult:
    """Delete what is older than ``now`` minus each retention: shard partitions (whole hour
    folders), raw warehouse rows (by their time column) and report archive days
    (``<reports>/YYYY-MM-DD/``). ``now`` comes from the run's data interval, not the clock."""
    result = RetentionResult()
    root = Path(shards_root)
    if policy.shard_days > 0:
        cutoff = now - dt.timedelta(days=policy.shard_days)
        for table in sh.SCHEMAS:
            for hour, folder in list(_hour_partitions(root, table)):
                if hour < cutoff:
                    shutil.rmtree(folder)
                    result.shard_partitions += 1
                    with contextlib.suppress(OSError):
                        folder.parent.rmdir()  # the date folder, once empty
    if policy.warehouse_days > 0:
        cutoff = now - dt.timedelta(days=policy.warehouse_days)
        with transaction(con):
            for table, col in sh.TIME_COLUMN.items():
                n = con.execute(f"DELETE FROM {table} WHERE {col} < ?", [cutoff]).fetchone()[0]
                result.warehouse_rows[table] = int(n)
                drop_hourly_before(con, table, cutoff)
            if con.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = 'data_gaps'").fetchone()[0]:
                result.warehouse_rows["data_gaps"] = int(con.execute("DELETE FROM data_gaps WHERE hour < ?", [cutoff]).fetchone()[0])
            result.warehouse_rows["noise_models"] = noise_models.drop_before(con, cutoff.date())
    if policy.report_days > 0 and Path(reports_root).is_dir():
        cutoff_day = (now - dt.timedelta(days=policy.report_days)).date()
        for day_dir in sorted(Path(reports_root).iterdir()):
            if day_dir.is_dir() and _DAY_RE.match(day_dir.name) and dt.date.fromisoformat(day_dir.name) < cutoff_day:
                shutil.rmtree(day_dir)
                result.report_days += 1
    return result


def checkpoint(con, db: str | os.PathLike) -> dict:
    """``CHECKPOINT`` then ``ANALYZE``; returns the file size before and after in bytes."""
    before = Path(db).stat().st_size if Path(db).exists() else 0
    con.execute("CHECKPOINT")
    con.execute("ANALYZE")
    after = Path(db).stat().st_size if Path(db).exists() else 0
    return {"bytes_before": before, "bytes_after": after}
