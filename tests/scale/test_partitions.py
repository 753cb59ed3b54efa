"""Partitioned warehouses (analytics.store.partitions): two clusters, each ingested and analysed
into its own file through app.hour.run_hour, read back through one read-only view, give the same
regressions, causes, baselines, rows and report as one warehouse fed both clusters."""

from __future__ import annotations

import re

import duckdb
import pytest

from analytics.store import PartitionView, Store, open_store, partition_db, query
from analytics.store.sandbox import QueryError
from app.hour import ANALYSIS, run_hour
from tests.scale.clusters import HOUR, HOURS, START, content, make_clusters

P_VALUE = re.compile(r"p-value:\s+[0-9.e+-]+")
HISTORY = 20  # hours ingested in bulk before the hour-by-hour runs


@pytest.fixture(scope="module")
def warehouses(tmp_path_factory):
    from analytics.store import ingest_shards

    base = tmp_path_factory.mktemp("partitions")
    roots = make_clusters(base / "shards")
    parts = {name: {"name": name, "shards": str(root)} for name, root in roots.items()}
    single = Store(base / "single.duckdb")
    pdir = base / "partitioned"
    pdir.mkdir()
    stores = {name: Store(partition_db(pdir, name)) for name in parts}
    with single.writer() as con:
        for root in roots.values():
            for h in range(HISTORY):
                ingest_shards(root, con, hour=START + h * HOUR)
    for name, store in stores.items():
        with store.writer() as con:
            for h in range(HISTORY):
                ingest_shards(roots[name], con, hour=START + h * HOUR)
    for h in range(HISTORY, HOURS):
        hour = START + h * HOUR
        # one warehouse: every partition's ingest, then the analysis once (what the DAG does)
        for part in parts.values():
            run_hour(single, hour, part, stages=("ingest",))
        run_hour(single, hour, stages=ANALYSIS)
        # partitioned: each partition ingests and analyses into its own file
        for name, part in parts.items():
            run_hour(stores[name], hour, part)
    return {"single": single.db, "dir": pdir, "parts": parts}


def test_view_gives_the_single_warehouse_content(warehouses):
    with Store(warehouses["single"]).reader() as con:
        want = content(con)
    with PartitionView(warehouses["dir"]).reader() as con:
        got = content(con)
    assert want["regressions"], "the injected slowdowns must be detected for the comparison to mean anything"
    assert {r[3].split("-")[0] for r in want["regressions"]} == {"east", "west"}
    assert got == want


def test_each_partition_holds_only_its_cluster(warehouses):
    for name in warehouses["parts"]:
        con = duckdb.connect(str(partition_db(warehouses["dir"], name)), read_only=True)
        try:
            jobs = {r[0] for r in con.execute("SELECT DISTINCT job FROM kernels").fetchall()}
            events = con.execute("SELECT count(*) FROM regressions").fetchone()[0]
        finally:
            con.close()
        assert jobs and all(j.startswith(f"{name}-") for j in jobs)
        assert events > 0


def test_report_is_the_same(warehouses):
    from reports.render import build_report

    day = (START + (HOURS - 1) * HOUR).date()
    with Store(warehouses["single"]).reader() as con:
        want = build_report(con, day)
    with open_store(warehouses["dir"]).reader(queue=True) as con:
        got = build_report(con, day)
    # the p-values differ (the drift estimate is pooled per warehouse, see tests/scale/clusters.py)
    assert P_VALUE.sub("p-value: <p>", want.text) == P_VALUE.sub("p-value: <p>", got.text)
    assert want.subject == got.subject and P_VALUE.search(got.text)
    assert "east-" in got.text and "west-" in got.text


def test_query_reads_all_partitions_and_stays_sealed(warehouses, tmp_path):
    sql = "SELECT job, count(*) AS n FROM regressions GROUP BY job ORDER BY job"
    assert query(warehouses["dir"], sql).to_pylist() == query(warehouses["single"], sql).to_pylist()
    other = tmp_path / "other.duckdb"
    duckdb.connect(str(other)).close()
    for bad in (f"SELECT * FROM read_csv('{other}')", "SELECT * FROM glob('/etc/*')"):
        with pytest.raises(QueryError, match="disabled"):
            query(warehouses["dir"], bad)
    for bad in (f"ATTACH '{other}' AS o", "DETACH p_east", "INSERT INTO p_east.kernels SELECT * FROM p_east.kernels"):
        with pytest.raises(QueryError):
            query(warehouses["dir"], bad)


def test_view_refuses_writes_and_bad_directories(warehouses, tmp_path):
    with pytest.raises(RuntimeError, match="partitioned warehouse"):
        with PartitionView(warehouses["dir"]).writer():
            pass
    with PartitionView(warehouses["dir"]).reader() as con:
        with pytest.raises(duckdb.Error, match="read-only"):
            con.execute("DELETE FROM p_east.main.kernels")
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="no partition"):
        with PartitionView(tmp_path / "empty").reader():
            pass
    with pytest.raises(ValueError, match="partition name"):
        partition_db(tmp_path, "../evil")


def test_view_waits_for_a_writer_of_one_partition(tmp_path):
    """A partition held by a writer in another process: the view retries, then WarehouseBusy
    names the directory; once the writer is done it reads every partition."""
    import time

    from analytics.store import WarehouseBusy
    from tests.analytics.test_store_access import _hold

    for name in ("a", "b"):
        with Store(partition_db(tmp_path, name)).writer() as con:
            con.execute("CREATE TABLE t AS SELECT 42 AS x")
    holder = _hold(partition_db(tmp_path, "b"), 2)
    try:
        with pytest.raises(WarehouseBusy, match=f"a partition of {tmp_path} is held by a writer"):
            with PartitionView(tmp_path, read_retry_s=0.3, poll_s=0.05).reader():
                pass
        started = time.monotonic()
        with PartitionView(tmp_path, read_retry_s=20, poll_s=0.05).sandbox() as con:
            waited = time.monotonic() - started
            assert con.execute("SELECT count(*) FROM t").fetchone() == (2,)
        assert waited >= 1.0, waited
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.parametrize("files, words", [
    (("east", "East"), "East.duckdb and east.duckdb are one partition to DuckDB"),
    (("a-b", "a_b"), "a-b.duckdb and a_b.duckdb are one partition to DuckDB"),
    (("east", "_old"), "_old.duckdb is not named like a partition"),
    (("east", "corrupt"), "partition corrupt.duckdb is not a DuckDB database file"),
])
def test_a_partition_directory_that_is_wrong_is_refused_not_half_read(tmp_path, files, words):
    """Every *.duckdb file in the directory is a partition: a misnamed, colliding or corrupt one is
    a clear error from the view and a one-line error from the CLI, never a file silently left out."""
    from typer.testing import CliRunner

    from app.cli import app

    for name in files:
        if name == "corrupt":
            (tmp_path / "corrupt.duckdb").write_bytes(b"not a database\n" * 100)
            continue
        with Store(tmp_path / f"{name}.duckdb").writer():
            pass
    if name != "corrupt":
        with pytest.raises(ValueError, match=re.escape(words)):
            PartitionView(tmp_path).files()
    for argv in (["query", "--db", str(tmp_path), "SELECT 1"],
                 ["report", "--db", str(tmp_path), "--out", str(tmp_path / "out" / "r.html")]):
        result = CliRunner().invoke(app, argv)
        assert result.exit_code == 2, (argv, result.output)
        lines = result.output.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"error: --db {tmp_path}: {words}"), result.output


def test_airflow_steps_on_the_partitioned_layout_work_on_one_partition_file(warehouses, tmp_path, monkeypatch):
    """The DAG's step functions in the partitioned layout: one analysis target per ingested
    partition, and a stage on a target touches that partition's file only (here: alerts to an
    unreachable webhook fail the task, recorded in east's outbox, none in west's)."""
    import shutil

    from app import steps

    pdir = tmp_path / "partitioned"
    shutil.copytree(warehouses["dir"], pdir, ignore=shutil.ignore_patterns("*.lock"))
    for key, value in {"CUDAWATCH_DB": str(pdir), "CUDAWATCH_WAREHOUSE_LAYOUT": "partitioned",
                       "CUDAWATCH_SHARDS": str(tmp_path), "CUDAWATCH_WEBHOOK_URL": "http://127.0.0.1:9/hook"}.items():
        monkeypatch.setenv(key, value)
    targets = steps.analysis_targets([{"partition": "west"}, {"partition": "east"}, {"partition": "east"}])
    assert targets == [{"warehouse": "east"}, {"warehouse": "west"}]
    hour = START + (HOURS - 1) * HOUR
    assert steps.send_alerts(hour, targets[0]) == {"hour": hour.isoformat(), "warehouse": "east"}
    sql = "SELECT count(*) AS n, count(*) FILTER (WHERE state = 'pending' AND last_error IS NOT NULL) AS retry FROM alert_outbox"
    east = query(partition_db(pdir, "east"), sql).to_pylist()[0]
    assert east["n"] > 0 and east["retry"] == east["n"], east
    assert query(pdir, sql).to_pylist()[0] == east  # the view: west has no outbox (never alerted)
    west = query(partition_db(pdir, "west"), "SELECT count(*) AS n FROM duckdb_tables() WHERE table_name = 'alert_outbox'")
    assert west.to_pylist() == [{"n": 0}]
    assert steps.root_cause(hour, targets[1]) == {"hour": hour.isoformat(), "warehouse": "west"}
