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
    for command in ("demo", "simulate", "ingest", "analyze", "calibrate", "report", "query", "diff"):
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


# --- a CLI that guides (issue 13) ----------------------------------------------------------------

def _warehouse(tmp_path, gpus: int, hours: int):
    root, db = tmp_path / "sim", tmp_path / "w.duckdb"
    for argv in (["simulate", "--out", str(root), "--gpus", str(gpus), "--hours", str(hours), "--seed", "11"],
                 ["ingest", "--shards", str(root), "--db", str(db)]):
        out = runner.invoke(app, argv)
        assert out.exit_code == 0, out.output
    return db


def test_version():
    from cudawatch import __version__

    out = runner.invoke(app, ["--version"])
    assert out.exit_code == 0 and out.output.strip() == f"cudawatch {__version__}"


def test_analyze_says_why_a_short_warehouse_has_no_regressions(tmp_path):
    db = _warehouse(tmp_path, 8, 6)
    out = runner.invoke(app, ["analyze", "--db", str(db)])
    assert out.exit_code == 0, out.output
    assert "0 regressions" in out.output
    assert "needs >= 24 h of history per series; this warehouse has 6 h" in out.output


def test_analyze_and_diff_tables_fit_80_columns(tmp_path):
    """At 80 columns no line is wider than the terminal, the onset is whole, names lose their
    middle (never the time), and csv/json carry every value whole."""
    db = _warehouse(tmp_path, 8, 30)
    wide = runner.invoke(app, ["analyze", "--db", str(db), "--format", "json"])
    events = json.loads(wide.output)["regressions"]
    assert events, "the simulated fleet has injected regressions"
    out = runner.invoke(app, ["analyze", "--db", str(db)], env={"COLUMNS": "80"}, terminal_width=80)
    assert out.exit_code == 0, out.output
    lines = out.output.splitlines()
    assert max(len(line) for line in lines) <= 80, "\n".join(lines)
    for e in events:  # every onset whole, in the report's order
        assert dt_hour(e["onset"]) in out.output
    assert [dt_hour(e["onset"]) for e in events] == [line for line in _onsets(lines)]
    as_csv = list(csv.DictReader(io.StringIO(runner.invoke(app, ["analyze", "--db", str(db), "--format", "csv"]).output)))
    assert [r["event_id"] for r in as_csv] == [e["event_id"] for e in events]
    assert any(len(r["kernel"]) > 80 for r in as_csv if r["kernel"])  # whole names in CSV
    kernel_event = next(e for e in events if e["kernel_id"] and e["before"] > 0)
    diff = runner.invoke(app, ["diff", "--db", str(db), "--event", kernel_event["event_id"]], env={"COLUMNS": "80"})
    assert diff.exit_code == 0, diff.output
    body = diff.output.splitlines()[1:]
    assert max(len(line) for line in body) <= 80 and len(body) < 80, diff.output  # no 16 columns wrapped over 20+ lines
    assert f"{kernel_event['size']['change_pct']:+.1f}%" in diff.output.splitlines()[0]
    as_json = json.loads(runner.invoke(app, ["diff", "--db", str(db), "--event", kernel_event["event_id"], "--format", "json"]).output)
    assert {"kernel_id", "mean_ns_before", "change_pct", "configs_changed"} <= set(as_json[0])


def dt_hour(iso: str) -> str:
    import datetime as dt

    return f"{dt.datetime.fromisoformat(iso):%m-%d %H:00}"


def _onsets(lines):
    import re

    rows = [line for line in lines if not line.startswith("analysed")]
    return [m.group() for line in rows for m in [re.search(r"\d\d-\d\d \d\d:00", line)] if m]


def test_doctor_points_to_the_demo_without_a_gpu():
    from collector.doctor import check_driver

    out = runner.invoke(app, ["doctor"])
    if check_driver().status == "ok":
        assert "cudawatch demo" not in out.output
    else:
        assert "cudawatch demo" in out.output, out.output


def test_query_table_fits_80_columns(tmp_path):
    """Ad-hoc SQL results fit the terminal: long kernel names wrap, numbers stay whole."""
    db = _warehouse(tmp_path, 8, 2)
    sql = "SELECT kernel, launches, total_ns FROM kernels ORDER BY length(kernel) DESC, launches DESC LIMIT 5"
    out = runner.invoke(app, ["query", "--db", str(db), sql], env={"COLUMNS": "80"}, terminal_width=80)
    assert out.exit_code == 0, out.output
    assert max(len(line) for line in out.output.splitlines()) <= 80, out.output
    rows = json.loads(runner.invoke(app, ["query", "--db", str(db), "--format", "json", sql]).output)
    assert len(rows[0]["kernel"]) > 80  # a name that had to wrap
    for r in rows:
        assert str(r["launches"]) in out.output and str(r["total_ns"]) in out.output
