"""``Store``: writers queue on the shared lock, readers wait while another process writes.

A real second Python process holds the warehouse (``Store.writer()``: the writer lock and DuckDB's
own file lock), as an Airflow task would.
"""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
from typer.testing import CliRunner

from analytics.store import LockTimeout, Store, WarehouseBusy
from app.cli import app

HOLD = r"""
import sys, time
from analytics.store import Store
with Store(sys.argv[1]).writer() as con:
    con.execute("CREATE TABLE IF NOT EXISTS t AS SELECT 42 AS x")
    print("held", flush=True)
    time.sleep(float(sys.argv[2]))
"""


def _hold(db, seconds: float) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(db), str(seconds)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_reader_waits_for_a_writer_in_another_process(tmp_path):
    db = tmp_path / "w.duckdb"
    holder = _hold(db, 2)
    try:
        with pytest.raises(WarehouseBusy, match="held by a writer"):
            with Store(db, read_retry_s=0.3, poll_s=0.05).reader():
                pass
        started = time.monotonic()
        with Store(db, read_retry_s=20, poll_s=0.05).reader() as con:
            waited = time.monotonic() - started
            assert con.execute("SELECT x FROM t").fetchone() == (42,)
        assert waited >= 1.0, waited
    finally:
        holder.kill()
        holder.wait()


def test_second_writer_times_out_then_gets_the_file(tmp_path):
    db = tmp_path / "w.duckdb"
    holder = _hold(db, 2)
    try:
        with pytest.raises(LockTimeout, match="locked by another writer"):
            with Store(db, lock_timeout_s=0.3, poll_s=0.05).writer():
                pass
        with Store(db, lock_timeout_s=20, poll_s=0.05).writer() as con:  # waits for the holder
            assert con.execute("SELECT x FROM t").fetchone() == (42,)
    finally:
        holder.kill()
        holder.wait()


def test_nested_writer_and_reader_reuse_the_connection(tmp_path):
    store = Store(tmp_path / "w.duckdb")
    with store.writer() as outer:
        with store.writer() as inner, store.reader() as read:
            assert inner is outer and read is outer
    with store.reader() as read:
        with pytest.raises(RuntimeError, match="take the writer first"):
            with store.writer():
                pass


@pytest.mark.parametrize("command", ["alert", "report"])
def test_alert_and_report_wait_for_a_running_writer(tmp_path, monkeypatch, command):
    """`cudawatch alert` (a writer) and `cudawatch report` (queued reader) used to skip the lock."""
    from tests.reports import fleet

    db = fleet.build_warehouse(tmp_path)
    monkeypatch.setenv("CUDAWATCH_WEBHOOK_URL", "http://127.0.0.1:9/unused")  # nothing open to send
    args = {"alert": ["alert", "--db", str(db)], "report": ["report", "--db", str(db), "--out", str(tmp_path / "r.html")]}
    holder = _hold(db, 2)
    try:
        started = time.monotonic()
        out = CliRunner().invoke(app, args[command])
        waited = time.monotonic() - started
    finally:
        holder.kill()
        holder.wait()
    assert out.exit_code == 0, out.output
    assert waited >= 1.0, f"{command} did not wait for the writer ({waited:.2f} s)"
