"""Opening the warehouse file (callers go through ``analytics.store.Store``)."""

from __future__ import annotations

import os
from pathlib import Path

import duckdb

from analytics.store.schema import ensure_schema, stale_rollups
from cudawatch.config import DuckDBConfig


class WarehouseOutdated(RuntimeError):
    """A read-only connection found rollups an older cudawatch wrote; a writable open migrates them."""


def connect(db: str | os.PathLike, *, read_only: bool = False, resources: DuckDBConfig | None = None) -> duckdb.DuckDBPyConnection:
    """Open the warehouse; a writable connection also creates any missing table.

    resources: DuckDB threads, memory limit and temp directory (default: ``DuckDBConfig.from_env()``,
    the ``CUDAWATCH_DUCKDB_*`` variables); unset values keep DuckDB's defaults.
    """
    if read_only and not Path(db).exists():
        raise FileNotFoundError(f"warehouse {db} does not exist (run `cudawatch ingest` first)")
    resources = DuckDBConfig.from_env() if resources is None else resources
    con = duckdb.connect(str(db), read_only=read_only, config=resources.settings())
    con.execute("SET TimeZone = 'UTC'")
    if not read_only:
        ensure_schema(con)
    else:
        stale = stale_rollups(con)
        if stale:
            con.close()
            raise WarehouseOutdated(f"warehouse {db} was written by an older cudawatch (rollups not current: "
                                 + ", ".join(f"{n} {w}" for n, w in stale.items())
                                 + "); open it writable once to migrate, e.g. `cudawatch ingest` or `cudawatch analyze`")
    return con
