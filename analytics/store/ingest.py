"""Idempotent shard ingest: the ledger, the quarantine, row validation, at-most-once counting by
content, and the fast DuckDB reader path."""

from __future__ import annotations

import datetime as dt
import os
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import pyarrow as pa

from analytics import validate
from analytics.store import ingest_read
from analytics.store.schema import RAW_TABLES, refresh_hourly
from analytics.store.tx import transaction
from cudawatch import limits
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
    batch_files: int = 1024,
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

    Speed: a batch (whole partition hours, at most ``batch_files`` shards; fewer, larger commits
    cost much less than many small ones) goes in with one ``INSERT ... SELECT`` that keeps the rows
    passing every rule (``row_checks.reason_sql``, the SQL form of ``analytics.validate``). A
    shard's passing rows are counted from what was inserted and its total from its footer; only
    a batch where some row failed is scanned again for the counts per reason. The content-key
    dedupe is exact but runs only where the key hashes show a possible clash (``_keys_distinct``).
    Shards whose Parquet footer proves the contract (``ingest_read.footer_proves_contract``) are
    read by DuckDB's own parallel reader, the batch in one scan. Any other shard, or a batch
    DuckDB cannot cast, goes through ``read_shard`` file by file, which names the bad file and
    quarantines it.
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
        for batch in _batches(todo, batch_files):
            _load_batch(con, table, batch, result, now)
    return result


@dataclass
class _Shard:
    path: Path
    rel: str
    partition: dt.datetime
    size: int
    was_quarantined: bool = False
    index: int = 0  # its number in the batch (``_file`` in the batch's SQL)
    shard_id: int | None = None


def _batches(todo: list[_Shard], limit: int):
    """Whole partition hours, in path order, at most ``limit`` files a batch (an hour with more
    files is split): each hour's rollups are then refreshed once."""
    hours: dict[dt.datetime, list[_Shard]] = {}
    for shard in todo:
        hours.setdefault(shard.partition, []).append(shard)
    batch: list[_Shard] = []
    for group in hours.values():
        if batch and len(batch) + len(group) > limit:
            yield batch
            batch = []
        while len(group) > limit:
            yield group[:limit]
            group = group[limit:]
        batch += group
    if batch:
        yield batch


def _load_batch(con, table: str, batch: list[_Shard], result: IngestResult, now: dt.datetime) -> None:
    """Load one batch: footer-checked shards through DuckDB's reader, the others (or all, if
    DuckDB's reader fails on any of them: a value it cannot cast, a corrupt data page behind an
    intact footer) through ``read_shard``, file by file, which quarantines a bad shard with its
    reason while the rest load."""
    checked = [(shard, ingest_read.footer_proves_contract(shard.path, table)) for shard in batch]
    fast = [(shard, c) for shard, c in checked if c is not None]
    slow = [shard for shard, c in checked if c is None]
    types = dict(con.execute("SELECT column_name, data_type FROM information_schema.columns "
                             "WHERE table_name = ? AND table_catalog = current_database()", [table]).fetchall())
    try:
        _commit(con, table, batch, fast, slow, types, result, now)
    except duckdb.Error:
        if not fast:
            raise
        _commit(con, table, batch, [], [shard for shard, _ in fast] + slow, types, result, now)


def _commit(con, table: str, batch: list[_Shard], fast, slow: list[_Shard], types: dict[str, str],
            result: IngestResult, now: dt.datetime) -> None:
    """In one transaction: insert the rows that pass of every readable shard (one statement for
    the batch), count per shard what did not pass and why, take a mostly bad shard's rows out
    again and quarantine it, apply the content-key dedupe, ledger the loaded shards and record
    the rejected rows per shard and reason. ``result`` changes only once the batch committed."""
    order = [shard for shard, _ in fast] + slow  # fast shards first: _file = DuckDB's file_index
    for i, shard in enumerate(order):
        shard.index = i
    total = {shard.index: c[1] for shard, c in fast}  # rows per shard
    quarantine: list[tuple[_Shard, str]] = []
    read = []
    for shard in slow:
        try:
            data = sh.read_shard(shard.path, table).select(list(sh.SCHEMAS[table].names))
        except sh.ShardError as exc:
            quarantine.append((shard, str(exc).replace(str(shard.path), shard.rel)))
            continue
        total[shard.index] = data.num_rows
        read.append(data.append_column("_file", pa.array([shard.index] * data.num_rows, pa.int32())))
    readable = [shard for shard in batch if shard.index in total]  # path order: the first copy wins
    names = sh.SCHEMAS[table].names
    cols = ", ".join(names) + ", shard_id"
    try:
        with transaction(con):
            for shard in batch:
                if shard.was_quarantined:  # retried after a rewrite: its old verdict goes
                    con.execute("DELETE FROM quarantine WHERE path = ?", [shard.rel])
                    con.execute("DELETE FROM rejected_rows WHERE path = ?", [shard.rel])
            ids = [r[0] for r in con.execute("SELECT nextval('shard_id_seq') FROM range(?)", [len(readable)]).fetchall()]
            for sid, shard in zip(ids, readable):
                shard.shard_id = sid
            con.register("_ingest_files", pa.table({
                "_file": pa.array([s.index for s in readable], pa.int32()), "shard_id": pa.array(ids, pa.int64()),
                "_lo": pa.array([s.partition - limits.PARTITION_SKEW for s in readable], pa.timestamp("us", "UTC")),
                "_hi": pa.array([s.partition + dt.timedelta(hours=1) + limits.PARTITION_SKEW for s in readable],
                                pa.timestamp("us", "UTC"))}))
            if read:
                con.register("_ingest_read", pa.concat_tables(read))
            passed: dict = {}
            if readable:  # a batch of unreadable shards only quarantines them (there is nothing to read)
                src = ingest_read.source(table, types, [(s.path, c[0]) for s, c in fast], bool(read), now)
                con.execute(f"INSERT INTO {table} ({cols}) SELECT {cols} FROM ({src.sql}) WHERE _reason IS NULL", src.params)
                passed = _rows_per_shard(con, table, ids)
            # Shards with rows that did not pass: why (rare; one more scan of the batch).
            rejected: dict[int, dict[str, int]] = {s.index: {} for s in readable}
            if readable and any(passed.get(s.shard_id, (0,))[0] < total[s.index] for s in readable):
                for index, reason, n in con.execute(f"SELECT _file, _reason, count(*) FROM ({src.sql}) WHERE _reason IS NOT NULL "
                                                    f"GROUP BY ALL", src.params).fetchall():
                    rejected[index][reason] = n
            good: list[tuple[_Shard, int]] = []
            for shard in readable:
                counts = rejected[shard.index]
                ok = passed.get(shard.shard_id, (0,))[0]
                rows = total[shard.index]
                if ok + sum(counts.values()) != rows:  # the file changed between its footer and the read
                    raise sh.ShardError(f"{shard.rel}: changed while being ingested; nothing of its batch was loaded")
                if validate.mostly_bad(rows, counts):
                    quarantine.append((shard, validate.describe(rows, counts)))
                    if ok:
                        counts["shard_quarantined"] = ok
                        con.execute(f"DELETE FROM {table} WHERE shard_id = ?", [shard.shard_id])
                else:
                    good.append((shard, ok))
            for shard, reason in quarantine:
                con.execute("INSERT INTO quarantine (path, table_name, reason, bytes) VALUES (?, ?, ?, ?)",
                            [shard.rel, table, reason, shard.size])
            spans = [passed[s.shard_id][1:] for s, ok in good if ok]
            loaded = {s.shard_id: ok for s, ok in good}
            if spans:
                lo, hi = min(s[0] for s in spans), max(s[1] for s in spans)
                if not _keys_distinct(con, table, lo, hi):
                    loaded = _insert_deduplicated(con, table, src, [s.shard_id for s, _ in good], ids, lo, hi)
                refresh_hourly(con, table, lo, hi)
            dups = [(shard.rel, "duplicate", ok - loaded.get(shard.shard_id, 0)) for shard, ok in good
                    if ok - loaded.get(shard.shard_id, 0)]
            records = [(shard.rel, r, n) for shard in readable for r, n in rejected[shard.index].items()] + dups
            if good:
                ledger = [(s.shard_id, s.rel, table, s.partition, loaded.get(s.shard_id, 0), s.size) for s, _ in good]
                con.register("_batch_ledger", pa.Table.from_pylist([dict(zip(_LEDGER_COLUMNS, row)) for row in ledger]))
                con.execute(f"INSERT INTO shard_ledger ({', '.join(_LEDGER_COLUMNS)}) SELECT * FROM _batch_ledger")
                con.unregister("_batch_ledger")
            if records:
                con.register("_batch_rejected", pa.table({"path": [r[0] for r in records], "table_name": [table] * len(records),
                                                          "reason": [r[1] for r in records], "rows": [r[2] for r in records]}))
                con.execute("INSERT OR REPLACE INTO rejected_rows (path, table_name, reason, rows) SELECT * FROM _batch_rejected")
                con.unregister("_batch_rejected")
    finally:
        con.unregister("_ingest_files")
        if read:
            con.unregister("_ingest_read")
    for shard in readable:
        result._add(table, total[shard.index], 0, rejected[shard.index])
    for path, _, n in dups:
        result._add(table, 0, 0, {"duplicate": n})
    for shard, _ in good:
        result._add(table, 0, loaded.get(shard.shard_id, 0), {})
    result.loaded += len(good)
    result.quarantined += [(shard.rel, reason) for shard, reason in quarantine]


def _rows_per_shard(con, table: str, ids: list[int]) -> dict[int, tuple[int, object, object]]:
    """Rows, first and last timestamp per shard id (of the ids drawn for this batch)."""
    if not ids:
        return {}
    col = sh.TIME_COLUMN[table]
    return {sid: (n, lo, hi) for sid, n, lo, hi in con.execute(
        f"SELECT shard_id, count(*), min({col}), max({col}) FROM {table} WHERE shard_id BETWEEN ? AND ? "
        f"AND shard_id IN (SELECT shard_id FROM _ingest_files) GROUP BY shard_id", [min(ids), max(ids)]).fetchall()}


def _keys_distinct(con, table: str, lo, hi) -> bool:
    """True when the content keys of the rows of ``table`` between ``lo`` and ``hi`` all hash
    differently: then no two of them are equal (equal keys, NULLs included, hash equal), so the
    batch just inserted holds no row already present and no row twice. False when they may
    (a re-sent or overlapping shard, or a hash collision): the caller dedupes exactly."""
    n, distinct = con.execute(f"SELECT count(*), count(DISTINCT hash({', '.join(CONTENT_KEY[table])})) FROM {table} "
                              f"WHERE {sh.TIME_COLUMN[table]} BETWEEN ? AND ?", [lo, hi]).fetchall()[0]
    return n == distinct


def _insert_deduplicated(con, table: str, src, good_ids: list[int], ids: list[int], lo, hi) -> dict[int, int]:
    """Take the batch's rows out again and insert those whose content key is neither in ``table``
    nor earlier in the batch (by shard id, i.e. path order); rows inserted per shard id."""
    key, time_col = CONTENT_KEY[table], sh.TIME_COLUMN[table]
    cols = ", ".join(sh.SCHEMAS[table].names) + ", shard_id"
    con.execute(f"DELETE FROM {table} WHERE shard_id BETWEEN ? AND ? AND shard_id IN (SELECT shard_id FROM _ingest_files)",
                [min(ids), max(ids)])
    same = " AND ".join(f"t.{k} IS NOT DISTINCT FROM b.{k}" for k in key)
    con.execute(
        f"INSERT INTO {table} ({cols}) SELECT {cols} FROM ("
        f"  SELECT {cols} FROM ({src.sql}) WHERE _reason IS NULL AND list_contains(?, shard_id)"
        f"  QUALIFY row_number() OVER (PARTITION BY {', '.join(key)} ORDER BY shard_id) = 1"
        f") b WHERE NOT EXISTS (SELECT 1 FROM {table} t WHERE t.{time_col} BETWEEN ? AND ? AND {same})",
        src.params + [good_ids, lo, hi],
    )
    return {sid: n for sid, (n, _, _) in _rows_per_shard(con, table, ids).items()}
