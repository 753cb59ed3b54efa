"""``cudawatch analyze`` on a fresh 72 h warehouse equals 72 hourly runs, and re-running changes nothing.

The hourly side runs, for each hour in order, the stages the hourly DAG's tasks run
(``app.hour.run_hour``: ingest of the hour, baselines, detect, root cause); tests/dags checks
that the DAG's tasks are exactly those stages. The two injected regressions have their onsets
27 h and 24 h before the last hour: a single analysis at the last hour used to treat them as
history and report neither.
"""

from __future__ import annotations

import datetime as dt
import json

import duckdb
import pytest
from typer.testing import CliRunner

from analytics import store
from analytics.store import Store
from app.cli import app
from app.hour import ANALYSIS, run_hour
from simulator import simulate_fleet
from simulator.injections import Injection

UTC = dt.timezone.utc
START = dt.datetime(2026, 11, 1, tzinfo=UTC)
HOURS = 72
HOUR = dt.timedelta(hours=1)


def _tables(db) -> dict:
    """The analysis tables' whole content (baselines and findings as row count and hash sum)."""
    con = duckdb.connect(str(db), read_only=True)
    try:
        con.execute("SET TimeZone = 'UTC'")
        return {
            "regressions": con.execute("SELECT * EXCLUDE (series_key) FROM regressions ORDER BY event_id").fetchall(),
            "findings": con.execute("SELECT event_id, rule, confidence, evidence FROM findings ORDER BY ALL").fetchall(),
            "baselines": con.execute("SELECT count(*), sum(hash(series_key, as_of, ewma, median, mad))::HUGEINT FROM baselines").fetchone(),
            "analysed": con.execute("SELECT count(*), min(hour), max(hour) FROM analysed_hours").fetchone(),
        }
    finally:
        con.close()


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    base = tmp_path_factory.mktemp("catchup")
    shards = base / "shards"
    truth = simulate_fleet(shards, gpus=8, hours=HOURS, seed=23, start=START, injections=[
        Injection("pageable_memcpy", hour=HOURS - 1 - 27, pct=200),
        Injection("kernel_slowdown", hour=HOURS - 1 - 24, pct=25),
    ])
    # Hour by hour, as the hourly DAG runs them.
    hourly = Store(base / "hourly.duckdb")
    partition = {"name": "default", "shards": str(shards)}
    for h in range(HOURS):
        run_hour(hourly, START + h * HOUR, partition, stages=("ingest", *ANALYSIS))
    # All at once, then one `cudawatch analyze`.
    fresh = base / "fresh.duckdb"
    con = store.connect(fresh)
    try:
        store.ingest_shards(shards, con)
    finally:
        con.close()
    out = CliRunner().invoke(app, ["analyze", "--db", str(fresh), "--json"])
    assert out.exit_code == 0, out.output
    return {"truth": truth.regressions, "hourly": hourly.db, "fresh": fresh, "reported": _v1(json.loads(out.stdout))}


def test_analyze_reports_what_the_hourly_runs_reported(fleet):
    hourly, fresh = _tables(fleet["hourly"]), _tables(fleet["fresh"])
    assert fresh["analysed"] == (HOURS, START, START + (HOURS - 1) * HOUR)
    assert fresh == hourly
    with Store(fleet["hourly"]).reader() as con:
        from analytics.store.regressions import reported_since

        want = [r.to_json() for r in reported_since(con, START, START + (HOURS - 1) * HOUR)]
    # the same events (analyze lists them in the daily report's order)
    assert sorted(fleet["reported"], key=lambda e: e["event_id"]) == sorted(json.loads(json.dumps(want)), key=lambda e: e["event_id"])


def test_regressions_of_the_day_before_are_reported(fleet):
    reported = fleet["reported"]
    slow = next(t for t in fleet["truth"] if t["kind"] == "kernel_slowdown")
    copy = next(t for t in fleet["truth"] if t["kind"] == "pageable_memcpy")
    kernel = [r for r in reported if r["kernel_id"] == slow["kernel_id"]]
    assert kernel and kernel[0]["onset"].startswith((START + (HOURS - 1 - 24) * HOUR).strftime("%Y-%m-%dT%H")), reported
    memcpy = [r for r in reported if r["series"].startswith("memcpy_") and r["job"] == copy["job"]]
    assert memcpy and abs(dt.datetime.fromisoformat(memcpy[0]["onset"]) - (START + (HOURS - 1 - 27) * HOUR)) <= HOUR, reported
    assert "pageable_memcpy" in memcpy[0]["causes"] and "kernel_slower" in kernel[0]["causes"]


def _v1(analyzed: dict) -> list[dict]:
    """The regressions of ``analyze --format json`` (v2) as v1 listed them (without their incident id)."""
    return [{k: v for k, v in r.items() if k != "incident_id"} for r in analyzed["regressions"]]


def test_rerunning_analyze_changes_nothing(fleet):
    before = _tables(fleet["fresh"])
    out = CliRunner().invoke(app, ["analyze", "--db", str(fleet["fresh"]), "--json"])
    assert out.exit_code == 0, out.output
    assert _v1(json.loads(out.stdout)) == fleet["reported"]
    assert _tables(fleet["fresh"]) == before
