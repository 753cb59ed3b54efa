"""The CLI end to end on small real shards: ingest, query (table/csv/json), errors."""

import csv
import io
import json
import subprocess
import sys

from typer.testing import CliRunner

from cudawatch import shards as sh
from app.cli import app
from tests.test_shards import HOUR, kernel_rows

runner = CliRunner()


def _shards(tmp_path):
    root = tmp_path / "shards"
    sh.write_shard(root, "kernels", kernel_rows(), HOUR, host="h0", pid=1)
    return root


def test_ingest_then_query_formats(tmp_path):
    root, db = _shards(tmp_path), tmp_path / "w.duckdb"
    out = runner.invoke(app, ["ingest", "--shards", str(root), "--db", str(db)])
    assert out.exit_code == 0, out.output
    assert "loaded 1 shards (kernels=3)" in out.output
    again = runner.invoke(app, ["ingest", "--shards", str(root), "--db", str(db)])
    assert "loaded 0 shards" in again.output and "1 already loaded" in again.output

    sql = "SELECT job, sum(launches) AS launches FROM kernels GROUP BY job"
    as_json = runner.invoke(app, ["query", "--db", str(db), "--format", "json", sql])
    assert json.loads(as_json.output) == [{"job": "train", "launches": 33}]
    as_csv = runner.invoke(app, ["query", "--db", str(db), "--format", "csv", sql])
    assert list(csv.DictReader(io.StringIO(as_csv.output))) == [{"job": "train", "launches": "33"}]
    as_table = runner.invoke(app, ["query", "--db", str(db), sql])
    assert "train" in as_table.output and "33" in as_table.output


def test_query_errors_are_messages_not_tracebacks(tmp_path):
    root, db = _shards(tmp_path), tmp_path / "w.duckdb"
    runner.invoke(app, ["ingest", "--shards", str(root), "--db", str(db)])
    out = runner.invoke(app, ["query", "--db", str(db), "DROP TABLE kernels"])
    assert out.exit_code == 2
    assert "read-only" in out.output
    assert "Traceback" not in out.output


def test_ingest_reports_quarantined_shards(tmp_path):
    root, db = _shards(tmp_path), tmp_path / "w.duckdb"
    (sh.partition_dir(root, "kernels", HOUR) / "x-1-bad.parquet").write_bytes(b"junk")
    out = runner.invoke(app, ["ingest", "--shards", str(root), "--db", str(db)])
    assert out.exit_code == 0
    assert "1 quarantined" in out.output
    assert "quarantined kernels/date=2026-11-01/hour=05/x-1-bad.parquet: " in out.output


def test_console_script_help_lists_the_contract_commands():
    out = subprocess.run([sys.executable, "-m", "cudawatch", "--help"], capture_output=True, text=True, check=True)
    for command in ("demo", "simulate", "ingest", "analyze", "report", "query", "diff"):
        assert command in out.stdout


def test_simulate_rejects_a_bad_injection_spec_cleanly(tmp_path):
    out = runner.invoke(app, ["simulate", "--out", str(tmp_path / "s"), "--gpus", "8", "--hours", "4", "--inject", "kind=bogus"])
    assert out.exit_code == 2
    assert "error:" in out.output and "bogus" in out.output
    assert "Traceback" not in out.output


def test_bad_times_are_usage_errors(tmp_path):
    root, db = _shards(tmp_path), tmp_path / "w.duckdb"
    out = runner.invoke(app, ["ingest", "--shards", str(root), "--db", str(db), "--hour", "yesterday"])
    assert out.exit_code == 2
    assert "not an ISO 8601 time" in out.output


def test_ingest_waits_for_the_writer_lock(tmp_path):
    """A hand-run ingest shares the Airflow tasks' writer lock: it waits for the holder to finish
    instead of failing on DuckDB's file lock."""
    import time

    root, db = _shards(tmp_path), tmp_path / "w.duckdb"
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import sys, time\nfrom analytics.store.locking import writer_lock\n"
         f"with writer_lock({str(db)!r}):\n    print('held', flush=True)\n    time.sleep(2)\n"],
        stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    started = time.monotonic()
    out = runner.invoke(app, ["ingest", "--shards", str(root), "--db", str(db)])
    waited = time.monotonic() - started
    holder.wait(timeout=30)
    assert out.exit_code == 0 and "loaded 1 shards" in out.output
    assert waited >= 1.0, f"ingest did not wait for the lock holder ({waited:.2f} s)"


def test_simulate_jobs_option(tmp_path):
    out = runner.invoke(app, ["simulate", "--out", str(tmp_path / "s"), "--gpus", "16", "--hours", "4", "--jobs", "6"])
    assert out.exit_code == 0, out.output
    doc = json.loads((tmp_path / "s" / "ground_truth.json").read_text())
    assert len(doc["jobs"]) == 6 and doc["jobs_arg"] == 6
    bad = runner.invoke(app, ["simulate", "--out", str(tmp_path / "t"), "--gpus", "4", "--hours", "2", "--jobs", "5"])
    assert bad.exit_code == 2 and "more than the 4 GPUs" in bad.output
