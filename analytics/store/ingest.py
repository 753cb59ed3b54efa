"""Idempotent shard ingest: the ledger, the quarantine, and the fast DuckDB reader path."""

from __future__ import annotations

import datetime as dt
import os
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from cudawatch import shards as sh

from analytics.store.schema import RAW_TABLES

_LEDGER_COLUMNS = ("shard_id", "path", "table_name", "partition_hour", "rows", "bytes")


@dataclass
class IngestResult:
    """What one ingest call did."""

    loaded: int = 0
    skipped: int = 0
    rows: dict[str, int] = field(default_factory=dict)
    quarantined: list[tuple[str, str]] = field(default_factory=list)

    def summary(self) -> str:
        rows = ", ".join(f"{t}={n}" for t, n in sorted(self.rows.items())) or "no rows"
        return f"loaded {self.loaded} shards ({rows}); {self.skipped} already loaded; {len(self.quarantined)} quarantined"


def ingest_shards(
    shards_root: str | os.PathLike,
    con: duckdb.DuckDBPyConnection,
    *,
    hour: dt.datetime | None = None,
    tables: tuple[str, ...] = RAW_TABLES,
    batch_files: int = 64,
) -> IngestResult:
    """Load every shard under ``shards_root`` not yet in the ledger (one hour only, if given).

    Idempotent: a shard's relative path is its identity, so a second call loads nothing. A shard
    that fails validation is recorded in ``quarantine`` with the reason and left in place; the
    others load. A quarantined shard is retried when its size changes (e.g. it was rewritten).
    Rows and ledger entries of a batch commit in one transaction, so a crash mid-ingest leaves no
    partly loaded shard.

    Fast path: shards whose Parquet footer proves the contract (required columns present and,
    by the row-group statistics, free of nulls; ``schema_version`` 1) are read by DuckDB's own
    parallel reader, a batch in one statement. Any other shard, or a batch DuckDB cannot cast,
    goes through ``read_shard`` file by file, which names the bad file and quarantines it.
    """
    root = Path(shards_root)
    result = IngestResult()
    known = {r[0] for r in con.execute("SELECT path FROM shard_ledger").fetchall()}
    # A quarantined shard is retried only when its file changed (rewritten or repaired).
    quarantined = dict(con.execute("SELECT path, bytes FROM quarantine").fetchall())
    for table in tables:
        todo = []
        for path in sh.list_shards(root, table, hour):
            rel = path.relative_to(root).as_posix()
            if rel in known or quarantined.get(rel) == path.stat().st_size:
                result.skipped += 1
            else:
                if rel in quarantined:
                    con.execute("DELETE FROM quarantine WHERE path = ?", [rel])
                todo.append((path, rel))
        for start in range(0, len(todo), batch_files):
            _load_batch(con, table, todo[start : start + batch_files], result)
    return result


def _load_batch(con, table: str, batch, result: IngestResult) -> None:
    fast, slow = [], []
    for path, rel in batch:
        meta = _footer_proves_contract(path, table)
        if meta is None:
            slow.append((path, rel))
        else:
            fast.append((path, rel, *meta))
    if fast and not _insert_with_duckdb(con, table, fast, result):
        slow = [(path, rel) for path, rel, *_ in fast] + slow  # find the value DuckDB could not cast
    if slow:
        _insert_checked(con, table, slow, result)


def _footer_proves_contract(path: Path, table: str) -> tuple[int, set[str]] | None:
    """(rows, column names) when the footer alone shows the shard meets the contract, else None."""
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
    return md.num_rows, names


def _insert_with_duckdb(con, table: str, batch, result: IngestResult) -> bool:
    """Insert footer-checked shards with ``read_parquet``; False (nothing written) if DuckDB
    could not cast a value to the contract type."""
    types = dict(con.execute("SELECT column_name, data_type FROM information_schema.columns WHERE table_name = ?", [table]).fetchall())
    present = set().union(*(names for *_, names in batch))
    select = ", ".join(f"CAST(r.{c} AS {types[c]})" if c in present else f"NULL::{types[c]}" for c in sh.SCHEMAS[table].names)
    con.execute("BEGIN TRANSACTION")
    try:
        ids = [r[0] for r in con.execute("SELECT nextval('shard_id_seq') FROM range(?)", [len(batch)]).fetchall()]
        files = pa.table({"filename": [str(path) for path, *_ in batch], "shard_id": pa.array(ids, pa.int64())})
        ledger = pa.Table.from_pylist(
            [dict(zip(_LEDGER_COLUMNS, (shard_id, rel, table, _partition_hour(rel), rows, path.stat().st_size)))
             for shard_id, (path, rel, rows, _) in zip(ids, batch)]
        )
        con.register("_batch_files", files)
        con.register("_batch_ledger", ledger)
        con.execute(
            f"INSERT INTO {table} SELECT {select}, m.shard_id "
            "FROM read_parquet(?, filename = true, union_by_name = true, hive_partitioning = false) r "
            "JOIN _batch_files m ON r.filename = m.filename",
            [files.column("filename").to_pylist()],
        )
        con.execute(f"INSERT INTO shard_ledger ({', '.join(_LEDGER_COLUMNS)}) SELECT * FROM _batch_ledger")
        con.execute("COMMIT")
    except duckdb.ConversionException:
        con.execute("ROLLBACK")
        return False
    except Exception:
        con.execute("ROLLBACK")
        raise
    finally:
        con.unregister("_batch_files")
        con.unregister("_batch_ledger")
    result.loaded += len(batch)
    result.rows[table] = result.rows.get(table, 0) + sum(rows for _, _, rows, _ in batch)
    return True


def _insert_checked(con, table: str, batch, result: IngestResult) -> None:
    """Read and validate each shard with ``read_shard``; quarantine the bad ones, insert the rest."""
    good = []
    for path, rel in batch:
        size = path.stat().st_size
        try:
            data = sh.read_shard(path, table)
        except sh.ShardError as exc:
            reason = str(exc).replace(str(path), rel)
            con.execute("INSERT INTO quarantine (path, table_name, reason, bytes) VALUES (?, ?, ?, ?)", [rel, table, reason, size])
            result.quarantined.append((rel, reason))
            continue
        good.append((data.select(list(sh.SCHEMAS[table].names)), rel, size))
    if not good:
        return
    con.execute("BEGIN TRANSACTION")
    try:
        ids = [r[0] for r in con.execute("SELECT nextval('shard_id_seq') FROM range(?)", [len(good)]).fetchall()]
        batch_rows = pa.concat_tables(
            data.append_column("shard_id", pa.array([shard_id] * data.num_rows, pa.int64()))
            for shard_id, (data, _, _) in zip(ids, good)
        )
        ledger = pa.Table.from_pylist(
            [dict(zip(_LEDGER_COLUMNS, (shard_id, rel, table, _partition_hour(rel), data.num_rows, size)))
             for shard_id, (data, rel, size) in zip(ids, good)]
        )
        # One INSERT from Arrow each (executemany would go row by row).
        con.register("_batch_rows", batch_rows)
        con.register("_batch_ledger", ledger)
        con.execute(f"INSERT INTO {table} SELECT * FROM _batch_rows")
        con.execute(f"INSERT INTO shard_ledger ({', '.join(_LEDGER_COLUMNS)}) SELECT * FROM _batch_ledger")
        con.execute("COMMIT")
    except Exception:
        con.execute("ROLLBACK")
        raise
    finally:
        con.unregister("_batch_rows")
        con.unregister("_batch_ledger")
    result.loaded += len(good)
    result.rows[table] = result.rows.get(table, 0) + batch_rows.num_rows


def _partition_hour(rel: str) -> dt.datetime | None:
    date = hour = None
    for part in rel.split("/"):
        if part.startswith("date="):
            date = part[5:]
        elif part.startswith("hour="):
            hour = part[5:]
    if date is None or hour is None:
        return None
    return dt.datetime.fromisoformat(f"{date}T{hour}:00:00+00:00")


