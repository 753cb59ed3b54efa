"""Opening the warehouse file (callers go through ``analytics.store.Store``)."""

from __future__ import annotations

import os
from pathlib import Path

import duckdb

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
