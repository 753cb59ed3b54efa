"""The sandboxed ad-hoc query behind ``cudawatch query``: DuckDB itself enforces read-only SQL.

Three locks, each enough on its own for the cases it covers:

* the warehouse is opened ``read_only`` (no INSERT/UPDATE/DELETE/CREATE on it);
* ``enable_external_access = false`` (DuckDB's documented sandbox setting, docs "Securing DuckDB"):
  no file or network access beyond the database file, so ``COPY ... TO``, ``EXPORT DATABASE``,
  ``ATTACH``, ``INSTALL``/``LOAD`` and the file-reading functions (``read_csv``, ``read_text``,
  ``read_blob``, ``glob``, ``'file.parquet'``) fail; extension autoloading and community extensions
  are off; then ``lock_configuration = true``, so no ``SET``/``PRAGMA``/``RESET`` can undo any of it;
* exactly one statement per call, and only SELECT (incl. WITH, FROM-first, DESCRIBE, SHOW,
  SUMMARIZE, VALUES) or EXPLAIN: ``CHECKPOINT``, ``VACUUM``, ``BEGIN``, ``PRAGMA``, ``CALL`` and the
  rest are refused before DuckDB runs anything.

Every refusal and every DuckDB error is a ``QueryError`` with a one-line message. The store's
``query`` (``analytics.store.access``) runs a statement here, retrying while a writer holds the file.
"""

from __future__ import annotations

import os

import duckdb

#: Connection settings of the sandbox (set at connect; the configuration is locked afterwards).
SANDBOX_CONFIG = {
    "enable_external_access": False,
    "autoinstall_known_extensions": False,
    "autoload_known_extensions": False,
    "allow_community_extensions": False,
}

_ALLOWED = {"SELECT", "EXPLAIN"}


class QueryError(ValueError):
    """A query that was refused or failed; ``str()`` is one line."""


def one_line(exc: BaseException) -> str:
    """The first line of an exception's message (DuckDB appends hints and carets below)."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def check_statement(sql: str) -> None:
    """Raise QueryError unless ``sql`` is exactly one SELECT or EXPLAIN statement."""
    try:
        statements = duckdb.extract_statements(sql)
    except duckdb.Error as exc:
        raise QueryError(one_line(exc)) from None
    if len(statements) != 1:
        raise QueryError(f"query takes exactly one SQL statement, got {len(statements)}")
    kind = statements[0].type.name
    if kind not in _ALLOWED:
        raise QueryError(f"query is read-only: {kind} statements are refused (use SELECT, WITH, DESCRIBE, SHOW or EXPLAIN)")


def connect_sandboxed(db: str | os.PathLike) -> duckdb.DuckDBPyConnection:
    """A read-only, externally sealed, configuration-locked connection to an existing warehouse."""
    from cudawatch.config import DuckDBConfig

    limits = {k: v for k, v in DuckDBConfig.from_env().settings().items() if k != "temp_directory"}
    con = duckdb.connect(os.fspath(db), read_only=True, config={**limits, **SANDBOX_CONFIG})
    try:
        con.execute("SET TimeZone = 'UTC'")
        con.execute("SET lock_configuration = true")
    except BaseException:
        con.close()
        raise
    return con
