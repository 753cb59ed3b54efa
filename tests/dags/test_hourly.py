"""The hourly DAG end to end with dag.test() on real Airflow, DuckDB and a loopback webhook.

One simulated fleet (8 GPUs, 29 hours, a 25 % kernel slowdown from hour 24) is shared by the
module: hours 0-25 are loaded outside Airflow as history, the DAG backfills hours 26-28, and
hour 27 is re-run. A second, two-cluster fleet checks partition mapping and a missing shard.
"""

from __future__ import annotations

import datetime as dt
import json

import duckdb
import pytest

from tests.dags.conftest import START, run_dag, task_states

HOUR = dt.timedelta(hours=1)
ONSET = 24
PAST = 26  # hours loaded before the DAG runs


def _counts(db) -> dict:
    con = duckdb.connect(str(db), read_only=True)
    try:
        have = {r[0] for r in con.execute("SELECT table_name FROM duckdb_tables()").fetchall()}
        out = {t: con.execute(f"SELECT count(*) FROM {t}").fetchone()[0] if t in have else None
               for t in ("kernels", "memcpy", "device", "health", "shard_ledger", "data_gaps", "regressions")}
        out["regression_rows"] = con.execute("SELECT * FROM regressions ORDER BY ALL").fetchall() if "regressions" in have else None
        for t in ("baselines", "findings"):  # whole content, as row count and per-column hash sums
            out[t] = con.execute(f"SELECT count(*), sum(hash(columns(*))::HUGEINT) FROM {t}").fetchone() if t in have else None
        out["alert_outbox"] = (con.execute("SELECT event_id, channel, state, attempts, payload FROM alert_outbox ORDER BY ALL").fetchall()
                               if "alert_outbox" in have else None)
        return out
    finally:
        con.close()


@pytest.fixture(scope="module")
def fleet(tmp_path_factory, airflow_db):
    """Shards of the fleet plus a warehouse holding hours 0..PAST-1 (the history)."""
    from analytics import store
    from simulator import simulate_fleet
    from simulator.injections import Injection

    base = tmp_path_factory.mktemp("hourly")
    shards, db = base / "shards", base / "cudawatch.duckdb"
    truth = simulate_fleet(shards, gpus=8, hours=29, seed=11, start=START,
                           injections=[Injection("kernel_slowdown", hour=ONSET, pct=25)])
    con = store.connect(db)
    try:
        for h in range(PAST):
            store.ingest_shards(shards, con, hour=START + h * HOUR)
    finally:
        con.close()
    return {"shards": shards, "db": db, "reports": base / "reports", "truth": truth.regressions[0]}


@pytest.fixture(scope="module")
def env(fleet):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CUDAWATCH_SHARDS", str(fleet["shards"]))
        mp.setenv("CUDAWATCH_DB", str(fleet["db"]))
        mp.setenv("CUDAWATCH_REPORTS", str(fleet["reports"]))
        yield mp


def _hour_run(dagbag, hour: int):
    """Run the hourly DAG for simulated hour ``hour`` (the logical date ends the interval)."""
    dr = run_dag(dagbag, "cudawatch_hourly", START + (hour + 1) * HOUR)
    assert str(dr.state) == "success", task_states(dr)
    return dr


def test_backfill_three_hours_then_rerun_changes_nothing(dagbag, fleet, env, webhook, monkeypatch):
    # The webhook URL comes from the Airflow connection, which wins over the environment fallback.
    import os

    url = os.environ["CUDAWATCH_WEBHOOK_URL"]
    monkeypatch.setenv("AIRFLOW_CONN_CUDAWATCH_WEBHOOK", json.dumps({"conn_type": "http", "password": url}))
    monkeypatch.setenv("CUDAWATCH_WEBHOOK_URL", "http://127.0.0.1:9/not-this-one")
    before = _counts(fleet["db"])
    for hour in (PAST, PAST + 1, PAST + 2):
        dr = _hour_run(dagbag, hour)
        states = task_states(dr)
        assert set(states.values()) == {"success"}, states
        assert "ingest[0]" in states and "wait_for_shards[0]" in states  # mapped over one partition
    after = _counts(fleet["db"])

    # Each run loaded exactly its hour: 3 hours x 4 tables x 1 host (8 GPUs on one host).
    assert after["shard_ledger"] - before["shard_ledger"] == 3 * 4
    con = duckdb.connect(str(fleet["db"]), read_only=True)
    con.execute("SET TimeZone = 'UTC'")
    hours = [r[0].hour for r in con.execute("SELECT DISTINCT date_trunc('hour', window_start) FROM kernels ORDER BY 1").fetchall()]
    con.close()
    assert len(hours) == PAST + 3
    assert after["data_gaps"] == 0

    # The injected slowdown was detected and alerted once, with its kernel and job.
    truth = fleet["truth"]
    ids = [e for m in webhook for e in m["body"]["incident"]["new_event_ids"]]
    assert len(ids) == len(set(ids)), "an event was alerted twice"
    hits = [x for m in webhook for x in m["body"]["incident"]["members"] if x["kernel_id"] == truth["kernel_id"]]
    assert len(hits) == 1, [m["body"]["regression"]["kernel"] for m in webhook]
    reg = hits[0]
    assert reg["job"] == truth["job"]
    assert reg["onset"].startswith((START + ONSET * HOUR).strftime("%Y-%m-%dT%H"))
    assert reg["magnitude_pct"] > 15
    assert all(m["headers"].get("Idempotency-Key") == m["body"]["idempotency_key"] for m in webhook)

    assert after["baselines"][0] > 0 and after["alert_outbox"]
    # Re-running the middle hour changes nothing: rows, ledger, baselines, regressions, findings,
    # the alert outbox, and the alerts the webhook received.
    received = len(webhook)
    _hour_run(dagbag, PAST + 1)
    assert _counts(fleet["db"]) == after
    assert len(webhook) == received


def test_daily_report_is_archived_and_emailed(dagbag, fleet, env, smtp_server, monkeypatch):
    """The daily DAG renders the report of the last simulated day and e-mails it via SmtpHook."""
    monkeypatch.setenv("CUDAWATCH_EMAIL_TO", "gpu-team@example.com,oncall@example.com")
    day = START.date() + dt.timedelta(days=1)
    dr = run_dag(dagbag, "cudawatch_daily_report", dt.datetime.combine(day + dt.timedelta(days=1), dt.time(0, 45), dt.timezone.utc))
    assert str(dr.state) == "success", task_states(dr)

    folder = fleet["reports"] / day.isoformat()
    html = (folder / "report.html").read_text()
    truth = fleet["truth"]
    assert truth["job"] in html and truth["kernel"][:40] in html
    assert (folder / "mail" / "report.txt").exists()

    assert len(smtp_server) == 1
    env_from, rcpt, msg = smtp_server[0]
    assert sorted(rcpt) == ["gpu-team@example.com", "oncall@example.com"]
    assert day.isoformat() in msg["Subject"]
    body = msg.get_body(("html",)).get_content()
    assert truth["job"] in body and "cid:" in body
    # SmtpHook.send_email_smtp attaches the charts as files of a multipart/related message: every
    # cid: in the HTML names one of them, and each is a PNG.
    import re

    assert msg.get_content_type() == "multipart/related"
    parts = {p["Content-ID"].strip("<>"): p.get_payload(decode=True) for p in msg.walk() if p["Content-ID"]}
    referenced = set(re.findall(r'src="cid:([^"]+)"', body))
    assert referenced and referenced <= set(parts), (referenced, set(parts))
    assert all(data.startswith(b"\x89PNG") for data in parts.values())

    # Re-running the day (a retry, a clear in the UI) archives again but does not mail twice.
    again = run_dag(dagbag, "cudawatch_daily_report", dt.datetime.combine(day + dt.timedelta(days=1), dt.time(0, 45), dt.timezone.utc))
    assert str(again.state) == "success", task_states(again)
    assert len(smtp_server) == 1


def test_missing_shard_completes_and_records_gap_across_partitions(dagbag, airflow_db, tmp_path, monkeypatch, webhook):
    """Two clusters (two mapped partitions); one host's kernel shard of the hour never arrives."""
    from simulator import simulate_fleet
    from cudawatch import shards as sh

    roots = {}
    for name, seed in (("east", 1), ("west", 2)):
        roots[name] = tmp_path / name
        simulate_fleet(roots[name], gpus=8, hours=4, seed=seed, start=START, injections=[])
    hour = START + 3 * HOUR
    lost = sh.list_shards(roots["west"], "kernels", hour)
    assert len(lost) == 1
    lost[0].unlink()
    db = tmp_path / "cudawatch.duckdb"
    monkeypatch.setenv("CUDAWATCH_DB", str(db))
    # Partitions from the Airflow Variable cudawatch_partitions, which wins over the environment.
    monkeypatch.setenv("AIRFLOW_VAR_CUDAWATCH_PARTITIONS", ",".join(f"{n}={p}" for n, p in roots.items()))
    monkeypatch.setenv("CUDAWATCH_PARTITIONS", f"wrong={tmp_path / 'nowhere'}")
    from analytics import store

    con = store.connect(db)
    for root in roots.values():
        for h in range(3):
            store.ingest_shards(root, con, hour=START + h * HOUR)
    con.close()

    dr = _hour_run(dagbag, 3)
    states = task_states(dr)
    assert {k for k in states if k.startswith("ingest")} == {"ingest[0]", "ingest[1]"}
    con = duckdb.connect(str(db), read_only=True)
    con.execute("SET TimeZone = 'UTC'")
    gaps = con.execute("SELECT partition_name, host, table_name, last_seen FROM data_gaps").fetchall()
    loaded = con.execute("SELECT count(*) FROM shard_ledger WHERE partition_hour = ?", [hour]).fetchone()[0]
    con.close()
    assert [(p, h, t) for p, h, t, _ in gaps] == [("west", lost[0].name.rsplit("-", 2)[0], "kernels")]
    assert gaps[0][3] == hour - HOUR
    assert loaded == 2 * 4 - 1
    assert webhook == []  # a clean fleet raises no alert

    # The shard turns up late; re-running the hour loads it and clears the gap.
    simulate_fleet(tmp_path / "late", gpus=8, hours=4, seed=2, start=START, injections=[])
    late = sh.list_shards(tmp_path / "late", "kernels", hour)[0]
    late.rename(lost[0])
    _hour_run(dagbag, 3)
    con = duckdb.connect(str(db), read_only=True)
    assert con.execute("SELECT count(*) FROM data_gaps").fetchone()[0] == 0
    assert con.execute("SELECT count(*) FROM shard_ledger WHERE partition_hour = ?", [hour]).fetchone()[0] == 2 * 4
    con.close()
