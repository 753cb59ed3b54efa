"""Idempotent shard ingest: the ledger, the quarantine, row validation, at-most-once counting by
content, and the fast DuckDB reader path."""

from __future__ import annotations

import datetime as dt
import os
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from analytics import validate
from analytics.store.schema import RAW_TABLES, refresh_hourly
from cudawatch import shards as sh

_LEDGER_COLUMNS = ("shard_id", "path", "table_name", "partition_hour", "rows", "bytes")


@dataclass
class IngestResult:
    """What one ingest call did. ``rows`` counts rows loaded; ``rows_in`` rows read from the shards
    (loaded + rejected, quarantined shards included); ``rejected`` rows not loaded, by reason."""

    loaded: int = 0
    skipped: int = 0
    rows: dict[str, int] = field(default_factory=dict)
    quarantined: list[tuple[str, str]] = field(default_factory=list)
    rows_in: dict[str, int] = field(default_factory=dict)
    rejected: dict[str, int] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    def summary(self) -> str:
        rows = ", ".join(f"{t}={n}" for t, n in sorted(self.rows.items())) or "no rows"
        text = f"loaded {self.loaded} shards ({rows}); {self.skipped} already loaded; {len(self.quarantined)} quarantined"
        if self.rejected:
            top = ", ".join(f"{r} {n}" for r, n in sorted(self.rejected.items(), key=lambda kv: (-kv[1], kv[0])))
            text += f"; {sum(self.rejected.values())} rows not loaded ({top})"
        if self.warnings:
            text += f"; {len(self.warnings)} paths skipped"
        return text

    def _add(self, table: str, rows_in: int, loaded: int, rejected: dict[str, int]) -> None:
        self.rows_in[table] = self.rows_in.get(table, 0) + rows_in
        if loaded or table in self.rows:
            self.rows[table] = self.rows.get(table, 0) + loaded
        for reason, n in rejected.items():
            self.rejected[reason] = self.rejected.get(reason, 0) + n


#: Content key of a row per table: a window of a process (a GPU sample for ``device``) counts once,
#: whatever file or however many files it arrives in (docs/shards.md, "Content key").
CONTENT_KEY: dict[str, tuple[str, ...]] = {
    "kernels": ("host", "pid", "gpu_uuid", "window_start", "kernel_id", "grid_x", "grid_y", "grid_z",
                "block_x", "block_y", "block_z", "registers_per_thread", "shared_mem_bytes"),
    "memcpy": ("host", "pid", "gpu_uuid", "window_start", "copy_kind", "src_kind", "dst_kind"),
    "device": ("host", "gpu_uuid", "ts"),
    "health": ("host", "pid", "window_start"),
}


def ingest_shards(
    shards_root: str | os.PathLike,
    con: duckdb.DuckDBPyConnection,
    *,
    hour: dt.datetime | None = None,
    tables: tuple[str, ...] = RAW_TABLES,
    batch_files: int = 64,
    now: dt.datetime | None = None,
) -> IngestResult:
    """Load every shard under ``shards_root`` not yet in the ledger (one hour only, if given).

    Idempotent: a shard's relative path is its identity, so a second call loads nothing. A shard
    that fails the contract is recorded in ``quarantine`` with the reason and left in place; the
    others load. A quarantined shard is retried when its size changes (e.g. it was rewritten).

    Every row is validated against the contract's physical limits (``analytics.validate``, with
    the shard's partition hour and ``now``, the ingest time, default the wall clock): impossible
    rows are not loaded and are counted per shard and reason in ``rejected_rows``; a shard whose
    rows are mostly impossible is quarantined whole. Rows are counted at most once by content
    (``CONTENT_KEY``): a row whose key is already in the warehouse, or earlier in the batch, is
    counted as ``duplicate`` instead. A shard path without a valid ``date=/hour=`` partition is
    skipped with a warning in ``IngestResult.warnings``. Rows, ledger, rejected counts and
    quarantine entries of a batch commit in one transaction, so a crash mid-ingest leaves no
    partly loaded shard.

    Fast path: shards whose Parquet footer proves the contract (required columns present and,
    by the row-group statistics, free of nulls; ``schema_version`` 1) are read by DuckDB's own
    parallel reader, a batch in one statement. Any other shard, or a batch DuckDB cannot cast,
    goes through ``read_shard`` file by file, which names the bad file and quarantines it.
    """
    root = Path(shards_root)
    now = sh.parse_utc(now) if now is not None else dt.datetime.now(dt.timezone.utc)
    result = IngestResult()
    known = {r[0] for r in con.execute("SELECT path FROM shard_ledger").fetchall()}
    # A quarantined shard is retried only when its file changed (rewritten or repaired).
    quarantined = dict(con.execute("SELECT path, bytes FROM quarantine").fetchall())
    for table in tables:
        todo = []
        for path in sh.list_shards(root, table, hour):
            rel = path.relative_to(root).as_posix()
            try:
                part = validate.partition_hour_of(rel)
            except sh.ShardError as exc:
                result.warnings.append(f"skipped {exc}")
                continue
            if rel in known or quarantined.get(rel) == path.stat().st_size:
                result.skipped += 1
            else:
                todo.append(_Shard(path, rel, part, path.stat().st_size, rel in quarantined))
        for start in range(0, len(todo), batch_files):
            _load_batch(con, table, todo[start : start + batch_files], result, now)
    return result


@dataclass
class _Shard:
    path: Path
    rel: str
    partition: dt.datetime
    size: int
    was_quarantined: bool = False
    data: pa.Table | None = None
    shard_id: int | None = None


def _load_batch(con, table: str, batch: list[_Shard], result: IngestResult, now: dt.datetime) -> None:
    fast, slow = [], []
    for shard in batch:
        names = _footer_proves_contract(shard.path, table)
        (slow if names is None else fast).append((shard, names))
    if fast and not _read_with_duckdb(con, table, fast):
        slow += fast  # find the value DuckDB could not cast, file by file
    bad: list[tuple[_Shard, str]] = []
    for shard, _ in slow:
        try:
            shard.data = sh.read_shard(shard.path, table).select(list(sh.SCHEMAS[table].names))
        except sh.ShardError as exc:
            bad.append((shard, str(exc).replace(str(shard.path), shard.rel)))
    _commit(con, table, batch, bad, result, now)


def _footer_proves_contract(path: Path, table: str) -> set[str] | None:
    """The column names when the footer alone shows the shard meets the contract, else None."""
    try:
        pf = pq.ParquetFile(path)
    except Exception:  # unreadable: the checked path quarantines it with the reason
        return None
    names = set(pf.schema_arrow.names)
    required = [f.name for f in sh.SCHEMAS[table] if not f.nullable]
    if not set(required) <= names:
        return None
    md = pf.metadata
    index = {md.schema.column(i).name: i for i in range(md.num_columns)}
    for rg in range(md.num_row_groups):
        for name in required:
            stats = md.row_group(rg).column(index[name]).statistics
            if stats is None or not stats.has_null_count or stats.null_count:
                return None
            if name == "schema_version" and (not stats.has_min_max or stats.min != sh.SCHEMA_VERSION or stats.max != sh.SCHEMA_VERSION):
                return None
    return names


def _read_with_duckdb(con, table: str, batch) -> bool:
    """Read footer-checked shards with ``read_parquet`` into ``shard.data`` (contract types);
    False (nothing read) if DuckDB could not cast a value to the contract type."""
    types = dict(con.execute("SELECT column_name, data_type FROM information_schema.columns WHERE table_name = ?", [table]).fetchall())
    present = set().union(*(names for _, names in batch))
    select = ", ".join(f"CAST(r.{c} AS {types[c]}) AS {c}" if c in present else f"NULL::{types[c]} AS {c}" for c in sh.SCHEMAS[table].names)
    files = [str(shard.path) for shard, _ in batch]
    try:
        data = con.sql(
            f"SELECT {select}, r.filename AS _file FROM read_parquet(?, filename = true, union_by_name = true, hive_partitioning = false) r",
            params=[files],
        ).to_arrow_table()
    except duckdb.ConversionException:
        return False
    schema = sh.SCHEMAS[table]
    # Sorted by file: each shard's rows are one slice (no per-file filter over the whole batch).
    data = data.take(pc.sort_indices(data, [("_file", "ascending")]))
    counts = {c["values"]: c["counts"] for c in pc.value_counts(data.column("_file")).to_pylist()}
    data = data.drop_columns(["_file"]).cast(schema)
    offset = 0
    for shard, _ in sorted(batch, key=lambda item: str(item[0].path)):
        n = counts.get(str(shard.path), 0)
        shard.data = data.slice(offset, n)
        offset += n
    return True


def _commit(con, table: str, batch: list[_Shard], bad: list[tuple[_Shard, str]], result: IngestResult, now: dt.datetime) -> None:
    """Validate the read shards, then in one transaction: quarantine the bad and the mostly bad,
    insert the good rows not already present by content key, ledger the loaded shards and record
    the rejected rows per shard and reason."""
    quarantine: list[tuple[_Shard, str]] = list(bad)
    rejected: list[tuple[str, str, int]] = []  # (path, reason, rows)
    good: list[tuple[_Shard, pa.Table]] = []
    for shard in batch:
        if shard.data is None:
            continue
        v = validate.validate_rows(table, shard.data, shard.partition, now)
        counts = dict(v.rejected)
        if v.quarantine:
            if v.good.num_rows:
                counts["shard_quarantined"] = v.good.num_rows
            quarantine.append((shard, v.reason()))
        else:
            good.append((shard, v.good))
        rejected += [(shard.rel, r, n) for r, n in counts.items()]
        result._add(table, v.rows, 0, counts)
    con.execute("BEGIN TRANSACTION")
    try:
        for shard in batch:
            if shard.was_quarantined:  # retried after a rewrite: its old verdict goes
                con.execute("DELETE FROM quarantine WHERE path = ?", [shard.rel])
                con.execute("DELETE FROM rejected_rows WHERE path = ?", [shard.rel])
        for shard, reason in quarantine:
            con.execute("INSERT INTO quarantine (path, table_name, reason, bytes) VALUES (?, ?, ?, ?)",
                        [shard.rel, table, reason, shard.size])
        loaded = _insert_new_rows(con, table, good) if good else {}
        ledger = [(shard.shard_id, shard.rel, table, shard.partition, loaded.get(shard.shard_id, 0), shard.size)
                  for shard, _ in good]
        for shard, rows in good:
            sid = shard.shard_id
            dup = rows.num_rows - loaded.get(sid, 0)
            if dup:
                rejected.append((shard.rel, "duplicate", dup))
                result._add(table, 0, 0, {"duplicate": dup})
            result._add(table, 0, loaded.get(sid, 0), {})
        if ledger:
            con.register("_batch_ledger", pa.Table.from_pylist([dict(zip(_LEDGER_COLUMNS, row)) for row in ledger]))
            con.execute(f"INSERT INTO shard_ledger ({', '.join(_LEDGER_COLUMNS)}) SELECT * FROM _batch_ledger")
            con.unregister("_batch_ledger")
        if rejected:
            con.executemany("INSERT OR REPLACE INTO rejected_rows (path, table_name, reason, rows) VALUES (?, ?, ?, ?)",
                            [[path, table, reason, n] for path, reason, n in rejected])
        con.execute("COMMIT")
    except Exception:
        con.execute("ROLLBACK")
        raise
    result.loaded += len(good)
    result.quarantined += [(shard.rel, reason) for shard, reason in quarantine]


def _insert_new_rows(con, table: str, good: list[tuple[_Shard, pa.Table]]) -> dict[int, int]:
    """Draw a shard id for each shard and insert the rows whose content key is neither in
    ``table`` nor earlier in the batch (by shard id); returns rows inserted per shard id."""
    ids = [r[0] for r in con.execute("SELECT nextval('shard_id_seq') FROM range(?)", [len(good)]).fetchall()]
    for sid, (shard, _) in zip(ids, good):
        shard.shard_id = sid
    rows = pa.concat_tables(data.append_column("shard_id", pa.array([sid] * data.num_rows, pa.int64()))
                            for sid, (_, data) in zip(ids, good))
    if rows.num_rows == 0:
        return {}
    key = CONTENT_KEY[table]
    time_col = sh.TIME_COLUMN[table]
    cols = ", ".join(rows.column_names)
    same = " AND ".join(f"t.{k} IS NOT DISTINCT FROM b.{k}" for k in key)
    lo, hi = pc.min_max(rows.column(time_col)).values()
    con.register("_batch_rows", rows)
    try:
        con.execute(
            f"INSERT INTO {table} ({cols}) SELECT {cols} FROM ("
            f"  SELECT * FROM _batch_rows QUALIFY row_number() OVER (PARTITION BY {', '.join(key)} ORDER BY shard_id) = 1"
            f") b WHERE NOT EXISTS (SELECT 1 FROM {table} t WHERE t.{time_col} BETWEEN ? AND ? AND {same})",
            [lo.as_py(), hi.as_py()],
        )
    finally:
        con.unregister("_batch_rows")
    refresh_hourly(con, table, lo.as_py(), hi.as_py())
    return dict(con.execute(f"SELECT shard_id, count(*) FROM {table} WHERE shard_id BETWEEN ? AND ? GROUP BY shard_id",
                            [min(ids), max(ids)]).fetchall())


