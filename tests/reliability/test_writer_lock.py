"""Issue 11 row "`cudawatch alert` / `cudawatch report` while Airflow writes": with a real second
process holding the warehouse through issue 12's one writer helper (``Store.writer()``), the
commands wait for it instead of failing on DuckDB's file lock; the sandboxed `query` retries the
same way; a writer that never lets go gives one clear line and exit 3."""

from __future__ import annotations

import time

import pytest

from tests.analytics.test_store_access import _hold

from .conftest import cli


@pytest.fixture()
def small_db(tmp_path):
    from tests.reports import fleet

    return fleet.build_warehouse(tmp_path)


@pytest.mark.parametrize("command", ["report", "alert", "query"])
def test_commands_wait_for_a_writer_in_another_process(small_db, tmp_path, monkeypatch, command):
    monkeypatch.setenv("CUDAWATCH_WEBHOOK_URL", "http://127.0.0.1:9/unused")
    args = {"report": ["report", "--db", small_db, "--out", tmp_path / "r.html"], "alert": ["alert", "--db", small_db],
            "query": ["query", "--db", small_db, "--format", "json", "SELECT count(*) AS n FROM shard_ledger"]}[command]
    holder = _hold(small_db, 2)
    try:
        started = time.monotonic()
        res = cli(*args)
        waited = time.monotonic() - started
    finally:
        holder.kill()
        holder.wait()
    assert res.exit_code == 0, res.output
    assert waited >= 1.0, f"{command} did not wait ({waited:.2f} s)"


def test_query_behind_a_writer_that_never_finishes_is_one_line(small_db, monkeypatch):
    from analytics.store import access

    monkeypatch.setattr(access.Store, "__init__", _short_retry(access.Store.__init__))
    holder = _hold(small_db, 30)
    try:
        res = cli("query", "--db", small_db, "SELECT 1")
    finally:
        holder.kill()
        holder.wait()
    assert res.exit_code == 3
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: warehouse ") and "is held by a writer" in lines[0]


def _short_retry(init):
    def patched(self, db, **kw):
        kw["read_retry_s"] = 0.5
        init(self, db, **kw)
    return patched
