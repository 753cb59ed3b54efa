"""Opening the warehouse and running read-only ad-hoc SQL."""

from __future__ import annotations

import os
from pathlib import Path

import duckdb
import pyarrow as pa

from analytics.store.sandbox import sandboxed_query
from analytics.store.schema import ensure_schema


def connect(db: str | os.PathLike, *, read_only: bool = False) -> duckdb.DuckDBPyConnection:
    """Open the warehouse; a writable connection also creates any missing table."""
    if read_only and not Path(db).exists():
        raise FileNotFoundError(f"warehouse {db} does not exist (run `cudawatch ingest` first)")
    con = duckdb.connect(str(db), read_only=read_only)
    con.execute("SET TimeZone = 'UTC'")
    if not read_only:
        ensure_schema(con)
    return con


def query(db: str | os.PathLike, sql: str) -> pa.Table:
    """Run one ad-hoc read-only statement in the sandbox (``analytics.store.sandbox``: read-only,
    no external access, locked configuration) and return the result as Arrow. Raises QueryError
    (one line) for a refused statement or a DuckDB error."""
    return sandboxed_query(db, sql)
