"""The hourly DAG run for real under Airflow's CeleryExecutor (tests/scale/celery_stack.py:
PostgreSQL metadata DB, Redis broker, two Celery workers on loopback), partitioned layout: the
scheduler runs the hour, the workers execute every task, and the partition view holds what one
warehouse fed the same shards holds (same regressions, causes, baselines, rows, report).

Needs redis-server and PostgreSQL (Debian packages, installed by .ci/run) and the [celery] extra;
skipped without them outside CI, failed without them in CI."""

from __future__ import annotations

import os
import re
import time

import pytest

from analytics.store import PartitionView, Store, ingest_shards, partition_db
from app.hour import ANALYSIS, run_hour
from tests.scale import celery_stack
from tests.scale.clusters import HOUR, HOURS, START, content, make_clusters

TARGET = HOURS - 1  # the hour the Celery run analyses; hours before it are history
P_VALUE = re.compile(r"p-value:\s+[0-9.e+-]+")

_missing = celery_stack.missing()
if _missing and os.environ.get("CI"):
    raise RuntimeError(f"the Celery test needs {', '.join(_missing)} (.ci/run installs them)")
pytestmark = [pytest.mark.skipif(bool(_missing), reason=f"needs {', '.join(_missing)}"), pytest.mark.timeout(600)]


def _expected(base, roots):
    """One warehouse fed both clusters: history in bulk, then the target hour through run_hour
    (every partition's ingest, then the analysis once), as the single-layout DAG does."""
    single = Store(base / "single.duckdb")
    parts = [{"name": n, "shards": str(r)} for n, r in roots.items()]
    with single.writer() as con:
        for root in roots.values():
            for h in range(TARGET):
                ingest_shards(root, con, hour=START + h * HOUR)
    hour = START + TARGET * HOUR
    for part in parts:
        run_hour(single, hour, part, stages=("ingest",))
    run_hour(single, hour, stages=ANALYSIS)
    return single


def _dag_run(stack, hour):
    import psycopg2

    con = psycopg2.connect(host=str(stack.pg_sock), port=stack.pg_port, user="postgres", dbname="airflow")
    con.autocommit = True
    try:
        cur = con.cursor()
        cur.execute("SELECT run_id, state FROM dag_run WHERE dag_id = 'cudawatch_hourly' AND data_interval_start = %s", [hour])
        run = cur.fetchone()
        tis = {}
        if run:
            cur.execute("SELECT task_id, map_index, state, hostname FROM task_instance WHERE dag_id = 'cudawatch_hourly' AND run_id = %s",
                        [run[0]])
            tis = {f"{t}[{i}]" if i >= 0 else t: (s, host) for t, i, s, host in cur.fetchall()}
        return run, tis
    finally:
        con.close()


def _pause(stack):
    import psycopg2

    con = psycopg2.connect(host=str(stack.pg_sock), port=stack.pg_port, user="postgres", dbname="airflow")
    con.autocommit = True
    con.cursor().execute("UPDATE dag SET is_paused = true WHERE dag_id = 'cudawatch_hourly'")
    con.close()


def test_hourly_dag_on_celery_workers_matches_one_warehouse(tmp_path):
    from reports.render import build_report

    roots = make_clusters(tmp_path / "shards")
    single = _expected(tmp_path, roots)
    pdir = tmp_path / "partitioned"
    pdir.mkdir()
    for name, root in roots.items():
        with Store(partition_db(pdir, name)).writer() as con:
            for h in range(TARGET):
                ingest_shards(root, con, hour=START + h * HOUR)
    hour = START + TARGET * HOUR
    env = {
        "CUDAWATCH_DB": str(pdir),
        "CUDAWATCH_WAREHOUSE_LAYOUT": "partitioned",
        "CUDAWATCH_PARTITIONS": ",".join(f"{n}={r}" for n, r in roots.items()),
        "CUDAWATCH_REPORTS": str(tmp_path / "reports"),
        "CUDAWATCH_SHARDS": str(tmp_path / "shards"),
        # The scheduler's first run (catchup from the start date) is the target hour; the next
        # hour has no shards, and this grace keeps its sensor waiting, so it writes nothing.
        "CUDAWATCH_START_DATE": hour.isoformat(),
        "CUDAWATCH_WAIT_GRACE_MIN": "10000000",
        "CUDAWATCH_DUCKDB_THREADS": "1",
    }
    work = tmp_path / "stack"
    work.mkdir()
    stack = celery_stack.Stack(work, env, [celery_stack.REPO / "dags" / "cudawatch_hourly.py"])
    try:
        stack.start(pool_slots=2)  # one warehouse writer per partition file at a time
        deadline = time.monotonic() + 420
        while True:
            stack.check_alive()
            run, tis = _dag_run(stack, hour)
            if run and run[1] in ("success", "failed"):
                break
            if time.monotonic() > deadline:
                raise AssertionError(f"run not finished: {run} {tis}\n{stack.log_tail('scheduler')}")
            time.sleep(2)
        _pause(stack)
        stats = stack.worker_stats()
    finally:
        stack.stop()
    assert run[1] == "success", (tis, stack.log_tail("scheduler"), stack.log_tail("worker-w1"), stack.log_tail("worker-w2"))
    assert {k: s for k, (s, _) in tis.items()} == {k: "success" for k in tis}
    for task in ("wait_for_shards", "ingest", "update_baselines", "detect", "root_cause", "send_alerts"):
        assert {f"{task}[0]", f"{task}[1]"} <= set(tis), tis  # mapped per partition
    # Both Celery workers executed tasks (Celery's own counters, read over the broker).
    assert set(stats) == {"w1@cudawatch", "w2@cudawatch"} and all(n > 0 for n in stats.values()), stats
    # every task instance ran on a worker; a sensor's reschedule or a retry is one more execution
    assert sum(stats.values()) >= len(tis), (stats, len(tis))

    with single.reader() as con:
        want = content(con)
        want_report = build_report(con, hour.date())
    with PartitionView(pdir).reader() as con:
        got = content(con)
        got_report = build_report(con, hour.date())
    assert want["regressions"], "the slowdowns must be detected for the comparison to mean anything"
    assert got == want
    assert P_VALUE.sub("p", got_report.text) == P_VALUE.sub("p", want_report.text)
