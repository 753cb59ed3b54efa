"""Opening the warehouse and running read-only ad-hoc SQL."""

from __future__ import annotations

import os
from pathlib import Path

import duckdb
import pyarrow as pa

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
    """Run ad-hoc SQL on a read-only connection and return the result as Arrow."""
    con = connect(db, read_only=True)
    try:
        relation = con.sql(sql)
        if relation is None:  # a statement without a result
            return pa.table({})
        return relation.to_arrow_table()
    finally:
        con.close()
