"""One DuckDB transaction as a ``with`` block: committed when the block ends, rolled back (and the
error re-raised) when anything in it fails, an interrupt included."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import duckdb


@contextlib.contextmanager
def transaction(con: duckdb.DuckDBPyConnection) -> Iterator[duckdb.DuckDBPyConnection]:
    con.execute("BEGIN TRANSACTION")
    try:
        yield con
    except BaseException:
        con.execute("ROLLBACK")
        raise
    con.execute("COMMIT")
