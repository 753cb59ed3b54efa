"""``Store``: the one way every command and Airflow task opens the warehouse.

DuckDB lets one process open a file for writing, and a read-only connection cannot open it while
another process writes (https://duckdb.org/docs/connect/concurrency). So:

- ``Store.writer()`` takes the writer lock beside the file (``<db>.lock``, shared by the CLI's
  ingest/analyze/alert/report/maintenance and every Airflow task), then opens a writable
  connection; a second writer waits up to ``lock_timeout_s`` and then gets ``LockTimeout``.
- ``Store.reader()`` opens a read-only connection and, while a writer holds the file, retries for
  up to ``read_retry_s`` before raising ``WarehouseBusy``. ``reader(queue=True)`` first queues on
  the writer lock (reports: they must not fail behind a long ``analyze``).

Both are re-entrant: inside ``writer()`` a nested ``writer()`` or ``reader()`` reuses the open
connection, so a composition (``app.hour.run_hour``) can be called under a longer writer.
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path
from typing import Callable, Iterator

import duckdb

from analytics.store.db import connect
from analytics.store.locking import writer_lock
from analytics.store.sandbox import connect_sandboxed
from cudawatch.config import DuckDBConfig


class WarehouseBusy(RuntimeError):
    """A reader could not open the warehouse because a writer kept it locked for too long."""


def _is_lock_conflict(exc: duckdb.Error) -> bool:
    text = str(exc).lower()
    return "lock" in text and ("conflicting" in text or "could not set lock" in text)


def open_retrying(opener: Callable[[], duckdb.DuckDBPyConnection], what: str, *, read_retry_s: float,
                  poll_s: float) -> duckdb.DuckDBPyConnection:
    """``opener()``, retried every ``poll_s`` while a writer holds the file (a lock conflict), for up
    to ``read_retry_s``; then ``WarehouseBusy`` naming ``what``. Other errors pass through."""
    deadline = time.monotonic() + read_retry_s
    while True:
        try:
            return opener()
        except duckdb.IOException as exc:
            if not _is_lock_conflict(exc):
                raise
            if time.monotonic() >= deadline:
                raise WarehouseBusy(f"{what} is held by a writer; waited {read_retry_s:.0f} s for read access ({exc})") from exc
            time.sleep(poll_s)


class Store:
    """The warehouse file ``db`` and the rules for opening it (see the module docstring)."""

    def __init__(self, db: str | os.PathLike, *, lock_timeout_s: float = 600.0, read_retry_s: float = 30.0,
                 poll_s: float = 0.2, resources: DuckDBConfig | None = None) -> None:
        self.db = Path(db)
        self.resources = resources  # DuckDB threads/memory/temp dir; None: CUDAWATCH_DUCKDB_* at connect
        self.lock_timeout_s = lock_timeout_s
        self.read_retry_s = read_retry_s
        self.poll_s = poll_s
        self._con: duckdb.DuckDBPyConnection | None = None
        self._writable = False

    def __repr__(self) -> str:
        return f"Store({str(self.db)!r})"

    @contextlib.contextmanager
    def writer(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """A writable connection under the writer lock (created with its tables if missing)."""
        if self._con is not None:
            if not self._writable:
                raise RuntimeError("Store.writer() inside Store.reader(): take the writer first")
            yield self._con
            return
        self.db.parent.mkdir(parents=True, exist_ok=True)
        with writer_lock(self.db, timeout_s=self.lock_timeout_s, poll_s=self.poll_s):
            con = connect(self.db, resources=self.resources)
            self._con, self._writable = con, True
            try:
                yield con
            finally:
                self._con, self._writable = None, False
                con.close()

    @contextlib.contextmanager
    def reader(self, *, queue: bool = False) -> Iterator[duckdb.DuckDBPyConnection]:
        """A read-only connection; waits (up to ``read_retry_s``) while a writer holds the file.

        queue: take the writer lock first (waiting up to ``lock_timeout_s``, like a writer), for
        readers that must not fail behind a long writer: the report commands and the daily task.
        """
        if self._con is not None:
            yield self._con
            return
        with contextlib.ExitStack() as stack:
            if queue:
                stack.enter_context(writer_lock(self.db, timeout_s=self.lock_timeout_s, poll_s=self.poll_s))
            con = self._open_read_only()
            self._con, self._writable = con, False
            try:
                yield con
            finally:
                self._con = None
                con.close()

    @contextlib.contextmanager
    def sandbox(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """A read-only connection sealed by DuckDB's own settings (``analytics.store.sandbox``: no
        external access, locked configuration) for ad-hoc SQL; retries like ``reader``."""
        con = self._open_read_only(connect_sandboxed)
        try:
            yield con
        finally:
            con.close()

    def _open_read_only(self, opener=None) -> duckdb.DuckDBPyConnection:
        def open_once():
            return opener(self.db) if opener else connect(self.db, read_only=True, resources=self.resources)

        return open_retrying(open_once, f"warehouse {self.db}", read_retry_s=self.read_retry_s, poll_s=self.poll_s)
