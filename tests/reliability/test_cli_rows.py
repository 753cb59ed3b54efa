"""Issue 11, command rows: a sandboxed `query`, one clear line and exit 2 for unusable paths and
URLs (and no file created), escaped names in terminal tables, and a CI script that stops only
what it started. Exact exit codes and messages (docs/reliability.md)."""

from __future__ import annotations

import re
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from cudawatch import shards as sh
from cudawatch import text

from .conftest import LAST_HOUR, cli, mark_analysed_before, query

ROOT = Path(__file__).resolve().parents[2]


def _one_line_error(res, code: int = 2) -> str:
    assert res.exit_code == code, res.output
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), res.output
    assert "Traceback" not in res.output
    return lines[0]


def _tree(path: Path) -> set[str]:
    return {p.relative_to(path).as_posix() for p in path.rglob("*")}


# --- query: sandboxed by DuckDB --------------------------------------------------------------------

@pytest.fixture()
def wh(clean, tmp_path):
    """The clean warehouse, a second database and an existing file the query must not touch."""
    other = tmp_path / "other.duckdb"
    con = duckdb.connect(str(other))
    con.execute("CREATE TABLE precious AS SELECT range AS i FROM range(7)")
    con.close()
    (tmp_path / "existing.csv").write_text("keep me\n")
    return clean.db, other, tmp_path


@pytest.mark.parametrize("sql, message", [
    ("COPY kernels TO '{tmp}/x.csv'", "error: query is read-only: COPY statements are refused"),
    ("COPY kernels TO '{tmp}/existing.csv'", "error: query is read-only: COPY statements are refused"),
    ("EXPORT DATABASE '{tmp}/dump'", "error: query is read-only: EXPORT statements are refused"),
    ("ATTACH '{other}' AS o (READ_WRITE); DELETE FROM o.precious", "error: query takes exactly one SQL statement, got 2"),
    ("ATTACH '{other}' AS o (READ_WRITE)", "error: query is read-only: ATTACH statements are refused"),
    ("SELECT * FROM read_csv('/etc/passwd')", 'error: Permission Error: Cannot access file "/etc/passwd" - file system operations are disabled by configuration'),
    ("SELECT * FROM read_text('/etc/passwd')", 'error: Permission Error: Cannot access file "/etc/passwd" - file system operations are disabled by configuration'),
    ("SELECT * FROM glob('/root/*')", 'error: Permission Error: Cannot access file "/root/*" - file system operations are disabled by configuration'),
    ("SET threads = 1", "error: query is read-only: SET statements are refused"),
    ("PRAGMA threads = 1", "error: query is read-only: SET statements are refused"),
    ("CHECKPOINT", "error: query is read-only: CALL statements are refused"),
    ("INSTALL httpfs", "error: query is read-only: LOAD statements are refused"),
    ("LOAD httpfs", "error: query is read-only: LOAD statements are refused"),
])
def test_query_refuses_writes_files_extensions_and_settings(wh, sql, message):
    db, other, tmp = wh
    before = _tree(tmp)
    line = _one_line_error(cli("query", "--db", db, sql.format(tmp=tmp, other=other)))
    assert line.startswith(message), line
    assert _tree(tmp) == before and (tmp / "existing.csv").read_text() == "keep me\n"
    assert query(other, "SELECT count(*) FROM precious") == [(7,)]


def test_query_still_answers_selects(wh):
    db, _, _ = wh
    res = cli("query", "--db", db, "--format", "json", "SELECT count(DISTINCT gpu_uuid) AS gpus FROM device")
    assert res.exit_code == 0 and res.output.strip().replace(" ", "").replace("\n", "") == '[{"gpus":16}]'


# --- paths: one line, exit 2, nothing created -----------------------------------------------------

def test_missing_shard_root_and_typo_db(tmp_path):
    line = _one_line_error(cli("ingest", "--shards", tmp_path / "does" / "not" / "exist", "--db", tmp_path / "w.duckdb"))
    assert line == f"error: --shards {tmp_path / 'does' / 'not' / 'exist'}: no such folder"
    line = _one_line_error(cli("analyze", "--db", tmp_path / "typo.duckdb"))
    assert line == f"error: --db {tmp_path / 'typo.duckdb'}: no such warehouse (run `cudawatch ingest --shards DIR --db {tmp_path / 'typo.duckdb'}` first)"
    assert _tree(tmp_path) == set()


@pytest.fixture()
def bad_dbs(tmp_path):
    folder = tmp_path / "adir"
    folder.mkdir()
    text = tmp_path / "notes.txt"
    text.write_text("not a database\n")
    return {"directory": (folder, "is a directory, not a DuckDB file"), "text": (text, "not a DuckDB database file")}


COMMANDS = {
    "ingest": lambda db, tmp: ["ingest", "--shards", tmp, "--db", db],
    "analyze": lambda db, tmp: ["analyze", "--db", db],
    "report": lambda db, tmp: ["report", "--db", db, "--out", tmp / "r.html"],
    "diff": lambda db, tmp: ["diff", "--db", db, "--job", "j", "--before", "2026-11-01T00", "--after", "2026-11-02T00"],
    "alert": lambda db, tmp: ["alert", "--db", db],
    "query": lambda db, tmp: ["query", "--db", db, "SELECT 1"],
}


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize("kind", ["directory", "text"])
def test_db_that_is_a_directory_or_not_duckdb(bad_dbs, tmp_path, command, kind, monkeypatch):
    monkeypatch.setenv("CUDAWATCH_WEBHOOK_URL", "http://127.0.0.1:9/hook")
    db, words = bad_dbs[kind]
    if kind == "directory" and command in ("query", "report"):  # these two read a partitioned warehouse directory
        words = "a directory without partition warehouses (*.duckdb)"
    before = _tree(tmp_path)
    line = _one_line_error(cli(*COMMANDS[command](db, tmp_path)))
    assert line == f"error: --db {db}: {words}"
    assert _tree(tmp_path) == before


def test_report_out_is_a_directory_and_simulate_out_is_a_file(clean, tmp_path):
    out_dir = tmp_path / "reports"
    out_dir.mkdir()
    line = _one_line_error(cli("report", "--db", clean.db, "--out", out_dir))
    assert line == f"error: --out {out_dir}: is a directory; give a file name (e.g. {out_dir / 'report.html'})"
    f = tmp_path / "file.txt"
    f.write_text("x")
    line = _one_line_error(cli("simulate", "--out", f, "--gpus", "1", "--hours", "1"))
    assert line == f"error: --out {f}: is a file, not a folder"
    assert _tree(tmp_path) == {"reports", "file.txt"} and f.read_text() == "x"


@pytest.mark.parametrize("url, words", [
    ("not-a-url", "must be an http:// or https:// URL, got no scheme"),
    ("http://h:abc", "is not a valid URL (bad port or syntax)"),
    ("file:///etc/passwd", "must be an http:// or https:// URL, got file://"),
    ("ftp://example.com/hook", "must be an http:// or https:// URL, got ftp://"),
])
@pytest.mark.parametrize("name", ["CUDAWATCH_WEBHOOK_URL", "CUDAWATCH_SLACK_WEBHOOK_URL"])
def test_alert_urls_checked_at_start(clean, tmp_path, monkeypatch, name, url, words):
    monkeypatch.delenv("CUDAWATCH_WEBHOOK_URL", raising=False)
    monkeypatch.delenv("CUDAWATCH_SLACK_WEBHOOK_URL", raising=False)
    monkeypatch.setenv(name, url)
    line = _one_line_error(cli("alert", "--db", clean.db))
    assert line == f"error: {name} {words}"


# --- names in terminal tables ---------------------------------------------------------------------

HOSTILE = "\x1b[2J\x1b]0;owned\x07evil\u202eknl<" + "T," * 80 + ">(int)"


def test_control_and_bidi_characters_never_reach_the_terminal(copy, truth, tmp_path):
    slow = next(t for t in truth["regressions"] if t["kind"] == "kernel_slowdown")
    for path in sh.list_shards(copy, "kernels"):
        d = pq.read_table(path)
        names = [HOSTILE if k == slow["kernel_id"] else n for k, n in zip(d.column("kernel_id").to_pylist(), d.column("kernel").to_pylist())]
        pq.write_table(d.set_column(d.schema.get_field_index("kernel"), "kernel", pa.array(names)), path)
    db = tmp_path / "w.duckdb"
    assert cli("ingest", "--shards", copy, "--db", db).exit_code == 0
    mark_analysed_before(db, LAST_HOUR)
    outputs = {
        "analyze": cli("analyze", "--db", db, env={"COLUMNS": "300"}),
        "query": cli("query", "--db", db, "SELECT DISTINCT kernel FROM kernels WHERE kernel LIKE '%evil%'"),
    }
    for name, res in outputs.items():
        assert res.exit_code == 0, (name, res.output)
        bad = [c for c in res.output if (ord(c) < 32 and c != "\n") or 0x7f <= ord(c) <= 0x9f or 0x202a <= ord(c) <= 0x202e]
        assert bad == [], (name, bad)
    assert "\\x1b[2J\\x1b]0;owned\\x07evil\\u202eknl<T,T," in outputs["query"].output.replace("\n", "").replace("│", "").replace(" ", "")
    # analyze: the one shortening rule (head … tail [kernel id]); unsafe characters removed there
    shown = text.shorten_name(HOSTILE, slow["kernel_id"])
    assert len(shown) == text.NAME_LIMIT and shown.startswith("[2J]0;ownedevilknl<T,T,") and "…" in shown
    assert shown.endswith(f"T,>(int) [{slow['kernel_id']}]")
    assert shown in outputs["analyze"].output


# --- CI script --------------------------------------------------------------------------------------

def test_ci_script_stops_only_what_it_started():
    """.ci/run never kills a process by name; it keeps services from starting (policy-rc.d) and
    kills only PIDs that appeared during its own install."""
    script = (ROOT / ".ci" / "run").read_text()
    code = "\n".join(ln.split("#", 1)[0] for ln in script.splitlines())
    assert not re.search(r"\b(pkill|killall)\b", code)
    assert not re.search(r"service\s+\S+\s+stop", code)
    assert "policy-rc.d" in code and 'kill "$pid"' in code
