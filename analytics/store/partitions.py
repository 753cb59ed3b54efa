"""Partitioned warehouses: one DuckDB file per partition, read together through one view.

Past one machine, each partition (a cluster, or a hash of the job: whatever keeps every job's
rows in one partition) is ingested and analysed into its own file ``<dir>/<name>.duckdb`` by its
own task, so partitions run on different workers at once. Readers -- the daily report,
``cudawatch report`` and ``cudawatch query`` given the directory -- open a ``PartitionView``: an
in-memory DuckDB connection that ATTACHes every partition file READ_ONLY and defines, for each
table any partition has, a view ``UNION ALL BY NAME`` over the partitions that have it. The
readers' SQL runs unchanged on it.

``PartitionView`` has ``Store``'s reading interface (``reader``, ``sandbox``); it never writes.
``open_store(path)`` gives a ``Store`` for a file and a ``PartitionView`` for a directory.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Iterator

import duckdb
import pyarrow as pa

from analytics.store.access import Store, open_retrying
from analytics.store.locking import writer_lock
from analytics.store.sandbox import SANDBOX_CONFIG, QueryError, check_statement, one_line
from cudawatch import inputs
from cudawatch.config import DuckDBConfig

#: A partition name: it names a file and a DuckDB catalog (one rule with the CLI's input check).
NAME = inputs.PARTITION_NAME
SUFFIX = inputs.PARTITION_SUFFIX


def check_name(name: str) -> str:
    if not NAME.match(name):
        raise ValueError(f"partition name {name!r}: use letters, digits, '_' and '-' (at most 63, not starting with '_' or '-')")
    return name


def partition_db(directory: str | os.PathLike, name: str) -> Path:
    """The warehouse file of partition ``name`` under the partitioned warehouse ``directory``."""
    return Path(directory) / f"{check_name(name)}{SUFFIX}"


def partition_files(directory: str | os.PathLike) -> dict[str, Path]:
    """name -> file of every partition warehouse in ``directory`` (sorted by name); a ``*.duckdb``
    file that is no partition, or two that DuckDB would read as one, is an error
    (``cudawatch.inputs.partition_files``), never left out."""
    d = Path(directory)
    if not d.is_dir():
        raise FileNotFoundError(f"partitioned warehouse {d} is not a directory")
    try:
        out = inputs.partition_files(d)
    except inputs.InputError as exc:
        raise ValueError(f"partitioned warehouse {d}: {exc}") from None
    if not out:
        raise FileNotFoundError(f"partitioned warehouse {d} holds no partition (*{SUFFIX}); run the hourly ingest first")
    return out


def _catalog(name: str) -> str:
    return f"p_{name.replace('-', '_')}"


def view_sql(tables: dict[str, list[str]]) -> list[str]:
    """The CREATE VIEW statements: table -> the catalogs that have it."""
    out = []
    for table, catalogs in sorted(tables.items()):
        union = " UNION ALL BY NAME ".join(f'SELECT * FROM "{c}".main."{table}"' for c in catalogs)
        out.append(f'CREATE VIEW "{table}" AS {union}')
    return out


def open_view(files: dict[str, Path], *, config: dict | None = None, seal: bool = False) -> duckdb.DuckDBPyConnection:
    """An in-memory connection with every partition file ATTACHed READ_ONLY and one view per table.

    seal: then switch off external access and lock the configuration (``analytics.store.sandbox``),
    so ad-hoc SQL can reach nothing but the attached partitions."""
    con = duckdb.connect(":memory:", config=dict(config or {}))
    try:
        con.execute("SET TimeZone = 'UTC'")
        for name, path in files.items():
            con.execute(f"ATTACH ? AS \"{_catalog(check_name(name))}\" (READ_ONLY)", [str(path)])
        have: dict[str, list[str]] = {}
        rows = con.execute("SELECT database_name, table_name FROM duckdb_tables() WHERE schema_name = 'main' "
                           "ORDER BY database_name, table_name").fetchall()
        catalogs = {_catalog(n) for n in files}
        for db, table in rows:
            if db in catalogs:
                have.setdefault(table, []).append(db)
        for stmt in view_sql(have):
            con.execute(stmt)
        if seal:
            con.execute("SET enable_external_access = false")
            con.execute("SET lock_configuration = true")
    except BaseException:
        con.close()
        raise
    return con


class PartitionView:
    """The partitioned warehouse ``directory`` for reading (``Store``'s reader interface)."""

    def __init__(self, directory: str | os.PathLike, *, lock_timeout_s: float = 600.0, read_retry_s: float = 30.0,
                 poll_s: float = 0.2, resources: DuckDBConfig | None = None) -> None:
        self.db = Path(directory)
        self.lock_timeout_s = lock_timeout_s
        self.read_retry_s = read_retry_s
        self.poll_s = poll_s
        self.resources = resources

    def __repr__(self) -> str:
        return f"PartitionView({str(self.db)!r})"

    def files(self) -> dict[str, Path]:
        return partition_files(self.db)

    def writer(self):
        """Refused (``with view.writer():`` raises before entering): each partition is written
        through its own ``Store``."""
        raise RuntimeError(f"{self.db} is a partitioned warehouse: write each partition through its own Store "
                           f"(analytics.store.partitions.partition_db)")

    @contextlib.contextmanager
    def reader(self, *, queue: bool = False) -> Iterator[duckdb.DuckDBPyConnection]:
        """The view over every partition; waits while a writer holds one. queue: first take every
        partition's writer lock (in name order, so two queued readers cannot deadlock)."""
        files = self.files()
        with contextlib.ExitStack() as stack:
            if queue:
                for path in files.values():
                    stack.enter_context(writer_lock(path, timeout_s=self.lock_timeout_s, poll_s=self.poll_s))
            con = self._open(files, seal=False)
            try:
                yield con
            finally:
                con.close()

    @contextlib.contextmanager
    def sandbox(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """The view, sealed like ``Store.sandbox`` (no external access, locked configuration)."""
        con = self._open(self.files(), seal=True)
        try:
            yield con
        finally:
            con.close()

    def _open(self, files: dict[str, Path], *, seal: bool) -> duckdb.DuckDBPyConnection:
        resources = DuckDBConfig.from_env() if self.resources is None else self.resources
        config = {k: v for k, v in resources.settings().items() if not (seal and k == "temp_directory")}
        if seal:
            config.update({k: v for k, v in SANDBOX_CONFIG.items() if k != "enable_external_access"})
        return open_retrying(lambda: open_view(files, config=config, seal=seal), f"a partition of {self.db}",
                             read_retry_s=self.read_retry_s, poll_s=self.poll_s)


def open_store(path: str | os.PathLike, **kw):
    """A ``Store`` for a warehouse file, a ``PartitionView`` for a partitioned warehouse directory."""
    return PartitionView(path, **kw) if Path(path).is_dir() else Store(path, **kw)


def query(db: str | os.PathLike, sql: str) -> pa.Table:
    """Run one ad-hoc read-only statement (SELECT or EXPLAIN) in the sandbox (``Store.sandbox``)
    and return the result as Arrow. ``db`` is a warehouse file, or a partitioned warehouse's
    directory (``analytics.store.partitions``: one view over every partition). Raises QueryError
    (one line) for a refused statement or a DuckDB error, FileNotFoundError for a missing
    warehouse, WarehouseBusy behind a long writer."""
    check_statement(sql)
    if not Path(db).exists():
        raise FileNotFoundError(f"warehouse {db} does not exist (run `cudawatch ingest` first)")
    try:
        with open_store(db).sandbox() as con:
            relation = con.sql(sql)
            return pa.table({}) if relation is None else relation.to_arrow_table()
    except duckdb.Error as exc:
        raise QueryError(one_line(exc)) from None
